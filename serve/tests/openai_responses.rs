//! The official `openai` Python client's Responses API (`responses.create`, streamed, a
//! function tool loop over `previous_response_id`, `responses.parse` and
//! `responses.stream` with `text_format`, errors) against serve on SmolLM2
//! (serve/tests/openai_responses.py).
//!
//! The venv is target/venv-openai, built by scripts/openai_venv.sh (scripts/test.sh runs
//! it). Without it or the model this test skips loudly, unless TL_REQUIRE_MODEL is set
//! (CI), in which case it fails.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;

#[test]
fn the_official_client_uses_the_responses_api() {
    let Some(model) = smollm2() else { return };
    let Some(py) = openai_python() else { return };
    let s = Server::start(options(model, 2048, 16, 8, 64));
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/openai_responses.py");
    let out = Command::new(py)
        .arg(script)
        .arg(format!("http://{}/v1", s.addr))
        .arg("SmolLM2-135M-Instruct.Q4_1")
        .output()
        .expect("run python");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "openai client failed:\n{text}");
    assert_eq!(text.matches("parsed ok:").count(), 2, "{text}");
    for check in
        ["create ok", "incomplete ok", "streamed ok", "tool call ok", "tool loop ok", "streamed parse ok", "errors ok"]
    {
        assert!(text.contains(check), "{check} missing:\n{text}");
    }
    s.assert_pool_clean();
}
