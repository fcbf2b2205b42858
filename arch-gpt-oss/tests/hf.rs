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
fn the_gguf_of_the_same_weights_equals_the_safetensors_bit_for_bit() {
    // llama.cpp's gpt-oss layout (scripts/fixtures/make_gpt_oss_gguf.py): the fused experts
    // split and de-interleaved, biases per projection, the sinks and router renamed, the
    // config from `gpt-oss.*` (windows alternating, YaRN without truncation). llama.cpp fixes
    // the SwiGLU clamp at 7.0, so the safetensors model is run with that clamp.
    let path = fixture(NAME).join("model.gguf");
    let mut g = load_path(&path, 0, Weights::Native);
    let c = g.config().json().clone();
    assert_eq!((c["tl_arch"].as_str(), c["num_local_experts"].as_u64()), (Some("gpt_oss"), Some(8)));
    assert_eq!((c["sliding_window"].as_u64(), c["swiglu_limit"].as_f64()), (Some(WINDOW as u64), Some(7.0)));
    assert_eq!(c["layer_types"], serde_json::json!(["sliding_attention", "full_attention", "sliding_attention"]));
    assert_eq!(c["rope_scaling"]["truncate"], serde_json::json!(false));
    let hub = with_config(&fixture(NAME), |c| c["swiglu_limit"] = 7.0.into());
    let refs = reference(NAME);
    let want = alone(&mut load_path(hub.path(), 0, Weights::Native), &refs);
    let moved = max_abs_diff(&want[0], &alone(&mut load(NAME, 0, Weights::Native), &refs)[0]);
    assert!(moved > 0.0, "the clamp at 7.0 must change the logits, or this test proves nothing");
    check_same_bits(&mut g, &refs, &want, "GGUF");
    check_same_bits(&mut load_path(&path, 0, Weights::F32), &refs, &want, "GGUF, --weights f32");
}

#[test]
fn an_mxfp4_gpt_oss_gguf_runs_its_experts_in_their_blocks() {
    // llama-quantize MXFP4_MOE of that file (scripts/fixtures/make_mxfp4_gguf.sh), the form
    // gpt-oss GGUFs ship in: MXFP4 experts equal their f32 widening bit for bit, and every
    // invariance holds.
    let path = fixture(NAME).join("model.MXFP4_MOE.gguf");
    let store = tl_core::Gguf::open(&path).expect("open");
    let info = tl_core::WeightStore::info(&store, "blk.0.ffn_down_exps.weight").expect("stacked experts");
    assert_eq!(info.dtype, tl_core::DType::Other("MXFP4".into()));
    let refs = reference(NAME);
    check_invariance(&path, &refs, &[vec![3, 2, 5], vec![WINDOW + 1, 1, WINDOW - 1]]);
}

#[test]
fn the_hubs_mxfp4_checkpoint_matches_hf_and_keeps_its_blocks() {
    // The released gpt-oss checkpoints' layout (`*_blocks` / `*_scales`, transformers'
    // nibble order), against transformers' own dequantization (Mxfp4Config(dequantize=True)),
    // and every invariance, `--weights f32` included, on the MXFP4 blocks tl keeps.
    let name = "tiny-gpt-oss-mxfp4";
    let refs = reference(name);
    let mut r = load(name, 0, Weights::Native);
    assert_eq!(r.config().arch, "gpt_oss");
    check_hf(&mut r, &refs, name);
    check_greedy(&mut r, &refs, name);
    check_invariance(&fixture(name), &refs, &[vec![3, 2, 5], vec![WINDOW + 1, 1, WINDOW - 1]]);
}

#[test]
fn q8_cache_keeps_the_invariances_on_gpt_oss() {
    // Over `--kv q8-slab`: sinks, windows and experts, the same bits across splits.
    let chunks = [vec![3, 2, 5], vec![WINDOW - 1, 2], vec![WINDOW + 1, 1, WINDOW - 1]];
    check_invariance_kv(&fixture(NAME), &reference(NAME), &chunks, Q8);
    q8_distance(&fixture(NAME), &reference(NAME), 16, NAME);
}
