//! Gemma 4 (per-layer input embeddings, shared KV, the full layers' own head size) against
//! transformers' float32 forward (tests/fixtures, written by
//! scripts/fixtures/make_tiny_gemma4.py; its longest prompt, 112 tokens, is 14 sliding
//! windows), every invariance the testkit checks bit for bit (chunks, batches, batched
//! decode, threads, `--weights f32`, the q8 cache), the pool sized for the owning layers
//! only, and bad configs refused naming the field.
//!
//! The reference a pool of f16 K/V is held to: Gemma 4's scores are not scaled and its
//! values are RMS-normed, so rounding the cached K and V to f16 alone moves the tiny
//! model's logits by up to 0.03, above the family-wide tolerance (0.02 here). The fixture
//! script therefore also records transformers' float32 forward with every key (after RoPE)
//! and value rounded to f16 before attention (`f16_kv_last_logits`, `f16_kv_greedy`), the
//! arithmetic an f16 pool does: tl is held to that within the tolerance, and to the plain
//! float32 logits within the tolerance plus the f16 rounding's own distance.

#[path = "../../arch-llama/tests/common/mod.rs"]
mod common;

// Name the plugin crate so its registrations ("gemma4") are linked.
use tl_arch_gemma4 as _;

use common::*;
use serde_json::{json, Value};
use tl_core::{KvGeometry, Weights};

const NAME: &str = "tiny-gemma4";
const KV: &str = "tiny-gemma4-kv";
const MOE: &str = "tiny-gemma4-moe";

/// The reference prompts with transformers' f16-KV forward as their logits and greedy
/// run (the tolerance stays the float32 logits' rule), and each prompt's distance between
/// the two forwards.
fn f16_reference(name: &str) -> Vec<(RefPrompt, f32)> {
    let path = fixture(name).join("reference.json");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("reference.json")).expect("JSON");
    let floats = |v: &Value| -> Vec<f32> { v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect() };
    let mut plain = reference(name);
    let prompts = json["prompts"].as_array().expect("prompts");
    assert_eq!(prompts.len(), plain.len());
    plain
        .drain(..)
        .zip(prompts)
        .map(|(mut p, j)| {
            p.last_logits = floats(&j["f16_kv_last_logits"]);
            p.greedy =
                j["f16_kv_greedy"]["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect();
            p.margins = j["f16_kv_greedy"]["margins"].as_array().unwrap().iter().map(|m| m.as_f64().unwrap()).collect();
            (p, j["f16_kv_max_abs_diff"].as_f64().unwrap() as f32)
        })
        .collect()
}

fn check_parity(name: &str) {
    let mut r = load(name, 0, Weights::Native);
    assert_eq!(r.config().arch, "gemma4", "model_type \"gemma4_text\" selects the architecture");
    let refs = f16_reference(name);
    for (p, f16_gap) in &refs {
        let ours = run_in_steps(&mut r, &p.ids, &[]);
        let f16 = max_abs_diff(&ours, &p.last_logits);
        let plain = reference(name).into_iter().find(|q| q.ids == p.ids).unwrap();
        let f32_diff = max_abs_diff(&ours, &plain.last_logits);
        let tol = plain.tolerance;
        eprintln!(
            "{name} {:?} ({} tokens): max |ours - HF f16-KV| = {f16:.3e}, max |ours - HF f32| = {f32_diff:.3e} \
             (tolerance {tol:.3e}, f16 rounding alone {f16_gap:.3e})",
            p.text,
            p.ids.len()
        );
        assert!(f16 <= tol, "{name} {:?}: {f16} from HF's f16-KV forward > {tol}", p.text);
        assert!(f32_diff <= tol + f16_gap, "{name} {:?}: {f32_diff} from HF's float32 forward", p.text);
    }
    let prompts: Vec<RefPrompt> = refs.into_iter().map(|(p, _)| p).collect();
    check_greedy(&mut r, &prompts, name);
}

#[test]
fn tiny_gemma4_matches_hf() {
    check_parity(NAME);
}

#[test]
fn tiny_gemma4_with_k_eq_v_and_a_double_wide_mlp_matches_hf() {
    check_parity(KV);
}

#[test]
fn tiny_gemma4_with_the_moe_block_matches_hf() {
    check_parity(MOE);
}

#[test]
fn chunks_batches_threads_and_f32_weights_do_not_change_gemma4_moe_logits() {
    // A batch's tokens choose different experts; each row's sum stays its own.
    check_invariance(&fixture(MOE), &reference(MOE), &[vec![3, 2, 5], vec![1, 9]]);
}

