//! Qwen3.5 (Gated DeltaNet beside gated attention) against transformers' float32 forward
//! (tests/fixtures, written by scripts/fixtures/make_tiny_qwen3_5.py, whose prompts reach
//! 161 tokens: past transformers' 64-position delta-rule chunks), and every invariance the
//! testkit checks, bit for bit: one token a step and uneven chunks (the recurrent state
//! carried across steps and block rows), a batch of every prompt, batched decode, 1 and 2
//! threads, `--weights f32`, and the q8 KV cache.

#[path = "../../arch-llama/tests/common/mod.rs"]
mod common;

// Name the plugin crate so its registrations ("qwen3_5") are linked.
use tl_arch_qwen3_5 as _;

use common::*;
use tl_core::{ForwardBatch, Weights, NO_BLOCK};

const NAME: &str = "tiny-qwen3_5";

#[test]
fn tiny_qwen3_5_matches_hf() {
    let mut r = load(NAME, 0, Weights::Native);
    assert_eq!(r.config().arch, "qwen3_5", "model_type \"qwen3_5_text\" selects the architecture");
    let layout = r.kv_layout();
    assert_eq!((layout.n_page_groups(), layout.state_column(), layout.state_layers()), (1, Some(1), 3));
    check_hf(&mut r, &reference(NAME), NAME);
    check_greedy(&mut r, &reference(NAME), NAME);
}

#[test]
fn chunks_batches_threads_and_f32_weights_do_not_change_qwen3_5_logits() {
    // Steps of 3, 2, 5 tokens cross block rows (B = 4) mid-step and at their edges.
    check_invariance(&fixture(NAME), &reference(NAME), &[vec![3, 2, 5], vec![7, 1, 64]]);
}

#[test]
fn q8_cache_keeps_the_invariances_on_qwen3_5() {
    check_invariance_kv(&fixture(NAME), &reference(NAME), &[vec![3, 2, 5]], Q8);
}

#[test]
fn a_resume_from_a_block_boundary_snapshot_equals_one_prefill() {
    // What a prefix-cache hit does: a second table shares the first's pages and its state
    // snapshot of row h - 1, then runs the rest from position h * B. Its logits must be the
    // bits of the whole prompt in one step.
    let mut r = load(NAME, 0, Weights::Native);
    let p = &reference(NAME)[5];
    let want = run_in_steps(&mut r, &p.ids, &[]);
    let g = r.kv_layout().n_groups();
    let b = B as usize;
    let first = alloc(&r, p.ids.len());
    r.forward(&ForwardBatch::single(&p.ids, 0, &first)).expect("prefill");
    for h in [1, 5, 17] {
        let hit = h * b;
        let mut second = alloc(&r, p.ids.len());
        {
            let pool = r.pool();
            let mut pool = pool.lock().unwrap();
            // Rows before the hit: the first table's pages; the state column keeps only
            // row h - 1's snapshot (the others are not needed to resume).
            for row in 0..h {
                for k in 0..g {
                    let e = row * g + k;
                    pool.release(second[e]).unwrap();
                    second[e] = if k + 1 == g && row + 1 < h { NO_BLOCK } else { first[e] };
                    if second[e] != NO_BLOCK {
                        pool.retain(second[e]).unwrap();
                    }
                }
            }
        }
        let got = r.forward(&ForwardBatch::single(&p.ids[hit..], hit, &second)).expect("resume").data;
        assert_eq!(bits(&got), bits(&want), "resume after {hit} positions differs from one prefill");
        release(&r, &second);
    }
    release(&r, &first);
}

#[test]
fn without_the_state_column_layers_the_logits_are_far_from_hf() {
    // The fixture guards the recurrent path: a layer_types list naming every layer full
    // attention cannot load (the linear layers' tensors are not attention tensors).
    let all_full = with_config(&fixture(NAME), |c| c["layer_types"] = serde_json::json!(vec!["full_attention"; 4]));
    let err = load_error(all_full.path());
    assert!(err.contains("q_proj") || err.contains("self_attn"), "{err}");
    let unknown = with_config(&fixture(NAME), |c| c["layer_types"][1] = serde_json::json!("mamba"));
    let err = load_error(unknown.path());
    assert!(err.contains("layer_types[1]") && err.contains("mamba"), "{err}");
}

const MOE: &str = "tiny-qwen3_5-moe";

#[test]
fn tiny_qwen3_5_moe_matches_hf() {
    // Every layer sparse (8 experts, 2 per token, renormalised) plus the gated shared
    // expert; the fixture script checked that dropping the shared expert, ignoring its gate,
    // skipping the renormalisation or taking 1 or 3 experts each land > 300 tolerances off.
    let mut r = load(MOE, 0, Weights::Native);
    assert_eq!(r.config().arch, "qwen3_5_moe", "model_type \"qwen3_5_moe_text\" selects the architecture");
    check_hf(&mut r, &reference(MOE), MOE);
    check_greedy(&mut r, &reference(MOE), MOE);
}

#[test]
fn chunks_batches_threads_and_f32_weights_do_not_change_qwen3_5_moe_logits() {
    check_invariance(&fixture(MOE), &reference(MOE), &[vec![3, 2, 5]]);
    check_invariance_kv(&fixture(MOE), &reference(MOE), &[vec![7, 1, 64]], Q8);
}
