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
#[path = "common/k_model.rs"]
mod k_model;

use tl_arch_llama as _;

use std::path::Path;

use common::*;
use k_model::{tempdir, write_model, Lcg, PROMPTS, V};
use tl_core::{ForwardBatch, ForwardSeq, ModelRunner, Weights};

/// Logits of a batch of three prompts, two decode steps of the three, and the first
/// prompt alone.
fn schedule(r: &mut ModelRunner) -> Vec<Vec<f32>> {
    let blocks: Vec<Vec<u32>> = PROMPTS.iter().map(|p| alloc(r, p.len() + 4)).collect();
    let seqs: Vec<ForwardSeq> = PROMPTS
        .iter()
        .zip(&blocks)
        .map(|(p, b)| ForwardSeq { tokens: p, start: 0, blocks: b, adapter: None })
        .collect();
    let mut out = vec![r.forward(&ForwardBatch { seqs }).expect("prefill").data];
    for step in 0..2 {
        let next: Vec<[u32; 1]> = (0..3).map(|s| [argmax(&out.last().unwrap()[s * V..(s + 1) * V])]).collect();
        let seqs: Vec<ForwardSeq> = (0..3)
            .map(|s| ForwardSeq { tokens: &next[s], start: PROMPTS[s].len() + step, blocks: &blocks[s], adapter: None })
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
