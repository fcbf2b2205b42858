//! Qwen2 against Hugging Face's float32 forward (tests/fixtures, written by
//! scripts/fixtures/make_tiny_qwen2.py) with the Llama tests' tolerances, and the same
//! invariances: batch and chunk invariance bit for bit, int4 at load, and the GGUF file
//! of the same weights.

#[path = "../../arch-llama/tests/common/mod.rs"]
mod common;

// Name the plugin crate so its registrations ("qwen2") are linked.
use tl_arch_qwen2 as _;

use common::*;
use tl_core::{ForwardBatch, ForwardSeq, ModelRunner, Weights};

/// The f16 cache's bound (seed 2.4), as for Llama: 1e-3 of the largest |logit|, or 2e-2.
fn tolerance(hf: &[f32]) -> f32 {
    (1e-3 * max_abs(hf)).max(2e-2)
}

fn load_gguf(threads: usize) -> ModelRunner {
    let path = fixture("tiny-qwen2").join("model.gguf");
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
fn tiny_qwen2_matches_hf_untied_and_tied() {
    for name in ["tiny-qwen2", "tiny-qwen2-tied"] {
        let mut r = load(name, 0, Weights::Native);
        assert_eq!(r.config().arch, "qwen2", "model_type \"qwen2\" selects the architecture");
        check_hf(&mut r, name);
        check_greedy(&mut r, name);
    }
}

#[test]
fn tiny_qwen2_gguf_loads_to_the_same_logits() {
    // The GGUF holds the safetensors' BF16 weights widened to F32: the same f32 values,
    // so the same logits bit for bit, and the config from its metadata.
    let mut g = load_gguf(0);
    let c = g.config().json().clone();
    assert_eq!((c["tl_arch"].as_str(), c["rope_theta"].as_f64()), (Some("qwen2"), Some(1e6)));
    assert_eq!(c["tie_word_embeddings"], false);
    let mut st = load("tiny-qwen2", 0, Weights::Native);
    for p in reference("tiny-qwen2") {
        let a = run_in_steps(&mut g, &p.ids, &[]);
        let b = run_in_steps(&mut st, &p.ids, &[]);
        assert_eq!(bits(&a), bits(&b), "prompt {:?}: GGUF and safetensors logits differ", p.text);
    }
    check_hf(&mut g, "tiny-qwen2");
    check_greedy(&mut g, "tiny-qwen2");
}

#[test]
fn batches_chunks_and_threads_do_not_change_qwen2_logits() {
    let refs = reference("tiny-qwen2");
    let mut r = load("tiny-qwen2", 0, Weights::Native);
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
    // And the thread count does not matter.
    let mut one = load("tiny-qwen2", 1, Weights::Native);
    let mut two = load("tiny-qwen2", 2, Weights::Native);
    for (p, want) in refs.iter().zip(&alone) {
        assert_eq!(bits(&run_in_steps(&mut one, &p.ids, &[])), bits(want), "1 thread: {:?}", p.text);
        assert_eq!(bits(&run_in_steps(&mut two, &p.ids, &[])), bits(want), "2 threads: {:?}", p.text);
    }
}

#[test]
fn int4_at_load_matches_the_dequantized_twin() {
    let mut at_load = load("tiny-qwen2", 0, Weights::Int4 { group: 32 });
    let mut twin = load("tiny-qwen2-int4-deq", 0, Weights::Native);
    for p in reference("tiny-qwen2-int4-deq") {
        let a = run_in_steps(&mut at_load, &p.ids, &[]);
        let d = run_in_steps(&mut twin, &p.ids, &[]);
        let (diff, close) = (max_abs_diff(&a, &d), 1e-4 * max_abs(&d));
        eprintln!("prompt {:?}: int4 vs dequantized twin: max diff {diff:.3e}", p.text);
        assert!(diff <= close, "prompt {:?}: int4 vs dequantized twin differ by {diff} > {close}", p.text);
        let hf = max_abs_diff(&a, &p.last_logits);
        assert!(hf <= tolerance(&p.last_logits), "prompt {:?}: int4 vs HF on the twin: {hf}", p.text);
    }
    let ids = &reference("tiny-qwen2")[2].ids;
    let float = run_in_steps(&mut load("tiny-qwen2", 0, Weights::Native), ids, &[]);
    assert!(max_abs_diff(&float, &run_in_steps(&mut at_load, ids, &[])) > 1e-3, "int4 logits equal the float model's");
}
