//! Qwen3 against Hugging Face's float32 forward (tests/fixtures, written by
//! scripts/fixtures/make_tiny_qwen3.py) with the Llama tests' tolerances, and the same
//! invariances: batch and chunk invariance bit for bit, `--weights f32` equal to native,
//! and the GGUF files of the same weights.

#[path = "../../arch-llama/tests/common/mod.rs"]
mod common;

// Name the plugin crate so its registrations ("qwen3") are linked.
use tl_arch_qwen3 as _;

use common::*;
use tl_core::{ModelRunner, Weights};

fn load_gguf(name: &str, threads: usize) -> ModelRunner {
    load_path(&fixture(name).join("model.gguf"), threads, Weights::Native)
}

#[test]
fn tiny_qwen3_matches_hf_untied_and_tied() {
    for name in ["tiny-qwen3", "tiny-qwen3-tied"] {
        let mut r = load(name, 0, Weights::Native);
        assert_eq!(r.config().arch, "qwen3", "model_type \"qwen3\" selects the architecture");
        check_hf(&mut r, &reference(name), name);
        check_greedy(&mut r, &reference(name), name);
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
        check_hf(&mut g, &reference(name), name);
    }
}

#[test]
fn batches_chunks_threads_and_f32_weights_do_not_change_qwen3_logits() {
    // Chunked prefill (1 token at a time, and uneven pieces), all prompts in one step,
    // batched decode, 1 and 2 threads and `--weights f32`: the same bits as alone.
    check_invariance(&fixture("tiny-qwen3"), &reference("tiny-qwen3"), &[vec![3, 2, 5]]);
}

#[test]
fn tiny_qwen3_with_yarn_matches_hf() {
    // YaRN (factor 4 over an original context of 32): the longer prompts and the greedy
    // runs reach the interpolated frequencies; the fixture script checked that the default
    // RoPE on the same weights is more than 10 tolerances away.
    let name = "tiny-qwen3-yarn";
    let mut r = load(name, 0, Weights::Native);
    let c = r.config().json().clone();
    assert_eq!(c["rope_parameters"]["rope_type"], "yarn");
    check_hf(&mut r, &reference(name), name);
    check_greedy(&mut r, &reference(name), name);
    check_invariance(&fixture(name), &reference(name), &[vec![3, 2, 5]]);
    // Without the scaling the same weights are far from HF's references.
    let plain = with_config(&fixture(name), |c| {
        c["rope_parameters"] = serde_json::json!({"rope_type": "default", "rope_theta": 1e6})
    });
    let mut p = load_path(plain.path(), 0, Weights::Native);
    let long = &reference(name)[3];
    let diff = max_abs_diff(&run_in_steps(&mut p, &long.ids, &[]), &long.last_logits);
    assert!(diff > 10.0 * tolerance(&long.last_logits), "the default RoPE is only {diff} away");
}

#[test]
fn q8_cache_keeps_the_invariances_on_qwen3() {
    for name in ["tiny-qwen3", "tiny-qwen3-yarn"] {
        check_invariance_kv(&fixture(name), &reference(name), &[vec![3, 2, 5]], Q8);
        q8_distance(&fixture(name), &reference(name), 16, name);
    }
}
