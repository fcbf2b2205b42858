//! docs/reliability.md's bad-input table, end to end through the `generate` binary: each
//! bad input fails with exit status non-zero and one line on stderr that names the thing
//! at fault, with no panic message or backtrace. (The serving rows are in
//! serve/tests/bad_input.rs, the KV envelope rows in kv/tests/bad_input.rs.)

#[path = "../../core/tests/gguf_writer/mod.rs"]
mod gguf_writer;

#[path = "../../engine/tests/support/nan_checkpoint.rs"]
mod nan_checkpoint;

use std::path::{Path, PathBuf};
use std::process::Command;

use gguf_writer::{f32_tensor, Meta, T};

fn tiny() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../arch-llama/tests/fixtures/tiny-llama")
}

/// A copy of the tiny model in a fresh directory.
fn copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(tiny().join(f), dir.path().join(f)).expect("copy");
    }
    dir
}

/// Run generate; assert it failed in one clean line holding every one of `names`.
fn refused(args: &[&str], names: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_generate")).args(args).output().expect("generate did not start");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} succeeded: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: not one line: {err}");
    assert!(!err.contains("panicked") && !err.contains("backtrace") && !err.contains("RUST_BACKTRACE"), "{err}");
    for n in names {
        assert!(err.contains(n), "{args:?}: {err:?} does not name {n:?}");
    }
    assert!(out.stdout.is_empty(), "{args:?} printed output: {}", String::from_utf8_lossy(&out.stdout));
    err
}

fn gen(model: &Path, extra: &[&str]) -> Vec<String> {
    let mut v = vec!["--model".to_string(), model.to_string_lossy().into_owned(), "--max-tokens".into(), "4".into()];
    v.extend(extra.iter().map(|s| s.to_string()));
    if !extra.contains(&"--prompt") {
        v.extend(["--prompt".into(), "hello".into()]);
    }
    v
}

fn run(model: &Path, extra: &[&str], names: &[&str]) -> String {
    let args = gen(model, extra);
    refused(&args.iter().map(String::as_str).collect::<Vec<_>>(), names)
}

#[test]
fn a_missing_or_unreadable_model_path() {
    run(Path::new("/no/such/model"), &[], &["/no/such/model"]);
    let d = copy();
    // config.json that cannot be read as a file.
    std::fs::remove_file(d.path().join("config.json")).expect("rm");
    std::fs::create_dir(d.path().join("config.json")).expect("mkdir");
    run(d.path(), &[], &["config.json"]);
}

#[test]
fn a_truncated_or_corrupt_safetensors_file() {
    let d = copy();
    let path = d.path().join("model.safetensors");
    let bytes = std::fs::read(&path).expect("read");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).expect("truncate");
    run(d.path(), &[], &["model.safetensors"]);
    let mut bad = bytes.clone();
    bad[8..16].copy_from_slice(b"}not{jso");
    std::fs::write(&path, &bad).expect("corrupt");
    run(d.path(), &[], &["model.safetensors", "JSON"]);
    std::fs::write(&path, &bytes[..5]).expect("tiny");
    run(d.path(), &[], &["model.safetensors", "truncated"]);
}

fn llama_meta(arch: &'static str) -> Vec<(&'static str, Meta)> {
    let toks: Vec<String> = (0..16).map(|i| format!("t{i}")).collect();
    vec![
        ("general.architecture", Meta::Str(arch)),
        ("llama.embedding_length", Meta::U32(32)),
        ("llama.feed_forward_length", Meta::U32(64)),
        ("llama.block_count", Meta::U32(1)),
        ("llama.attention.head_count", Meta::U32(2)),
        ("llama.context_length", Meta::U32(64)),
        ("tokenizer.ggml.model", Meta::Str("gpt2")),
        ("tokenizer.ggml.tokens", Meta::Strs(toks)),
        ("tokenizer.ggml.merges", Meta::Strs(vec![])),
    ]
}

#[test]
fn a_gguf_of_another_architecture() {
    let d = tempfile::tempdir().expect("tempdir");
    let path = d.path().join("model.gguf");
    gguf_writer::write(&path, &llama_meta("mamba"), &[f32_tensor("token_embd.weight", &[16, 32], &[0.0; 512])]);
    // The message names the architecture found (the list of supported ones may grow).
    run(&path, &[], &["model.gguf", "mamba"]);
}

#[test]
fn a_gguf_with_an_unsupported_tensor_type() {
    let d = tempfile::tempdir().expect("tempdir");
    let path = d.path().join("model.gguf");
    // IQ2_XXS (type id 16): 66 bytes per block of 256.
    let t = T { name: "blk.0.ffn_down.weight".into(), shape: vec![1, 256], ty: 16, data: vec![0; 66] };
    gguf_writer::write(&path, &llama_meta("llama"), &[f32_tensor("token_embd.weight", &[16, 32], &[0.0; 512]), t]);
    run(&path, &[], &["model.gguf", "blk.0.ffn_down.weight", "IQ2_XXS"]);
}

#[test]
fn a_config_the_engine_refuses() {
    let d = copy();
    let path = d.path().join("config.json");
    let mut cfg: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
    cfg["num_key_value_heads"] = serde_json::json!(3);
    std::fs::write(&path, cfg.to_string()).expect("write");
    run(d.path(), &[], &["num_key_value_heads", "3"]);
    std::fs::write(&path, "{\"tl_arch\": ").expect("write");
    run(d.path(), &[], &["config.json", "JSON"]);
}

#[test]
fn a_tokenizer_json_that_does_not_parse() {
    let d = copy();
    let path = d.path().join("config.json");
    let mut cfg: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
    cfg["tl_tokenizer"] = serde_json::json!("hf");
    std::fs::write(&path, cfg.to_string()).expect("write");
    std::fs::write(d.path().join("tokenizer.json"), "{\"model\": {\"type\": \"BPE\", \"vocab\": 7}}").expect("write");
    run(d.path(), &[], &["tokenizer.json"]);
}

#[test]
fn a_chat_template_that_fails_to_render() {
    let d = copy();
    std::fs::write(d.path().join("chat_template.jinja"), "{{ raise_exception('roles must alternate') }}")
        .expect("write");
    run(d.path(), &["--chat"], &["template", "roles must alternate"]);
    std::fs::write(
        d.path().join("chat_template.jinja"),
        "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    )
    .expect("write");
    run(d.path(), &["--chat"], &["template", "fuel"]);
}

#[test]
fn a_prompt_longer_than_the_context() {
    // The tiny model's context is 256 byte tokens.
    let long = "x".repeat(300);
    run(&tiny(), &["--prompt", &long], &["max_position_embeddings", "256"]);
}

#[test]
fn sampling_parameters_out_of_range() {
    run(&tiny(), &["--top-p", "2"], &["top", "2"]);
    run(&tiny(), &["--temperature=-1"], &["temperature"]);
}

#[test]
fn nan_in_the_logits_is_refused() {
    // A corrupted checkpoint: the final norm's weights are NaN, so every logit is.
    let d = copy();
    nan_checkpoint::nan_final_norm(&d.path().join("model.safetensors"));
    run(d.path(), &[], &["NaN"]);
}
