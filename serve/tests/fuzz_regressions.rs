//! Every fuzz target's property, on the stable toolchain, over the committed seeds
//! (fuzz/corpus/<target>/seed-*) and every input a fuzzer ever crashed on
//! (fuzz/regressions/<target>/*): no panic, and the target's own assertions. The checks
//! are fuzz/checks.rs, the very code the fuzz targets run.

use std::path::{Path, PathBuf};

// Every family, as the fuzz targets link them (families/src/lib.rs).
use tl_families as _;

#[path = "../../fuzz/checks.rs"]
mod checks;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut out = Vec::new();
    for dir in [root.join("corpus").join(target), root.join("regressions").join(target)] {
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let seed = p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("seed-"));
            if p.is_file() && (seed || dir.ends_with(Path::new("regressions").join(target))) {
                let bytes = std::fs::read(&p).expect("read input");
                out.push((p, bytes));
            }
        }
    }
    assert!(!out.is_empty(), "no inputs for {target}");
    out
}

fn as_file(dir: &Path, data: &[u8], ext: &str) -> PathBuf {
    let p = dir.join(format!("input.{ext}"));
    std::fs::write(&p, data).expect("write");
    p
}

/// Run `check` on every input of `target`, naming each on stderr first (a panic's input
/// is the last one named).
fn each(target: &str, check: impl Fn(&[u8])) {
    for (name, data) in inputs(target) {
        eprintln!("{}", name.display());
        check(&data);
    }
}

#[test]
fn safetensors_inputs() {
    let d = tempfile::tempdir().expect("tempdir");
    each("safetensors", |data| checks::safetensors(&as_file(d.path(), data, "safetensors")));
}

#[test]
fn config_inputs() {
    each("config", checks::config);
}

#[test]
fn gguf_inputs() {
    let d = tempfile::tempdir().expect("tempdir");
    each("gguf", |data| checks::gguf(&as_file(d.path(), data, "gguf")));
}

#[test]
fn lora_adapter_inputs() {
    let d = tempfile::tempdir().expect("tempdir");
    each("lora_adapter", |data| checks::lora_adapter(d.path(), data));
}

#[test]
fn kv_import_inputs() {
    each("kv_import", checks::kv_import);
}

#[test]
fn chat_template_inputs() {
    each("chat_template", checks::chat_template);
}

#[test]
fn request_inputs() {
    each("request", |d| {
        checks::request(d);
        checks::messages_request(d);
        checks::responses_request(d);
    });
}

#[test]
fn embed_request_inputs() {
    each("embed_request", checks::embed_request);
}

#[test]
fn json_schema_inputs() {
    each("json_schema", checks::json_schema);
}

#[test]
fn model_ref_inputs() {
    each("model_ref", checks::model_ref);
}
