//! `verify --lora` (docs/serving.md, "LoRA adapters"): the target runs under an adapter,
//! every condition holds with it, and the condition "in a step with other adapters" (co-
//! requests under another adapter, the same one at half scale, and none) is identical;
//! `verify --replay` reproduces an answer served under an adapter, whose
//! `system_fingerprint` names the adapter: the base's fingerprint, or another adapter
//! under the same name, is refused in one line.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::{json, Value};
use tl_serve::LoraSpec;

fn adapter(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../families/tests/fixtures/lora").join(name)
}

fn verify(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_verify")).args(args).output().expect("run verify");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

fn lora_flag(name: &str, dir: &str) -> String {
    format!("{name}={}", adapter(dir).display())
}

#[test]
fn verify_runs_the_target_under_its_adapter_and_among_other_adapters() {
    let model = tiny();
    let (all, rs) = (lora_flag("all", "llama-all"), lora_flag("rs", "llama-rs"));
    let (code, out, err) = verify(&[
        "--model",
        &model.to_string_lossy(),
        "--lora",
        &all,
        "--lora",
        &rs,
        "--prompt",
        "You are a careful assistant. What is a KV cache?",
        "--seed",
        "7",
        "--temperature",
        "0.9",
        "--max-tokens",
        "24",
        "--threads",
        "2",
        "--batches",
        "4",
        "--chunks",
        "7",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let first = out.lines().next().unwrap_or_default();
    assert!(first.starts_with("reference: alone, 2 threads, adapter all@1:"), "{out}");
    let among = out.lines().find(|l| l.starts_with("in a step with other adapters")).expect("the adapters condition");
    assert!(among.contains("target under all@1; co-requests under rs@1, all@0.5, none, rs@1"), "{among}");
    assert!(among.ends_with(": identical"), "{among}");
    // Batch, chunk, threads, two prefix hits, preemption, speculation and the adapters.
    assert!(out.contains("all 8 conditions identical"), "{out}");
    assert!(!out.contains("not exercised ("), "{out}");

    // The request names the adapter (serve's `model`): the target runs under rs instead.
    let d = tempfile::tempdir().expect("tempdir");
    let req = d.path().join("req.json");
    std::fs::write(&req, json!({"model": "rs", "prompt": "A cache is", "seed": 3, "max_tokens": 8}).to_string())
        .expect("write");
    let (code, out, err) = verify(&[
        "--model",
        &model.to_string_lossy(),
        "--lora",
        &all,
        "--lora",
        &rs,
        "--request",
        &req.to_string_lossy(),
        "--threads",
        "1",
        "--batches",
        "2",
        "--chunks",
        "1",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.lines().next().unwrap_or_default().contains(", adapter rs@1:"), "{out}");
    assert!(out.contains("co-requests under all@1, rs@0.5, none, all@1): identical"), "{out}");

    // A bad adapter is a one-line error naming it.
    let bad = format!("x={}", d.path().join("nowhere").display());
    let (code, _, err) = verify(&["--model", &model.to_string_lossy(), "--lora", &bad, "--prompt", "hi"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.lines().count() == 1 && err.contains("--lora x") && err.contains("nowhere"), "{err}");
}

/// A chat answer saved from a serve with adapters, under `model`.
fn saved(dir: &Path, model: &str) -> (PathBuf, Value) {
    let mut o = options(tiny(), 256, 16, 8, 16);
    o.loras = vec![LoraSpec { name: "all".into(), path: adapter("llama-all"), scale: 1.0 }];
    let s = Server::start(o);
    let request = json!({"model": model, "seed": 11, "temperature": 0.9, "max_tokens": 16,
        "logprobs": true, "top_logprobs": 2,
        "messages": [{"role": "user", "content": "What is a cache?"}]});
    let r = s.post("/v1/chat/completions", &request);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let response = r.json();
    let path = dir.join(format!("{model}.json"));
    std::fs::write(&path, json!({"request": request, "response": response}).to_string()).expect("write");
    (path, response)
}

#[test]
fn replay_reproduces_an_adapted_answer_and_its_fingerprint_names_the_adapter() {
    let d = tempfile::tempdir().expect("tempdir");
    let (adapted, a) = saved(d.path(), "all");
    let (_, base) = saved(d.path(), "tiny-llama");
    let fp = |v: &Value| v["system_fingerprint"].as_str().expect("fingerprint").to_string();
    assert_ne!(fp(&a), fp(&base), "an adapted answer carries the base's fingerprint");
    assert_ne!(a["choices"], base["choices"], "the adapter changed nothing");

    let model = tiny();
    let m = model.to_string_lossy();
    let file = adapted.to_string_lossy();
    let (code, out, err) = verify(&["--model", &m, "--lora", &lora_flag("all", "llama-all"), "--replay", &file]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(": identical (1 choice, 16 tokens"), "{out}");
    assert!(out.contains(&fp(&a)), "{out}");

    // Without the adapter, or another adapter under its name: not the promised answer.
    for lora in [None, Some(lora_flag("all", "llama-rs")), Some(format!("{}@0.5", lora_flag("all", "llama-all")))] {
        let mut args = vec!["--model", &m, "--replay", &file];
        if let Some(l) = &lora {
            args.extend(["--lora", l]);
        }
        let (code, out, err) = verify(&args);
        assert_eq!(code, 2, "{lora:?}: {out}{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(&format!("saved with system_fingerprint {}", fp(&a))), "{lora:?}: {err}");
    }
}
