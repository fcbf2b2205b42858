//! Native weights give the f32 path's logits bit for bit, for every stored format.
//!
//! The tiny Llama's weights are rewritten as safetensors F32/F16/BF16 and as GGUF files
//! whose projections are Q4_0, Q4_1, Q8_0 or F16 (Q8_0 tied embedding/LM head, as the
//! SmolLM2 package has), next to its config.json. Each file is loaded twice, `native`
//! (kept as stored) and `f32` (widened at load: the GGUF blocks through Candle's
//! dequantizer), and both run the same steps: a batch of three sequences of different
//! lengths, then decode steps of the three together, then one sequence alone.

mod common;

// Name the plugin crate so its registrations ("llama") are linked.
use tl_arch_llama as _;
#[path = "../../core/tests/gguf_writer/mod.rs"]
mod gguf_writer;

use std::collections::HashMap;
use std::path::Path;

use common::*;
use gguf_writer::{Meta, T};
use tl_core::{ForwardBatch, ForwardSeq, ModelRunner, SafeTensors, WeightStore, Weights};
use tl_quant::{f16_to_f32, f32_to_f16};

const PROMPTS: [&[u32]; 3] = [&[256, 72, 101, 108, 108, 111, 44, 32, 119], &[256, 84], &[256, 49, 50, 51, 52, 53, 54]];

/// Logits of every step of a fixed schedule, in order.
fn schedule(r: &mut ModelRunner) -> Vec<Vec<f32>> {
    let blocks: Vec<Vec<u32>> = PROMPTS.iter().map(|p| alloc(r, p.len() + 4)).collect();
    let mut out = Vec::new();
    let seqs: Vec<ForwardSeq> = PROMPTS
        .iter()
        .zip(&blocks)
        .map(|(p, b)| ForwardSeq { tokens: p, start: 0, blocks: b, adapter: None })
        .collect();
    out.push(r.forward(&ForwardBatch { seqs }).expect("prefill").data);
    for step in 0..3 {
        let next: Vec<[u32; 1]> = (0..3).map(|s| [argmax(&out.last().unwrap()[s * 320..(s + 1) * 320])]).collect();
        let seqs: Vec<ForwardSeq> = (0..3)
            .map(|s| ForwardSeq { tokens: &next[s], start: PROMPTS[s].len() + step, blocks: &blocks[s], adapter: None })
            .collect();
        out.push(r.forward(&ForwardBatch { seqs }).expect("decode").data);
    }
    for b in &blocks {
        release(r, b);
    }
    out.push(run_in_steps(r, PROMPTS[0], &[4, 1]));
    out
}

fn engine(weights: Weights) -> tl_core::EngineConfig {
    common::engine(0, weights)
}

fn assert_native_equals_f32(dir: &Path, what: &str) {
    let mut native = ModelRunner::load(dir, &engine(Weights::Native)).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut widened = ModelRunner::load(dir, &engine(Weights::F32)).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (a, b) = (schedule(&mut native), schedule(&mut widened));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(x.iter().all(|v| v.is_finite()), "{what}: step {i} has non-finite logits");
        assert_eq!(bits(x), bits(y), "{what}: step {i}: native and f32 logits differ");
    }
}

/// The fixture's tensors widened to f32, by HF name, with shapes.
fn fixture_tensors() -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let st = SafeTensors::open(&fixture("tiny-llama").join("model.safetensors")).expect("fixture");
    st.names()
        .into_iter()
        .map(|n| {
            let shape = st.info(&n).expect("info").shape;
            let w = st.f32(&n, &shape).expect("read");
            (n, shape, w)
        })
        .collect()
}

fn copy_config(dir: &Path) {
    std::fs::copy(fixture("tiny-llama").join("config.json"), dir.join("config.json")).expect("config");
}

fn write_safetensors(dir: &Path, dtype: safetensors::Dtype) {
    let tensors = fixture_tensors();
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, _, w)| match dtype {
            safetensors::Dtype::F32 => w.iter().flat_map(|v| v.to_le_bytes()).collect(),
            safetensors::Dtype::F16 => w.iter().flat_map(|v| f32_to_f16(*v).to_le_bytes()).collect(),
            // The fixture is bf16: its values' top halves are exact.
            _ => w.iter().flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes()).collect(),
        })
        .collect();
    let views: HashMap<String, safetensors::tensor::TensorView> = tensors
        .iter()
        .zip(&bytes)
        .map(|((n, s, _), b)| (n.clone(), safetensors::tensor::TensorView::new(dtype, s.clone(), b).expect("view")))
        .collect();
    safetensors::serialize_to_file(&views, None, &dir.join("model.safetensors")).expect("write");
    copy_config(dir);
}

#[test]
fn native_safetensors_equal_f32_bit_for_bit() {
    for (dtype, what) in
        [(safetensors::Dtype::BF16, "bf16"), (safetensors::Dtype::F16, "f16"), (safetensors::Dtype::F32, "f32")]
    {
        let dir = tempdir(what);
        write_safetensors(&dir, dtype);
        assert_native_equals_f32(&dir, &format!("safetensors {what}"));
    }
}

