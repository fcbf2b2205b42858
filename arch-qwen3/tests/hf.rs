//! Qwen3 against Hugging Face's float32 forward (tests/fixtures, written by
//! scripts/fixtures/make_tiny_qwen3.py) with the Llama tests' tolerances, and the same
//! invariances: batch and chunk invariance bit for bit, `--weights f32` equal to native,
//! and the GGUF files of the same weights.

#[path = "../../arch-llama/tests/common/mod.rs"]
mod common;

// Name the plugin crate so its registrations ("qwen3") are linked.
use tl_arch_qwen3 as _;

use common::*;
use tl_core::{ForwardBatch, ForwardSeq, ModelRunner, Weights};

/// The f16 cache's bound (seed 2.4), as for Llama: 1e-3 of the largest |logit|, or 2e-2.
fn tolerance(hf: &[f32]) -> f32 {
    (1e-3 * max_abs(hf)).max(2e-2)
}

fn load_gguf(name: &str, threads: usize) -> ModelRunner {
    let path = fixture(name).join("model.gguf");
    ModelRunner::load(&path, &engine(threads, Weights::Native)).unwrap_or_else(|e| panic!("loading the GGUF: {e}"))
}

fn check_hf(r: &mut ModelRunner, name: &str) {
    for p in reference(name) {
        let ours = run_in_steps(r, &p.ids, &[]);
        let diff = max_abs_diff(&ours, &p.last_logits);
        let tol = tolerance(&p.last_logits);
        assert!((tol - p.tolerance).abs() < 1e-6, "reference tolerance {} disagrees with the rule {tol}", p.tolerance);
        eprintln!("{name} {:?}: max |ours - HF| = {diff:.3e} (tolerance {tol:.3e})", p.text);
        assert!(diff <= tol, "{name} prompt {:?}: max |ours - HF| = {diff} > {tol}", p.text);
    }
}

fn check_greedy(r: &mut ModelRunner, name: &str) {
    for p in reference(name) {
        let tol = tolerance(&p.last_logits) as f64;
        let ours = greedy(r, &p.ids, p.greedy.len());
        let mut matched = 0;
        for (k, (&a, &b)) in ours.iter().zip(&p.greedy).enumerate() {
            if a != b {
                // Only a near tie at this step may part the sequences.
                assert!(p.margins[k] < tol, "{name} {:?}: step {k}: ours {a}, HF {b}, margin {}", p.text, p.margins[k]);
                break;
            }
            matched += 1;
        }
        eprintln!("{name} {:?}: {matched} of {} greedy tokens equal HF's", p.text, p.greedy.len());
        assert!(matched > 0, "{name} {:?}: the first greedy token differs", p.text);
    }
}

#[test]
fn tiny_qwen3_matches_hf_untied_and_tied() {
    for name in ["tiny-qwen3", "tiny-qwen3-tied"] {
        let mut r = load(name, 0, Weights::Native);
        assert_eq!(r.config().arch, "qwen3", "model_type \"qwen3\" selects the architecture");
        check_hf(&mut r, name);
        check_greedy(&mut r, name);
    }
}

#[test]
fn tiny_qwen3_ggufs_load_to_the_same_logits() {
    // Each GGUF holds the safetensors' BF16 weights widened to F32: the same f32 values,
    // so the same logits bit for bit, and the config from its metadata.
    for (name, tied) in [("tiny-qwen3", false), ("tiny-qwen3-tied", true)] {
        let mut g = load_gguf(name, 0);
        let c = g.config().json().clone();
        assert_eq!((c["tl_arch"].as_str(), c["rope_theta"].as_f64()), (Some("qwen3"), Some(1e6)));
        assert_eq!((c["head_dim"].as_u64(), c["tie_word_embeddings"].as_bool()), (Some(32), Some(tied)));
        let mut st = load(name, 0, Weights::Native);
        for p in reference(name) {
            let a = run_in_steps(&mut g, &p.ids, &[]);
            let b = run_in_steps(&mut st, &p.ids, &[]);
            assert_eq!(bits(&a), bits(&b), "{name} {:?}: GGUF and safetensors logits differ", p.text);
        }
        check_hf(&mut g, name);
    }
}

#[test]
fn batches_chunks_threads_and_f32_weights_do_not_change_qwen3_logits() {
    let refs = reference("tiny-qwen3");
    let mut r = load("tiny-qwen3", 0, Weights::Native);
    let alone: Vec<Vec<f32>> = refs.iter().map(|p| run_in_steps(&mut r, &p.ids, &[])).collect();
    // Chunked prefill (1 token at a time, and uneven pieces) gives the same bits.
    for (p, want) in refs.iter().zip(&alone) {
        for steps in [vec![1; p.ids.len()], vec![3, 2, 5]] {
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
    // The thread count does not matter, nor widening every weight to f32 at load.
    let mut one = load("tiny-qwen3", 1, Weights::Native);
    let mut two = load("tiny-qwen3", 2, Weights::Native);
    let mut wide = load("tiny-qwen3", 0, Weights::F32);
    for (p, want) in refs.iter().zip(&alone) {
        assert_eq!(bits(&run_in_steps(&mut one, &p.ids, &[])), bits(want), "1 thread: {:?}", p.text);
        assert_eq!(bits(&run_in_steps(&mut two, &p.ids, &[])), bits(want), "2 threads: {:?}", p.text);
        assert_eq!(bits(&run_in_steps(&mut wide, &p.ids, &[])), bits(want), "--weights f32: {:?}", p.text);
    }
}
