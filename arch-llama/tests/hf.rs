//! The Llama against Hugging Face's float32 forward (tests/fixtures, written by
//! scripts/fixtures/make_tiny_llama.py), and the two int4 paths against each other.

mod common;

// Name the plugin crate so its registrations ("llama") are linked.
use tl_arch_llama as _;

use common::*;
use tl_core::Weights;

#[test]
fn tiny_llama_logits_match_hf() {
    let mut r = load("tiny-llama", 0, Weights::Native);
    check_hf(&mut r, &reference("tiny-llama"), "tiny-llama");
}

#[test]
fn tiny_llama_greedy_matches_hf() {
    let refs = reference("tiny-llama");
    assert!(refs.iter().all(|p| p.greedy.len() == 32), "32 greedy steps per prompt");
    check_greedy(&mut load("tiny-llama", 0, Weights::Native), &refs, "tiny-llama");
}

#[test]
fn int4_runner_matches_its_dequantized_model() {
    let group = 32; // the fixture's "int4-g32-sym"
    let mut at_load = load("tiny-llama", 0, Weights::Int4 { group });
    let mut file = load("tiny-llama-int4", 0, Weights::Native);
    let mut twin = load("tiny-llama-int4-deq", 0, Weights::Native);
    for p in reference("tiny-llama-int4-deq") {
        let a = run_in_steps(&mut at_load, &p.ids, &[]);
        let f = run_in_steps(&mut file, &p.ids, &[]);
        let d = run_in_steps(&mut twin, &p.ids, &[]);
        assert_eq!(bits(&a), bits(&f), "prompt {:?}: quantizing at load differs from the int4 file", p.text);
        let close = 1e-4 * max_abs(&d);
        let diff = max_abs_diff(&f, &d);
        eprintln!("prompt {:?}: int4 vs dequantized twin: max diff {diff:.3e}", p.text);
        assert!(diff <= close, "prompt {:?}: int4 vs dequantized twin differ by {diff} > {close}", p.text);
        // The twin is the model HF ran: the int4 logits are within the f16 cache's bound.
        let hf = max_abs_diff(&f, &p.last_logits);
        assert!(hf <= tolerance(&p.last_logits), "prompt {:?}: int4 vs HF on the twin: {hf}", p.text);
    }
    // And the int4 runner is not secretly the float model.
    let float = run_in_steps(&mut load("tiny-llama", 0, Weights::Native), &reference("tiny-llama")[2].ids, &[]);
    let int4 = run_in_steps(&mut file, &reference("tiny-llama")[2].ids, &[]);
    assert!(max_abs_diff(&float, &int4) > 1e-3, "int4 logits equal the float model's");
}