/// GGML blocks of 32 for `w` (rows of `inp`): type id 2 = Q4_0, 3 = Q4_1, 8 = Q8_0.
fn blocks(w: &[f32], ty: u32) -> Vec<u8> {
    let mut out = Vec::new();
    for b in w.chunks_exact(32) {
        let (lo, hi) = b.iter().fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
        let amax = b.iter().fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        match ty {
            8 => {
                let d = f16_to_f32(f32_to_f16(amax.abs() / 127.0));
                out.extend(f32_to_f16(d).to_le_bytes());
                out.extend(
                    b.iter().map(|&v| if d == 0.0 { 0 } else { (v / d).round().clamp(-127.0, 127.0) as i8 as u8 }),
                );
            }
            2 => {
                // llama.cpp's Q4_0: d = signed max / -8, so d is often negative.
                let d = f16_to_f32(f32_to_f16(amax / -8.0));
                out.extend(f32_to_f16(d).to_le_bytes());
                let q = |v: f32| if d == 0.0 { 8 } else { ((v / d).round() + 8.0).clamp(0.0, 15.0) as u8 };
                out.extend((0..16).map(|j| q(b[j]) | q(b[j + 16]) << 4));
            }
            _ => {
                let d = f16_to_f32(f32_to_f16((hi - lo) / 15.0));
                let m = f16_to_f32(f32_to_f16(lo));
                out.extend(f32_to_f16(d).to_le_bytes());
                out.extend(f32_to_f16(m).to_le_bytes());
                let q = |v: f32| if d == 0.0 { 0 } else { ((v - m) / d).round().clamp(0.0, 15.0) as u8 };
                out.extend((0..16).map(|j| q(b[j]) | q(b[j + 16]) << 4));
            }
        }
    }
    out
}

fn gguf_name(hf: &str) -> String {
    if hf == "model.embed_tokens.weight" {
        return "token_embd.weight".into();
    }
    if hf == "model.norm.weight" {
        return "output_norm.weight".into();
    }
    let rest = hf.strip_prefix("model.layers.").expect("a layer tensor");
    let (l, part) = rest.split_once('.').expect("layer.part");
    let g = match part {
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        "mlp.down_proj.weight" => "ffn_down.weight",
        "input_layernorm.weight" => "attn_norm.weight",
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        other => panic!("unexpected tensor {other}"),
    };
    format!("blk.{l}.{g}")
}

/// The tiny Llama as model.gguf: projections of type `ty` (1 = F16), the tied table Q8_0.
fn write_gguf(dir: &Path, ty: u32) {
    let (heads, kv_heads) = (4, 2);
    let mut tensors = Vec::new();
    for (name, shape, w) in fixture_tensors() {
        let gname = gguf_name(&name);
        let w = if gname.ends_with("attn_q.weight") {
            gguf_writer::llama_cpp_permute(&w, shape[0], shape[1], heads)
        } else if gname.ends_with("attn_k.weight") {
            gguf_writer::llama_cpp_permute(&w, shape[0], shape[1], kv_heads)
        } else {
            w
        };
        let (t, data) = match (shape.len(), gname.as_str()) {
            (1, _) => (0, w.iter().flat_map(|v| v.to_le_bytes()).collect()),
            (_, "token_embd.weight") => (8, blocks(&w, 8)),
            _ if ty == 1 => (1, w.iter().flat_map(|v| f32_to_f16(*v).to_le_bytes()).collect()),
            _ => (ty, blocks(&w, ty)),
        };
        tensors.push(T { name: gname, shape, ty: t, data });
    }
    let meta = vec![
        ("general.architecture", Meta::Str("llama")),
        ("llama.attention.head_count", Meta::U32(heads as u32)),
        ("llama.attention.head_count_kv", Meta::U32(kv_heads as u32)),
    ];
    gguf_writer::write(&dir.join("model.gguf"), &meta, &tensors);
    copy_config(dir);
}

#[test]
fn native_gguf_blocks_equal_f32_bit_for_bit() {
    for (ty, what) in [(3, "Q4_1"), (2, "Q4_0"), (8, "Q8_0"), (1, "F16")] {
        let dir = tempdir(what);
        write_gguf(&dir, ty);
        assert_native_equals_f32(&dir, &format!("gguf {what}"));
    }
}

#[test]
fn quantized_gguf_still_tracks_the_float_model() {
    // A sanity bound that the files above are real models, not zeros: Q8_0 logits stay
    // close to the bf16 fixture's.
    let dir = tempdir("q8-close");
    write_gguf(&dir, 8);
    let mut q8 = ModelRunner::load(&dir, &engine(Weights::Native)).expect("q8");
    let mut bf = ModelRunner::load(&fixture("tiny-llama"), &engine(Weights::Native)).expect("fixture");
    let (a, b) = (run_in_steps(&mut q8, PROMPTS[0], &[]), run_in_steps(&mut bf, PROMPTS[0], &[]));
    let diff = max_abs_diff(&a, &b);
    assert!(diff > 0.0 && diff < 0.1 * max_abs(&b).max(1.0), "Q8_0 vs bf16: max diff {diff}");
    assert_eq!(argmax(&a), argmax(&b));
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tl-native-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}
