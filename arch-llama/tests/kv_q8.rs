//! The q8 KV cache (`"q8-slab"`) on the Llama fixtures: every invariance the f16 cache
//! keeps (chunked prefill, a batch, batched decode, 1 and 2 threads, `--weights f32`)
//! holds bit for bit, and the distance from the f16 cache is measured (docs/kv.md).

mod common;

use tl_arch_llama as _;

use common::*;
use tl_core::Weights;

#[test]
fn q8_cache_keeps_batch_chunk_and_thread_invariance_on_llama() {
    check_invariance_kv(&fixture("tiny-llama"), &reference("tiny-llama"), &[vec![3, 2, 5], vec![7, 1]], Q8);
}

#[test]
fn q8_cache_keeps_batch_chunk_and_thread_invariance_on_llama3() {
    check_invariance_kv(&fixture("tiny-llama3"), &reference("tiny-llama3"), &[vec![3, 2, 5]], Q8);
}

#[test]
fn q8_cache_stays_near_the_f16_cache_on_llama() {
    for name in ["tiny-llama", "tiny-llama3"] {
        let refs = reference(name);
        let (worst, same, _) = q8_distance(&fixture(name), &refs, 16, name);
        // Measured 2026-12 (docs/kv.md): well inside the HF tolerance scale; a broken
        // scale or a code read as unsigned moves the logits by whole units.
        let tol = refs.iter().map(|p| tolerance(&p.last_logits)).fold(0.0f32, f32::max);
        assert!(worst <= 20.0 * tol, "{name}: q8 moves the logits by {worst} (> 20 x {tol})");
        assert!(same * 2 >= refs.len(), "{name}: only {same} of {} greedy runs agree", refs.len());
    }
}

#[test]
fn q8_cache_is_not_the_f16_cache() {
    // The backend really is used: the logits differ from f16's somewhere.
    let p = &reference("tiny-llama")[0];
    let a = run_in_steps(&mut load_path_kv(&fixture("tiny-llama"), 0, Weights::Native, F16), &p.ids, &[]);
    let b = run_in_steps(&mut load_path_kv(&fixture("tiny-llama"), 0, Weights::Native, Q8), &p.ids, &[]);
    assert_ne!(bits(&a), bits(&b));
}
