//! Mixtral against Hugging Face's float32 forward (tests/fixtures, written by
//! scripts/fixtures/make_tiny_moe.py: 8 experts, top 3, renormalised; a window of 16 keys
//! on every layer, prompts and greedy runs past it), the batch, chunk, thread and
//! `--weights f32` invariances bit for bit, and bad configs refused naming the field.

// Name the plugin crate so its registrations ("mixtral") are linked.
use tl_arch_llama as _;
use tl_arch_mixtral as _;

use tl_core::Weights;
use tl_testkit::*;

tl_testkit::fixtures!();

const NAME: &str = "tiny-mixtral";
const WINDOW: usize = 16;

#[test]
fn tiny_mixtral_matches_hf_past_its_window() {
    let refs = reference(NAME);
    assert!(refs.iter().any(|p| p.ids.len() > WINDOW), "a prompt longer than the window");
    let mut r = load(NAME, 0, Weights::Native);
    assert_eq!(r.config().arch, "mixtral", "model_type \"mixtral\" selects the architecture");
    check_hf(&mut r, &refs, NAME);
    check_greedy(&mut r, &refs, NAME);
}

#[test]
fn without_its_window_the_same_weights_are_far_from_hf() {
    // `sliding_window: null` loads as full attention: past 16 tokens it is many
    // tolerances from HF's windowed references, so the window above is what made them match.
    let full = with_config(&fixture(NAME), |c| c["sliding_window"] = serde_json::Value::Null);
    let mut r = load_path(full.path(), 0, Weights::Native);
    for p in reference(NAME).iter().filter(|p| p.ids.len() > WINDOW) {
        let diff = max_abs_diff(&run_in_steps(&mut r, &p.ids, &[]), &p.last_logits);
        assert!(diff > 10.0 * tolerance(&p.last_logits), "{} tokens: full attention is only {diff} away", p.ids.len());
    }
}

#[test]
fn batches_chunks_threads_and_f32_weights_do_not_change_mixtral_logits() {
    let chunks = [vec![3, 2, 5], vec![WINDOW - 1, 2], vec![WINDOW + 3, 1, 9]];
    check_invariance(&fixture(NAME), &reference(NAME), &chunks);
}

#[test]
fn bad_mixtral_configs_are_refused_naming_the_field() {
    let top = load_error(with_config(&fixture(NAME), |c| c["num_experts_per_tok"] = 9.into()).path());
    assert!(top.contains("num_experts_per_tok") && top.contains("num_local_experts"), "{top}");
    let fewer = load_error(with_config(&fixture(NAME), |c| c["num_local_experts"] = 4.into()).path());
    assert!(fewer.contains("block_sparse_moe.gate.weight"), "{fewer}");
    let window = load_error(with_config(&fixture(NAME), |c| c["sliding_window"] = 0.into()).path());
    assert!(window.contains("sliding_window"), "{window}");
}

#[test]
fn the_gguf_of_the_same_weights_equals_the_safetensors_without_a_window() {
    // llama.cpp writes a Mixtral as `llama` with experts, Q/K rows permuted and no window
    // key (its graph has none): the same logits, bit for bit, as the safetensors run with
    // `sliding_window: null`.
    let path = fixture(NAME).join("model.gguf");
    let mut g = load_path(&path, 0, Weights::Native);
    let c = g.config().json().clone();
    assert_eq!((c["tl_arch"].as_str(), c["num_local_experts"].as_u64()), (Some("mixtral"), Some(8)));
    assert_eq!((c["num_experts_per_tok"].as_u64(), &c["sliding_window"]), (Some(3), &serde_json::Value::Null));
    let full = with_config(&fixture(NAME), |c| c["sliding_window"] = serde_json::Value::Null);
    let refs = reference(NAME);
    let want = alone(&mut load_path(full.path(), 0, Weights::Native), &refs);
    check_same_bits(&mut g, &refs, &want, "GGUF");
    // Within the window the GGUF still matches HF's references.
    let short: Vec<RefPrompt> = refs.into_iter().filter(|p| p.ids.len() <= WINDOW).collect();
    assert!(!short.is_empty());
    check_hf(&mut g, &short, "tiny-mixtral GGUF");
}

#[test]
fn q8_cache_keeps_the_invariances_on_mixtral() {
    let chunks = [vec![3, 2, 5], vec![WINDOW - 1, 2], vec![WINDOW + 3, 1, 9]];
    check_invariance_kv(&fixture(NAME), &reference(NAME), &chunks, Q8);
    q8_distance(&fixture(NAME), &reference(NAME), 16, NAME);
}
