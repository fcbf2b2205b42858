//! The int8-activation mode (`--activations q8`, docs/spec/numbers.md "q8 activations") on
//! the int4 checkpoint, whose projections all have an integer kernel: chunks, batches,
//! batched decode and thread counts give the same bits, as on the exact path; the mode is
//! really on (other bits than the exact path) and stays near the model HF ran.

mod common;

// Name the plugin crate so its registrations ("llama") are linked.
use tl_arch_llama as _;

use common::*;
use tl_core::{Activations, Weights};

const NAME: &str = "tiny-llama-int4";

#[test]
fn q8_activations_keep_every_invariance() {
    check_invariance_with(
        &fixture(NAME),
        &reference("tiny-llama-int4-deq"),
        &[vec![3, 2, 5], vec![1, 1, 7]],
        Activations::Q8,
    );
}

#[test]
fn q8_activations_change_the_numbers_but_not_the_model() {
    let refs = reference("tiny-llama-int4-deq"); // HF over the int4 weights, dequantized
    let mut exact = load(NAME, 0, Weights::Native);
    let mut q8 = load_with(&fixture(NAME), 0, Activations::Q8);
    // Quantizing at load gives the same int4 panels, so the same q8 bits.
    let mut at_load = tl_core::ModelRunner::load(
        &fixture("tiny-llama"),
        &tl_core::EngineConfig { activations: Activations::Q8, ..engine(0, Weights::Int4 { group: 32 }) },
    )
    .unwrap();
    for p in &refs {
        let (e, q) = (run_in_steps(&mut exact, &p.ids, &[]), run_in_steps(&mut q8, &p.ids, &[]));
        assert_ne!(bits(&e), bits(&q), "{:?}: q8 gave the exact path's bits", p.text);
        assert_eq!(bits(&run_in_steps(&mut at_load, &p.ids, &[])), bits(&q), "{:?}: int4 at load", p.text);
        let (de, dh) = (max_abs_diff(&e, &q), max_abs_diff(&q, &p.last_logits));
        eprintln!(
            "{:?}: q8 vs exact {de:.3e}, q8 vs HF {dh:.3e} (HF tolerance {:.3e}, logits up to {:.2})",
            p.text,
            tolerance(&p.last_logits),
            max_abs(&p.last_logits)
        );
        assert!(dh < 0.05 * max_abs(&p.last_logits), "{:?}: q8 {dh} from HF", p.text);
    }
}
