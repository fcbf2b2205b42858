//! Mistral against Hugging Face's float32 forward (tests/fixtures, written by
//! scripts/fixtures/make_tiny_mistral.py): a window of 16 on every layer, prompts and
//! greedy runs far past it. The Llama tests' tolerances, and the same invariances on
//! prompts longer than the window: batch and chunk invariance bit for bit, threads, and
//! `--weights f32` equal to native.

#[path = "../../arch-llama/tests/common/mod.rs"]
mod common;

// Name the plugin crate so its registrations ("mistral") are linked.
use tl_arch_mistral as _;

use common::*;
use tl_core::{ModelRunner, Weights};

const WINDOW: usize = 16;

#[test]
fn tiny_mistral_matches_hf_past_its_window() {
    let refs = reference("tiny-mistral");
    assert!(refs.iter().filter(|p| p.ids.len() > WINDOW).count() >= 3, "prompts longer than the window");
    let mut r = load("tiny-mistral", 0, Weights::Native);
    assert_eq!(r.config().arch, "mistral", "model_type \"mistral\" selects the architecture");
    check_hf(&mut r, &refs, "tiny-mistral");
    // Greedy decoding one token a step (each step's query sees only the last 16 keys).
    check_greedy(&mut r, &refs, "tiny-mistral");
}

#[test]
fn without_its_window_the_same_weights_are_far_from_hf() {
    // `sliding_window: null` (Mistral v0.2 and later) loads as full attention: past 16
    // tokens it is many tolerances from HF's windowed references, so the window above is
    // what made them match.
    let dir = with_config(&fixture("tiny-mistral"), |c| c["sliding_window"] = serde_json::Value::Null);
    let mut full = load_path(dir.path(), 0, Weights::Native);
    for p in reference("tiny-mistral").iter().filter(|p| p.ids.len() > WINDOW) {
        let diff = max_abs_diff(&run_in_steps(&mut full, &p.ids, &[]), &p.last_logits);
        assert!(diff > 10.0 * tolerance(&p.last_logits), "{} tokens: full attention is only {diff} away", p.ids.len());
    }
}

#[test]
fn batches_chunks_threads_and_f32_weights_do_not_change_mistral_logits() {
    let (refs, path) = (reference("tiny-mistral"), fixture("tiny-mistral"));
    // Chunked prefill: one token at a time, uneven pieces, and chunks that start inside,
    // at and past the window's edge, across KV blocks of 4; a batch of all prompts,
    // batched decode, 1 and 2 threads, `--weights f32`.
    let chunks = [vec![3, 2, 5], vec![WINDOW - 1, 2], vec![WINDOW, 7], vec![WINDOW + 3, 1, 9]];
    check_invariance(&path, &refs, &chunks);
    // Another block size does not matter either.
    let want = alone(&mut load("tiny-mistral", 0, Weights::Native), &refs);
    let mut e = engine(0, Weights::Native);
    e.kv.block_tokens = 16;
    let mut blocks16 = ModelRunner::load(&path, &e).expect("load, B = 16");
    for (p, want) in refs.iter().zip(&want) {
        assert_eq!(bits(&run_in_steps(&mut blocks16, &p.ids, &[5])), bits(want), "blocks of 16: {:?}", p.text);
    }
}

#[test]
fn q8_cache_keeps_the_invariances_on_mistral() {
    let (refs, path) = (reference("tiny-mistral"), fixture("tiny-mistral"));
    let chunks = [vec![3, 2, 5], vec![WINDOW - 1, 2], vec![WINDOW, 7], vec![WINDOW + 3, 1, 9]];
    check_invariance_kv(&path, &refs, &chunks, Q8);
    q8_distance(&path, &refs, 16, "tiny-mistral");
}
