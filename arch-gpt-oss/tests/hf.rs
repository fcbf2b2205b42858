//! gpt-oss against Hugging Face's float32 forward (tests/fixtures, written by
//! scripts/fixtures/make_tiny_moe.py: experts fused as the hub stores them, biases
//! everywhere, attention sinks, windowed and full layers, YaRN, the clamped SwiGLU), the
//! batch, chunk, thread and `--weights f32` invariances bit for bit, and bad configs
//! refused naming the field.

// Name the plugin crate so its registrations ("gpt_oss") are linked.
use tl_arch_gpt_oss as _;

use tl_core::Weights;
use tl_testkit::*;

tl_testkit::fixtures!();

const NAME: &str = "tiny-gpt-oss";
const WINDOW: usize = 8;

#[test]
fn tiny_gpt_oss_matches_hf() {
    let refs = reference(NAME);
    assert!(refs.iter().any(|p| p.ids.len() > 4 * WINDOW), "a prompt well past the window");
    let mut r = load(NAME, 0, Weights::Native);
    assert_eq!(r.config().arch, "gpt_oss", "model_type \"gpt_oss\" selects the architecture");
    check_hf(&mut r, &refs, NAME);
    check_greedy(&mut r, &refs, NAME);
}

#[test]
fn batches_chunks_threads_and_f32_weights_do_not_change_gpt_oss_logits() {
    let chunks = [vec![3, 2, 5], vec![WINDOW - 1, 2], vec![WINDOW + 1, 1, WINDOW - 1]];
    check_invariance(&fixture(NAME), &reference(NAME), &chunks);
}

#[test]
fn bad_gpt_oss_configs_are_refused_naming_the_field() {
    let cfg = |edit: fn(&mut serde_json::Value)| load_error(with_config(&fixture(NAME), edit).path());
    let e = cfg(|c| c["num_experts_per_tok"] = 9.into());
    assert!(e.contains("num_experts_per_tok"), "{e}");
    let e = cfg(|c| c["attention_bias"] = false.into());
    assert!(e.contains("attention_bias"), "{e}");
    let e = cfg(|c| c["swiglu_limit"] = (-1.0).into());
    assert!(e.contains("swiglu_limit"), "{e}");
    let e = cfg(|c| c["num_local_experts"] = 4.into());
    assert!(e.contains("mlp.router.weight"), "{e}");
    let e = cfg(|c| c["layer_types"] = serde_json::json!(["sliding_attention"]));
    assert!(e.contains("layer_types"), "{e}");
}

#[test]
fn q8_cache_keeps_the_invariances_on_gpt_oss() {
    // Over `--kv q8-slab`: sinks, windows and experts, the same bits across splits.
    let chunks = [vec![3, 2, 5], vec![WINDOW - 1, 2], vec![WINDOW + 1, 1, WINDOW - 1]];
    check_invariance_kv(&fixture(NAME), &reference(NAME), &chunks, Q8);
    q8_distance(&fixture(NAME), &reference(NAME), 16, NAME);
}
