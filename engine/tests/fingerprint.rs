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
