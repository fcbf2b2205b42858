//! OLMoE against Hugging Face's float32 forward (tests/fixtures, written by
//! scripts/fixtures/make_tiny_moe.py: 8 experts, top 3, not renormalised; q and k normed
//! over their whole rows), the batch, chunk, thread and `--weights f32` invariances bit
//! for bit, and bad configs refused naming the field.

// Name the plugin crate so its registrations ("olmoe") are linked.
use tl_arch_olmoe as _;

use tl_core::Weights;
use tl_testkit::*;

tl_testkit::fixtures!();

const NAME: &str = "tiny-olmoe";

#[test]
fn tiny_olmoe_matches_hf() {
    let refs = reference(NAME);
    let mut r = load(NAME, 0, Weights::Native);
    assert_eq!(r.config().arch, "olmoe", "model_type \"olmoe\" selects the architecture");
    check_hf(&mut r, &refs, NAME);
    check_greedy(&mut r, &refs, NAME);
}

#[test]
fn renormalising_the_chosen_weights_moves_olmoe_far_from_hf() {
    // The same weights with `norm_topk_prob: true`: the test above checks the raw weights.
    let renorm = with_config(&fixture(NAME), |c| c["norm_topk_prob"] = true.into());
    let mut r = load_path(renorm.path(), 0, Weights::Native);
    let p = &reference(NAME)[3];
    let diff = max_abs_diff(&run_in_steps(&mut r, &p.ids, &[]), &p.last_logits);
    assert!(diff > 10.0 * tolerance(&p.last_logits), "renormalised weights are only {diff} away");
}

#[test]
fn batches_chunks_threads_and_f32_weights_do_not_change_olmoe_logits() {
    check_invariance(&fixture(NAME), &reference(NAME), &[vec![3, 2, 5], vec![7, 1]]);
}

#[test]
fn bad_olmoe_configs_are_refused_naming_the_field() {
    let clip = load_error(with_config(&fixture(NAME), |c| c["clip_qkv"] = 8.0.into()).path());
    assert!(clip.contains("clip_qkv"), "{clip}");
    let top = load_error(with_config(&fixture(NAME), |c| c["num_experts_per_tok"] = 9.into()).path());
    assert!(top.contains("num_experts_per_tok"), "{top}");
    let more = load_error(with_config(&fixture(NAME), |c| c["num_experts"] = 16.into()).path());
    assert!(more.contains("mlp.gate.weight"), "{more}");
}

#[test]
fn q8_cache_keeps_the_invariances_on_olmoe() {
    check_invariance_kv(&fixture(NAME), &reference(NAME), &[vec![3, 2, 5], vec![7, 1]], Q8);
    q8_distance(&fixture(NAME), &reference(NAME), 16, NAME);
}
