//! `Gemma4ForConditionalGeneration` checkpoints (model_type "gemma4", the text model under
//! `text_config` and `model.language_model.*`, a vision tower beside it): tiny-gemma4-mm,
//! written by scripts/fixtures/make_nested.py from tiny-gemma4's weights (and checked there
//! to give transformers' ForCausalLM logits exactly), runs with tiny-gemma4's bits; unknown
//! nestings are refused naming the field.

use tl_arch_gemma4 as _;
use tl_testkit::{check_nested, check_nested_refusals, load_error, with_config};

tl_testkit::fixtures!();

#[test]
fn a_gemma4_conditional_generation_checkpoint_gives_the_text_models_bits() {
    check_nested(&fixture("tiny-gemma4"), &fixture("tiny-gemma4-mm"));
}

#[test]
fn unknown_gemma4_nestings_are_refused_naming_the_field() {
    check_nested_refusals(&fixture("tiny-gemma4"), &fixture("tiny-gemma4-mm"), "model.language_model.");
}

/// transformers ties the head by the outer config's `tie_word_embeddings` (the loaded
/// model's own), whatever `text_config` says: untied there, the model needs a head the
/// checkpoint does not have.
#[test]
fn the_outer_config_decides_the_tied_head() {
    let dir = with_config(&fixture("tiny-gemma4-mm"), |c| c["tie_word_embeddings"] = false.into());
    let err = load_error(dir.path());
    assert!(err.contains("lm_head.weight"), "{err}");
}
