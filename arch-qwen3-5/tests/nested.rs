//! `Qwen3_5ForConditionalGeneration` and `Qwen3_5MoeForConditionalGeneration` checkpoints
//! (model_type "qwen3_5" / "qwen3_5_moe", the text model under `text_config` and
//! `model.language_model.*`, a vision tower `model.visual.*` beside it, the untied
//! `lm_head.weight` at the top): tiny-qwen3_5-mm and tiny-qwen3_5-moe-mm, written by
//! scripts/fixtures/make_nested.py from the text fixtures' weights (and checked there to
//! give transformers' ForCausalLM logits exactly), run with the text fixtures' bits; unknown
//! nestings are refused naming the field.

use tl_arch_qwen3_5 as _;
use tl_testkit::{check_nested, check_nested_refusals};

tl_testkit::fixtures!();

#[test]
fn a_qwen3_5_conditional_generation_checkpoint_gives_the_text_models_bits() {
    check_nested(&fixture("tiny-qwen3_5"), &fixture("tiny-qwen3_5-mm"));
}

#[test]
fn a_qwen3_5_moe_conditional_generation_checkpoint_gives_the_text_models_bits() {
    check_nested(&fixture("tiny-qwen3_5-moe"), &fixture("tiny-qwen3_5-moe-mm"));
}

#[test]
fn unknown_qwen3_5_nestings_are_refused_naming_the_field() {
    check_nested_refusals(&fixture("tiny-qwen3_5"), &fixture("tiny-qwen3_5-mm"), "model.language_model.");
    check_nested_refusals(&fixture("tiny-qwen3_5-moe"), &fixture("tiny-qwen3_5-moe-mm"), "model.language_model.");
}
