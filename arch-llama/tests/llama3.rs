//! Llama 3.1+ RoPE scaling (`rope_type: "llama3"`) on the tiny-llama3 fixture
//! (scripts/fixtures/make_tiny_llama3.py): Hugging Face float32 parity with the Llama
//! tests' tolerance, the GGUF file of the same weights (llama.cpp's `rope_freqs.weight`)
//! equal to the safetensors bit for bit, batch and chunk invariance bit for bit, and the
//! fixture far from its unscaled twin (so the scaling is what is being checked).

mod common;

use common::*;
use tl_arch_llama as _;
use tl_core::{ModelRunner, Weights};

const NAME: &str = "tiny-llama3";

fn load_gguf() -> ModelRunner {
    let path = fixture(NAME).join("model.gguf");
    ModelRunner::load(&path, &engine(0, Weights::Native)).unwrap_or_else(|e| panic!("loading the GGUF: {e}"))
}

fn check_hf(r: &mut ModelRunner) {
    let refs = reference(NAME);
    common::check_hf(r, &refs, NAME);
    check_greedy(r, &refs, NAME);
}

#[test]
fn tiny_llama3_matches_hf() {
    let mut r = load(NAME, 0, Weights::Native);
    check_hf(&mut r);
}

/// The same weights with the default RoPE land more than 10 tolerances from HF's scaled
/// logits on every prompt longer than one token: the test above checks the scaling.
#[test]
fn the_unscaled_twin_is_far() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = fixture(NAME);
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).expect("config")).expect("json");
    cfg["rope_parameters"] = serde_json::json!({"rope_type": "default", "rope_theta": 10000.0});
    std::fs::write(dir.path().join("config.json"), cfg.to_string()).expect("write config");
    std::fs::copy(src.join("model.safetensors"), dir.path().join("model.safetensors")).expect("copy");
    let mut plain = ModelRunner::load(dir.path(), &engine(0, Weights::Native)).expect("the unscaled twin loads");
    for p in reference(NAME).iter().filter(|p| p.ids.len() > 1) {
        let diff = max_abs_diff(&run_in_steps(&mut plain, &p.ids, &[]), &p.last_logits);
        eprintln!("{:?}: unscaled is {:.1} tolerances away", p.text, diff / p.tolerance);
        assert!(diff > 10.0 * p.tolerance, "{:?}: the unscaled model is only {diff} away", p.text);
    }
}

#[test]
fn tiny_llama3_gguf_equals_safetensors_bit_for_bit() {
    let mut g = load_gguf();
    let c = g.config().json().clone();
    let s = &c["rope_scaling"];
    assert_eq!(s["rope_type"], "llama3", "{c}");
    assert_eq!(s["original_max_position_embeddings"].as_f64(), Some(64.0));
    let mut st = load(NAME, 0, Weights::Native);
    for p in reference(NAME) {
        let a = run_in_steps(&mut g, &p.ids, &[]);
        let b = run_in_steps(&mut st, &p.ids, &[]);
        assert_eq!(bits(&a), bits(&b), "{:?}: GGUF and safetensors logits differ", p.text);
    }
    check_hf(&mut g);
}

#[test]
fn batches_chunks_and_f32_weights_do_not_change_llama3_logits() {
    check_invariance(&fixture(NAME), &reference(NAME), &[vec![3, 2, 5]]);
}
