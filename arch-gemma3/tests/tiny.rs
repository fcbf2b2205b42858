//! The tiny random Gemma 3 (tests/fixtures/tiny-gemma3, written by
//! scripts/fixtures/make_tiny_gemma3.py: two windowed layers with window 8, one global)
//! against Hugging Face's float32 forward with the Llama tests' tolerance, and the
//! invariances on prompts longer than the window: batch, chunk and thread invariance bit
//! for bit, native BF16 equal to f32, and the GGUF of the same weights equal to the
//! safetensors bit for bit (under the score scale a GGUF implies).

#[path = "../../arch-llama/tests/common/mod.rs"]
mod common;

// Name the plugin crate so its registrations ("gemma3") are linked.
use tl_arch_gemma3 as _;

use common::*;
use tl_core::{ModelRunner, Weights};

const NAME: &str = "tiny-gemma3";
/// The fixture's window: every prompt test below also runs prompts longer than it.
const WINDOW: usize = 8;

fn load_gguf(threads: usize, weights: Weights) -> ModelRunner {
    load_path(&fixture(NAME).join("model.gguf"), threads, weights)
}

#[test]
fn tiny_gemma3_matches_hf_past_the_window() {
    let refs = reference(NAME);
    assert!(refs.iter().any(|p| p.ids.len() > 4 * WINDOW), "no prompt is well past the window");
    let mut r = load(NAME, 0, Weights::Native);
    assert_eq!(r.config().arch, "gemma3", "model_type \"gemma3_text\" selects the architecture");
    check_hf(&mut r, &refs, NAME);
    check_greedy(&mut r, &refs, NAME);
}

#[test]
fn tiny_gemma3_gguf_loads_to_the_same_logits() {
    // The GGUF holds the safetensors' BF16 weights widened to F32 and its norms as 1 + w
    // (llama.cpp's converter), the window pattern in llama.cpp's key: the same f32
    // values the safetensors path computes, so the same logits bit for bit. A GGUF has no
    // `query_pre_attn_scalar`: its scale is llama.cpp's, `head_dim^-0.5` (32 here), so it
    // is compared with the safetensors under that scalar (the fixture's own is 24, and
    // its HF reference is checked on the safetensors).
    let mut g = load_gguf(0, Weights::Native);
    let c = g.config().json().clone();
    assert_eq!((c["tl_arch"].as_str(), c["sliding_window"].as_u64()), (Some("gemma3"), Some(WINDOW as u64)));
    assert_eq!(c["layer_types"], serde_json::json!(["sliding_attention", "sliding_attention", "full_attention"]));
    assert_eq!((c["tl_norms_include_one"].as_bool(), c["query_pre_attn_scalar"].as_u64()), (Some(true), Some(32)));
    let dir = with_config(&fixture(NAME), |c| c["query_pre_attn_scalar"] = serde_json::json!(32));
    let mut st = load_path(dir.path(), 0, Weights::Native);
    let mut own = load(NAME, 0, Weights::Native);
    for p in reference(NAME) {
        let a = run_in_steps(&mut g, &p.ids, &[]);
        let b = run_in_steps(&mut st, &p.ids, &[]);
        assert_eq!(bits(&a), bits(&b), "prompt {:?}: GGUF and safetensors logits differ", p.text);
        // The scalar matters (once there are two keys to weigh): with the fixture's own
        // (24) the logits are other ones.
        if p.ids.len() > 1 {
            let d = max_abs_diff(&a, &run_in_steps(&mut own, &p.ids, &[]));
            assert!(d > 1e-3, "{:?}: the scale does nothing", p.text);
        }
    }
}

#[test]
fn native_bf16_equals_f32_bit_for_bit() {
    let mut native = load(NAME, 0, Weights::Native);
    let mut wide = load(NAME, 0, Weights::F32);
    for p in reference(NAME) {
        let (a, b) = (run_in_steps(&mut native, &p.ids, &[]), run_in_steps(&mut wide, &p.ids, &[]));
        assert_eq!(bits(&a), bits(&b), "prompt {:?}: native and f32 weights differ", p.text);
    }
}

#[test]
fn batches_chunks_and_threads_do_not_change_gemma3_logits() {
    // Chunked prefill (1 token at a time, and uneven pieces that straddle the window), a
    // batch of all prompts, greedy decode steps past the window with every prompt in each
    // step, 1 and 2 threads and `--weights f32`: the same bits as each prompt alone.
    check_invariance(&fixture(NAME), &reference(NAME), &[vec![3, 2, 5], vec![WINDOW + 1, 1, WINDOW - 1]]);
}

#[test]
fn q8_cache_keeps_the_invariances_on_gemma3() {
    // The same checks over the q8 cache (`--kv q8-slab`), windowed layers included.
    check_invariance_kv(&fixture(NAME), &reference(NAME), &[vec![3, 2, 5], vec![WINDOW + 1, 1, WINDOW - 1]], Q8);
    let (worst, same, _) = q8_distance(&fixture(NAME), &reference(NAME), 16, NAME);
    eprintln!("{NAME}: q8 vs f16 cache: max |logit diff| {worst:.3e}, {same} greedy runs equal");
}
