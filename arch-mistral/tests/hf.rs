//! Mistral against Hugging Face's float32 forward (tests/fixtures, written by
//! scripts/fixtures/make_tiny_mistral.py): a window of 16 on every layer, prompts and
//! greedy runs far past it. The Llama tests' tolerances, and the same invariances on
//! prompts longer than the window: batch and chunk invariance bit for bit, threads, and
//! `--weights f32` equal to native.

#[path = "../../arch-llama/tests/common/mod.rs"]
mod common;

// Name the plugin crate so its registrations ("mistral") are linked.
use tl_arch_mistral as _;

use common::*;
use tl_core::{ForwardBatch, ForwardSeq, ModelRunner, Weights};

const WINDOW: usize = 16;

/// The f16 cache's bound (seed 2.4), as for Llama: 1e-3 of the largest |logit|, or 2e-2.
fn tolerance(hf: &[f32]) -> f32 {
    (1e-3 * max_abs(hf)).max(2e-2)
}

#[test]
fn tiny_mistral_matches_hf_past_its_window() {
    let refs = reference("tiny-mistral");
    assert!(refs.iter().filter(|p| p.ids.len() > WINDOW).count() >= 3, "prompts longer than the window");
    let mut r = load("tiny-mistral", 0, Weights::Native);
    assert_eq!(r.config().arch, "mistral", "model_type \"mistral\" selects the architecture");
    for p in &refs {
        let ours = run_in_steps(&mut r, &p.ids, &[]);
        let diff = max_abs_diff(&ours, &p.last_logits);
        let tol = tolerance(&p.last_logits);
        assert!((tol - p.tolerance).abs() < 1e-6, "reference tolerance {} disagrees with the rule {tol}", p.tolerance);
        eprintln!("{} tokens: max |ours - HF| = {diff:.3e} (tolerance {tol:.3e})", p.ids.len());
        assert!(diff <= tol, "prompt {:?}: max |ours - HF| = {diff} > {tol}", p.text);
    }
    // Greedy decoding one token a step (each step's query sees only the last 16 keys).
    for p in &refs {
        let tol = tolerance(&p.last_logits) as f64;
        let ours = greedy(&mut r, &p.ids, p.greedy.len());
        let mut matched = 0;
        for (k, (&a, &b)) in ours.iter().zip(&p.greedy).enumerate() {
            if a != b {
                assert!(p.margins[k] < tol, "{:?}: step {k}: ours {a}, HF {b}, margin {}", p.text, p.margins[k]);
                break;
            }
            matched += 1;
        }
        eprintln!("{:?}: {matched} of {} greedy tokens equal HF's", p.text, p.greedy.len());
        assert!(matched > 0, "{:?}: the first greedy token differs", p.text);
    }
}

#[test]
fn without_its_window_the_same_weights_are_far_from_hf() {
    // `sliding_window: null` (Mistral v0.2 and later) loads as full attention: past 16
    // tokens it is many tolerances from HF's windowed references, so the window above is
    // what made them match.
    let dir = tempfile::tempdir().expect("tempdir");
    let src = fixture("tiny-mistral");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).expect("config")).expect("JSON");
    cfg["sliding_window"] = serde_json::Value::Null;
    std::fs::write(dir.path().join("config.json"), cfg.to_string()).expect("write config");
    std::fs::copy(src.join("model.safetensors"), dir.path().join("model.safetensors")).expect("copy weights");
    let mut full = ModelRunner::load(dir.path(), &engine(0, Weights::Native)).expect("load without a window");
    for p in reference("tiny-mistral").iter().filter(|p| p.ids.len() > WINDOW) {
        let diff = max_abs_diff(&run_in_steps(&mut full, &p.ids, &[]), &p.last_logits);
        assert!(diff > 10.0 * tolerance(&p.last_logits), "{} tokens: full attention is only {diff} away", p.ids.len());
    }
}

#[test]
fn batches_chunks_threads_and_f32_weights_do_not_change_mistral_logits() {
    let refs = reference("tiny-mistral");
    let mut r = load("tiny-mistral", 0, Weights::Native);
    let alone: Vec<Vec<f32>> = refs.iter().map(|p| run_in_steps(&mut r, &p.ids, &[])).collect();
    // Chunked prefill: one token at a time, uneven pieces, and chunks that start inside,
    // at and past the window's edge, across KV blocks of 4.
    for (p, want) in refs.iter().zip(&alone) {
        for steps in [vec![1; p.ids.len()], vec![3, 2, 5], vec![WINDOW - 1, 2], vec![WINDOW, 7], vec![WINDOW + 3, 1, 9]]
        {
            assert_eq!(bits(&run_in_steps(&mut r, &p.ids, &steps)), bits(want), "{:?} in steps {steps:?}", p.text);
        }
    }
    // All prompts in one step: each row equals the prompt alone.
    let tables: Vec<Vec<u32>> = refs.iter().map(|p| alloc(&r, p.ids.len())).collect();
    let batch = ForwardBatch {
        seqs: refs.iter().zip(&tables).map(|(p, b)| ForwardSeq { tokens: &p.ids, start: 0, blocks: b }).collect(),
    };
    let together = r.forward(&batch).expect("forward");
    for (i, want) in alone.iter().enumerate() {
        assert_eq!(bits(together.row(i)), bits(want), "prompt {i} differs in a batch");
    }
    for t in &tables {
        release(&r, t);
    }
    // The thread count, widening the weights to f32, and another block size do not matter.
    let mut one = load("tiny-mistral", 1, Weights::Native);
    let mut two = load("tiny-mistral", 2, Weights::Native);
    let mut wide = load("tiny-mistral", 0, Weights::F32);
    let mut e = engine(0, Weights::Native);
    e.kv.block_tokens = 16;
    let mut blocks16 = ModelRunner::load(&fixture("tiny-mistral"), &e).expect("load, B = 16");
    for (p, want) in refs.iter().zip(&alone) {
        assert_eq!(bits(&run_in_steps(&mut one, &p.ids, &[])), bits(want), "1 thread: {:?}", p.text);
        assert_eq!(bits(&run_in_steps(&mut two, &p.ids, &[])), bits(want), "2 threads: {:?}", p.text);
        assert_eq!(bits(&run_in_steps(&mut wide, &p.ids, &[])), bits(want), "--weights f32: {:?}", p.text);
        assert_eq!(bits(&run_in_steps(&mut blocks16, &p.ids, &[5])), bits(want), "blocks of 16: {:?}", p.text);
    }
}
