//! A second tiny Llama for the GGUF block types (hidden 256, intermediate 512, 4 heads of
//! 64, 2 KV heads, 2 layers, the tiny fixture's vocabulary of 320: the tiny fixture's
//! hidden size of 64 cannot hold 256-weight K blocks), written with core's test GGUF
//! writer from random blocks (random codes, finite random scales sized so the activations
//! stay O(1)). Shared by native_blocks.rs and q8_blocks.rs.
#![allow(dead_code)] // each test binary uses its own subset

#[path = "../../../core/tests/gguf_writer/mod.rs"]
mod gguf_writer;

use std::path::Path;

pub use gguf_writer::{Meta, T};
use tl_quant::f32_to_f16;

use super::common::fixture;

/// Prompts of the tests over this model (ids of the fixture's vocabulary).
pub const PROMPTS: [&[u32]; 3] = [&[256, 72, 101, 108, 108, 111], &[256, 84], &[256, 49, 50, 51]];
/// The vocabulary size.
pub const V: usize = 320;

/// GGML type id, block bytes, weights per block, f16 scale offsets and a scale magnitude
/// that keeps |w| around 0.05.
pub fn ty(name: &str) -> (u32, usize, usize, &'static [usize], f32) {
    match name {
        "Q5_0" => (6, 22, 32, &[0], 4e-3),
        "Q5_1" => (7, 24, 32, &[0, 2], 4e-3),
        "Q2_K" => (10, 84, 256, &[80, 82], 4e-3),
        "Q3_K" => (11, 110, 256, &[108], 2e-4),
        "Q4_K" => (12, 144, 256, &[0, 2], 2e-4),
        "Q5_K" => (13, 176, 256, &[0, 2], 1e-4),
        "Q6_K" => (14, 210, 256, &[208], 5e-5),
        "IQ4_NL" => (20, 18, 32, &[0], 1e-3),
        other => panic!("no type {other}"),
    }
}

pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
    pub fn f(&mut self) -> f32 {
        self.next() as f32 / (1u64 << 31) as f32 - 1.0
    }
}

pub fn random_tensor(name: &str, shape: &[usize], t: &str, rng: &mut Lcg) -> T {
    let (id, bb, k, at, scale) = ty(t);
    let n = shape.iter().product::<usize>() / k * bb;
    let mut data: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
    for blk in data.chunks_exact_mut(bb) {
        for (i, &a) in at.iter().enumerate() {
            // d of either sign; dmin / m positive (llama.cpp's mins are offsets below 0).
            let v = scale * (0.5 + rng.f().abs()) * if i == 0 && rng.next().is_multiple_of(2) { -1.0 } else { 1.0 };
            blk[a..a + 2].copy_from_slice(&f32_to_f16(v).to_le_bytes());
        }
    }
    T { name: name.into(), shape: shape.to_vec(), ty: id, data }
}

/// A tiny Llama GGUF with config.json in `dir`; `pick(tensor)` chooses each matrix's type.
pub fn write_model(dir: &Path, pick: &dyn Fn(&str, usize) -> &'static str, rng: &mut Lcg) {
    write_model_with(dir, pick, rng, &mut |_| {})
}

/// [`write_model`], with `edit` applied to the tensors before they are written (tests
/// that damage a block).
pub fn write_model_with(
    dir: &Path,
    pick: &dyn Fn(&str, usize) -> &'static str,
    rng: &mut Lcg,
    edit: &mut dyn FnMut(&mut [T]),
) {
    let (d, inter, heads, kv_heads, layers) = (256, 512, 4, 2, 2);
    let mut tensors = vec![random_tensor("token_embd.weight", &[V, d], pick("token_embd", 0), rng)];
    let norm = |name: String, rng: &mut Lcg| {
        let w: Vec<f32> = (0..d).map(|_| 1.0 + 0.2 * rng.f()).collect();
        gguf_writer::f32_tensor(&name, &[d], &w)
    };
    tensors.push(norm("output_norm.weight".into(), rng));
    for l in 0..layers {
        tensors.push(norm(format!("blk.{l}.attn_norm.weight"), rng));
        tensors.push(norm(format!("blk.{l}.ffn_norm.weight"), rng));
        for (part, out, inp) in [
            ("attn_q", d, d),
            ("attn_k", kv_heads * 64, d),
            ("attn_v", kv_heads * 64, d),
            ("attn_output", d, d),
            ("ffn_gate", inter, d),
            ("ffn_up", inter, d),
            ("ffn_down", d, inter),
        ] {
            tensors.push(random_tensor(&format!("blk.{l}.{part}.weight"), &[out, inp], pick(part, l), rng));
        }
    }
    let meta = vec![
        ("general.architecture", Meta::Str("llama")),
        ("llama.attention.head_count", Meta::U32(heads as u32)),
        ("llama.attention.head_count_kv", Meta::U32(kv_heads as u32)),
    ];
    edit(&mut tensors);
    gguf_writer::write(&dir.join("model.gguf"), &meta, &tensors);
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("tiny-llama").join("config.json")).unwrap()).unwrap();
    cfg["hidden_size"] = d.into();
    cfg["intermediate_size"] = inter.into();
    cfg["head_dim"] = 64.into();
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
}

/// A fresh directory under the temp dir, named for the process and `tag`.
pub fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tl-native-blocks-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}