#[test]
fn chunks_batches_threads_and_f32_weights_do_not_change_gemma4_logits() {
    // Steps of 3, 2, 5 tokens cross block rows (B = 4) and the window (8) mid-step.
    check_invariance(&fixture(NAME), &reference(NAME), &[vec![3, 2, 5], vec![7, 1, 64]]);
    check_invariance(&fixture(KV), &reference(KV), &[vec![5, 3]]);
}

#[test]
fn q8_cache_keeps_the_invariances_on_gemma4() {
    check_invariance_kv(&fixture(NAME), &reference(NAME), &[vec![3, 2, 5]], Q8);
}

#[test]
fn shared_kv_layers_own_no_pages() {
    // Layers [s, s, f, s, s, f]; 4 reads 3, 5 reads 2. The owning layers are three sliding
    // and one full: four groups of one layer, so a block-table row is 4 slabs of K and V,
    // where six layers each owning their KV would take 6 (three groups of 2).
    let r = load(NAME, 0, Weights::Native);
    let layout = r.kv_layout();
    assert_eq!((layout.n_layers(), layout.owning_layers(), layout.n_groups(), layout.group_layers()), (6, 4, 4, 1));
    assert_eq!(layout.slot(4), layout.slot(3));
    assert_eq!(layout.slot(5), layout.slot(2));
    // Rows of the larger kind: 2 KV heads, the full layers' head size 32.
    let g = r.pool().lock().unwrap().geometry();
    assert_eq!(g, KvGeometry { n_layers: 1, n_kv_heads: 2, head_dim: 32, block_tokens: B });
    // One page: K and V of 1 layer, 2 heads x 4 positions x 32 values, f16.
    assert_eq!(g.block_bytes(), Some(2 * 2 * 4 * 32 * 2));
    let row_bytes = layout.n_page_groups() * g.block_bytes().unwrap();
    assert_eq!(row_bytes, 4 * 2 * 2 * 4 * 32 * 2, "4 of the 6 layers' slabs per row of B positions");
}

#[test]
fn bad_gemma4_configs_are_refused_naming_the_field() {
    for (edit, field) in [
        (json!({"num_kv_shared_layers": 6}), "num_kv_shared_layers"),
        (json!({"num_kv_shared_layers": 5}), "num_kv_shared_layers"), // no full layer left to read
        (json!({"enable_moe_block": true}), "num_experts"),
        (json!({"enable_moe_block": true, "num_experts": 4, "moe_intermediate_size": 8}), "top_k_experts"),
        (
            json!({"enable_moe_block": true, "num_experts": 4, "top_k_experts": 5, "moe_intermediate_size": 8}),
            "top_k_experts",
        ),
        (json!({"vocab_size_per_layer_input": 100}), "vocab_size_per_layer_input"),
        (json!({"per_layer_config": {"2": {"head_dim": 32}, "5": {"head_dim": 64}}}), "per_layer_config"),
        (json!({"hidden_activation": "silu"}), "hidden_activation"),
    ] {
        let dir = with_config(&fixture(NAME), |c| {
            for (k, v) in edit.as_object().unwrap() {
                c[k] = v.clone();
            }
        });
        let err = load_error(dir.path());
        assert!(err.contains(field), "{edit}: {err}");
    }
    let unknown = with_config(&fixture(NAME), |c| c["layer_types"][1] = json!("mamba"));
    let err = load_error(unknown.path());
    assert!(err.contains("layer_types[1]") && err.contains("mamba"), "{err}");
    let rope = with_config(&fixture(NAME), |c| c["rope_parameters"]["full_attention"]["rope_type"] = json!("yarn"));
    let err = load_error(rope.path());
    assert!(err.contains("rope_parameters.full_attention.rope_type"), "{err}");
}

#[test]
fn moe_tensors_of_the_wrong_shape_are_refused_naming_them() {
    // The config says 3 experts; the file stacks 4: the router's rows do not match.
    let dir = with_config(&fixture(MOE), |c| c["num_experts"] = json!(3));
    let err = load_error(dir.path());
    assert!(err.contains("router.proj.weight"), "{err}");
    // A wider expert than the file holds.
    let dir = with_config(&fixture(MOE), |c| c["moe_intermediate_size"] = json!(16));
    let err = load_error(dir.path());
    assert!(err.contains("experts"), "{err}");
}
