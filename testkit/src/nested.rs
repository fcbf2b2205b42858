//! A multimodal checkpoint nesting a text model (core's `NestedRegistration`) against the
//! text-only checkpoint of the same weights: the same logits bit for bit, and a nesting
//! tl does not know refused naming the field or prefix.

use std::path::Path;

use serde_json::{json, Value};
use tl_core::Weights;

use crate::{alone, check_same_bits, greedy, load_error, load_path, reference_at, with_config};

/// The nested checkpoint at `nested` loads as the architecture of the text-only one at
/// `text` (whose reference.json gives the prompts) and gives every prompt's last logits
/// and a 16-step greedy run of the longest with the same bits.
pub fn check_nested(text: &Path, nested: &Path) {
    let refs = reference_at(text);
    let mut t = load_path(text, 0, Weights::Native);
    let mut n = load_path(nested, 0, Weights::Native);
    assert_eq!(n.config().arch, t.config().arch, "the nested text model selects the text checkpoint's architecture");
    assert!(n.config().nested.is_some() && t.config().nested.is_none());
    let want = alone(&mut t, &refs);
    check_same_bits(&mut n, &refs, &want, "nested checkpoint");
    let longest = refs.iter().max_by_key(|p| p.ids.len()).expect("prompts");
    assert_eq!(
        greedy(&mut n, &longest.ids, 16),
        greedy(&mut t, &longest.ids, 16),
        "greedy run of the nested checkpoint"
    );
}

/// Nestings tl does not know are refused, each naming what it reads: no `text_config`, one
/// that is not an object, a text config of another architecture, an outer `model_type`
/// nobody registered as nesting, and weights not under the registered prefix (the text-only
/// checkpoint's `model.*` names under the nested config). `prefix` is the registered one.
pub fn check_nested_refusals(text: &Path, nested: &Path, prefix: &str) {
    type Edit = fn(&mut Value);
    let cases: [(Edit, &str); 4] = [
        (|c| drop(c.as_object_mut().unwrap().remove("text_config")), "\"text_config\""),
        (|c| c["text_config"] = json!([1, 2]), "text_config"),
        (|c| c["text_config"]["model_type"] = json!("llama"), "text_config.model_type"),
        (|c| c["model_type"] = json!("paligemma"), "text_config"),
    ];
    for (edit, field) in cases {
        let dir = with_config(nested, edit);
        let err = load_error(dir.path());
        assert!(err.contains(field), "{field}: {err}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(nested.join("config.json"), dir.path().join("config.json")).expect("config");
    std::fs::copy(text.join("model.safetensors"), dir.path().join("model.safetensors")).expect("weights");
    let err = load_error(dir.path());
    assert!(err.contains(prefix) && err.contains("model.safetensors"), "{err}");
}
