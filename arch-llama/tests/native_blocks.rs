//! Every GGUF block type tl keeps as stored gives, loaded `--weights native`, the logits of
//! the same file loaded `--weights f32` (widened by `tl_quant::dequantize`), bit for bit, at
//! batch 1 and in a batch of three sequences.
//!
//! The tiny fixture's hidden size (64) cannot hold 256-weight K blocks, so these files are a
//! second tiny Llama (hidden 256, intermediate 512, 4 heads of 64, 2 KV heads, 2 layers,
//! the fixture's vocabulary of 320) with random blocks (random codes, finite random
//! scales sized so the activations stay O(1)): the property under test holds for any
//! weights. One file per type (every projection and the tied embedding/LM head in it), and
//! one mixed as llama-quantize's Q4_K_M mixes them (Q4_K, attn_v/ffn_down Q6_K, a Q5_0
//! fallback, Q6_K head), written with core's test GGUF writer.

mod common;

use tl_arch_llama as _;
#[path = "../../core/tests/gguf_writer/mod.rs"]
mod gguf_writer;

use std::path::Path;

use common::*;
use gguf_writer::{Meta, T};
use tl_core::{ForwardBatch, ForwardSeq, ModelRunner, Weights};
use tl_quant::f32_to_f16;

const PROMPTS: [&[u32]; 3] = [&[256, 72, 101, 108, 108, 111], &[256, 84], &[256, 49, 50, 51]];
const V: usize = 320;

/// GGML type id, block bytes, weights per block, f16 scale offsets and a scale magnitude
/// that keeps |w| around 0.05.
fn ty(name: &str) -> (u32, usize, usize, &'static [usize], f32) {
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

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
    fn f(&mut self) -> f32 {
        self.next() as f32 / (1u64 << 31) as f32 - 1.0
    }
}

fn random_tensor(name: &str, shape: &[usize], t: &str, rng: &mut Lcg) -> T {
    let (id, bb, k, at, scale) = ty(t);
    let n = shape.iter().product::<usize>() / k * bb;
    let mut data: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
    for blk in data.chunks_exact_mut(bb) {
        for (i, &a) in at.iter().enumerate() {
            // d of either sign; dmin / m positive (llama.cpp's mins are offsets below 0).
            let v = scale * (0.5 + rng.f().abs()) * if i == 0 && rng.next() % 2 == 0 { -1.0 } else { 1.0 };
            blk[a..a + 2].copy_from_slice(&f32_to_f16(v).to_le_bytes());
        }
    }
    T { name: name.into(), shape: shape.to_vec(), ty: id, data }
}

/// A tiny Llama GGUF with config.json in `dir`; `pick(tensor)` chooses each matrix's type.
fn write_model(dir: &Path, pick: &dyn Fn(&str, usize) -> &'static str, rng: &mut Lcg) {
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
    gguf_writer::write(&dir.join("model.gguf"), &meta, &tensors);
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("tiny-llama").join("config.json")).unwrap()).unwrap();
    cfg["hidden_size"] = d.into();
    cfg["intermediate_size"] = inter.into();
    cfg["head_dim"] = 64.into();
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
}

/// Logits of a batch of three prompts, two decode steps of the three, and the first
/// prompt alone.
fn schedule(r: &mut ModelRunner) -> Vec<Vec<f32>> {
    let blocks: Vec<Vec<u32>> = PROMPTS.iter().map(|p| alloc(r, p.len() + 4)).collect();
    let seqs: Vec<ForwardSeq> =
        PROMPTS.iter().zip(&blocks).map(|(p, b)| ForwardSeq { tokens: p, start: 0, blocks: b }).collect();
    let mut out = vec![r.forward(&ForwardBatch { seqs }).expect("prefill").data];
    for step in 0..2 {
        let next: Vec<[u32; 1]> = (0..3).map(|s| [argmax(&out.last().unwrap()[s * V..(s + 1) * V])]).collect();
        let seqs: Vec<ForwardSeq> = (0..3)
            .map(|s| ForwardSeq { tokens: &next[s], start: PROMPTS[s].len() + step, blocks: &blocks[s] })
            .collect();
        out.push(r.forward(&ForwardBatch { seqs }).expect("decode").data);
    }
    for b in &blocks {
        release(r, b);
    }
    out.push(run_in_steps(r, PROMPTS[0], &[2, 1]));
    out
}

fn assert_native_equals_f32(dir: &Path, what: &str) {
    let load = |w| ModelRunner::load(dir, &engine(0, w)).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (mut native, mut widened) = (load(Weights::Native), load(Weights::F32));
    // Kept as blocks: the packed weights are near the file's bytes, not 4 bytes a weight.
    let file = std::fs::metadata(dir.join("model.gguf")).unwrap().len() as f64;
    let (nb, fb) = (native.weight_bytes().unwrap() as f64, widened.weight_bytes().unwrap() as f64);
    assert!(nb < 1.1 * file && fb > 3.0 * nb, "{what}: native {nb} B, f32 {fb} B, file {file} B");
    let (a, b) = (schedule(&mut native), schedule(&mut widened));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(x.iter().all(|v| v.is_finite()), "{what}: step {i} has non-finite logits");
        assert!(x.iter().any(|&v| v != x[0]), "{what}: step {i}: constant logits");
        assert_eq!(bits(x), bits(y), "{what}: step {i}: native and f32 logits differ");
    }
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tl-native-blocks-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

#[test]
fn every_block_type_native_equals_f32_bit_for_bit() {
    let mut rng = Lcg(21);
    for t in ["Q4_K", "Q6_K", "Q5_K", "Q5_0", "Q5_1", "Q3_K", "Q2_K", "IQ4_NL"] {
        let dir = tempdir(t);
        write_model(&dir, &|_, _| t, &mut rng);
        assert_native_equals_f32(&dir, t);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_q4_k_m_mix_native_equals_f32_bit_for_bit() {
    let mut rng = Lcg(22);
    let dir = tempdir("q4km");
    let pick = |part: &str, layer: usize| match (part, layer) {
        ("token_embd", _) | ("attn_v", _) => "Q6_K",
        ("ffn_down", 0) => "Q6_K",
        ("ffn_down", _) => "Q5_0", // llama-quantize's fallback where a type does not fit
        _ => "Q4_K",
    };
    write_model(&dir, &pick, &mut rng);
    assert_native_equals_f32(&dir, "Q4_K_M mix");
    let _ = std::fs::remove_dir_all(&dir);
}
