//! `system_fingerprint` names what decides an answer besides the request: equal model
//! files and settings give the same fingerprint, one changed byte of weights, config or
//! template, or another weight mode, gives another.

use std::path::Path;

use tl_core::EngineConfig;
use tl_engine::fingerprint;

mod support;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir").flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
    }
}

#[test]
fn the_fingerprint_follows_the_model_bytes_and_the_weight_mode() {
    let d = tempfile::tempdir().expect("tempdir");
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    copy_dir(&support::tiny(), &a);
    copy_dir(&support::tiny(), &b);
    let cfg = EngineConfig::default();
    let fa = fingerprint(&a, &cfg).expect("fingerprint");
    assert!(fa.starts_with("fp_") && fa.len() == 19, "{fa}");
    assert_eq!(fa, fingerprint(&b, &cfg).expect("fingerprint"), "same files, another directory");

    // One byte of the weights, deep inside the file.
    let w = b.join("model.safetensors");
    let mut bytes = std::fs::read(&w).expect("read");
    let i = bytes.len() - 3;
    bytes[i] ^= 1;
    std::fs::write(&w, &bytes).expect("write");
    let fb = fingerprint(&b, &cfg).expect("fingerprint");
    assert_ne!(fa, fb, "a weight byte changed");

    // A chat template appears.
    std::fs::write(a.join("chat_template.jinja"), "{{ messages[0].content }}").expect("write");
    let fa2 = fingerprint(&a, &cfg).expect("fingerprint");
    assert_ne!(fa, fa2, "a template was added");

    // Another weight mode of the same files.
    let int4 = EngineConfig { weights: "int4".parse().expect("int4"), ..EngineConfig::default() };
    assert_ne!(fa2, fingerprint(&a, &int4).expect("fingerprint"), "int4 weights");

    // A missing model is an error naming nothing to hash, not a panic.
    let none = fingerprint(&d.path().join("missing"), &cfg).expect("no files: fingerprint of the settings");
    assert!(none.starts_with("fp_"));
}

/// q8 activations change the fingerprint exactly where they can change a number: a model
/// with a tensor in a format with an integer kernel (a Q8_0 GGUF, int4 at load), not an
/// f32 one (every layer runs the exact path in both modes) nor one widened by `--weights f32`.
#[test]
fn q8_activations_change_the_fingerprint_only_where_they_change_numbers() {
    let at = |model: &Path, weights: &str, activations: &str| {
        let cfg = EngineConfig {
            weights: weights.parse().expect("weights"),
            activations: activations.parse().expect("activations"),
            ..EngineConfig::default()
        };
        fingerprint(model, &cfg).expect("fingerprint")
    };
    let f32_model = support::tiny();
    assert_eq!(at(&f32_model, "native", "q8"), at(&f32_model, "native", "exact"), "an f32 model");
    assert_ne!(at(&f32_model, "int4", "q8"), at(&f32_model, "int4", "exact"), "int4 at load");
    let q8_0 = support::crate_fixture("arch-qwen3-5", "tiny-qwen3_5").join("model.Q8_0.gguf");
    assert!(q8_0.is_file(), "{}", q8_0.display());
    assert_ne!(at(&q8_0, "native", "q8"), at(&q8_0, "native", "exact"), "a Q8_0 file");
    assert_eq!(at(&q8_0, "f32", "q8"), at(&q8_0, "f32", "exact"), "a Q8_0 file widened to f32");
}
