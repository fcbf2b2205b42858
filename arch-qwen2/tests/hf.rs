//! Qwen2 against Hugging Face's float32 forward (tests/fixtures, written by
//! scripts/fixtures/make_tiny_qwen2.py) with the Llama tests' tolerances, and the same
//! invariances: batch and chunk invariance bit for bit, int4 at load, and the GGUF file
//! of the same weights.

#[path = "../../arch-llama/tests/common/mod.rs"]
mod common;

// Name the plugin crate so its registrations ("qwen2") are linked.
use tl_arch_qwen2 as _;

use common::*;
use tl_core::{ModelRunner, Weights};

fn load_gguf(threads: usize) -> ModelRunner {
    load_path(&fixture("tiny-qwen2").join("model.gguf"), threads, Weights::Native)
}

#[test]
fn tiny_qwen2_matches_hf_untied_and_tied() {
    for name in ["tiny-qwen2", "tiny-qwen2-tied"] {
        let mut r = load(name, 0, Weights::Native);
        assert_eq!(r.config().arch, "qwen2", "model_type \"qwen2\" selects the architecture");
        check_hf(&mut r, &reference(name), name);
        check_greedy(&mut r, &reference(name), name);
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
    check_hf(&mut g, &reference("tiny-qwen2"), "tiny-qwen2");
    check_greedy(&mut g, &reference("tiny-qwen2"), "tiny-qwen2");
}

#[test]
fn batches_chunks_and_threads_do_not_change_qwen2_logits() {
    // Chunked prefill (1 token at a time, and uneven pieces), all prompts in one step,
    // batched decode, 1 and 2 threads and `--weights f32`: the same bits as alone.
    check_invariance(&fixture("tiny-qwen2"), &reference("tiny-qwen2"), &[vec![3, 2, 5]]);
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

#[test]
fn q8_cache_keeps_the_invariances_on_qwen2() {
    check_invariance_kv(&fixture("tiny-qwen2"), &reference("tiny-qwen2"), &[vec![3, 2, 5]], Q8);
    let (worst, same, _) = q8_distance(&fixture("tiny-qwen2"), &reference("tiny-qwen2"), 16, "tiny-qwen2");
    eprintln!("tiny-qwen2: q8 vs f16 cache: max |logit diff| {worst:.3e}, {same} greedy runs equal");
}
