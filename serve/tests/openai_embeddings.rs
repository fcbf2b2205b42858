//! The official `openai` Python client's `embeddings.create` (a string, lists, token ids,
//! float and base64, `dimensions`, errors) and `/v1/rerank` over plain HTTP against serve
//! on the tiny random Qwen3 fixture (serve/tests/openai_embeddings.py).
//!
//! The venv is target/venv-openai, built by scripts/openai_venv.sh (scripts/test.sh runs
//! it). Without it this test skips loudly, unless TL_REQUIRE_MODEL is set (CI), in which
//! case it fails.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;

#[test]
fn the_official_client_creates_embeddings() {
    let Some(py) = openai_python() else { return };
    let model = crate_fixture("arch-qwen3", "tiny-qwen3");
    let s = Server::start(options(model, 64, 16, 8, 64));
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/openai_embeddings.py");
    let out = Command::new(py)
        .arg(script)
        .arg(format!("http://{}/v1", s.addr))
        .arg("tiny-qwen3")
        .output()
        .expect("run python");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "openai client failed:\n{text}");
    for check in ["string ok", "list ok", "tokens ok", "base64 ok", "dimensions ok", "errors ok", "rerank ok"] {
        assert!(text.contains(check), "{check} missing:\n{text}");
    }
    s.assert_pool_clean();
}
