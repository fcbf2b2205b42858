//! A client nobody here wrote: the official `anthropic` Python SDK (pinned in
//! scripts/anthropic-requirements.txt) runs messages, streams, count_tokens, errors and a
//! tool loop against the server (serve/tests/anthropic_client.py): on the tiny fixtures
//! (the tool loop on the Hermes template) and on SmolLM2 (the generic tool format).
//!
//! The venv is target/venv-anthropic, built by scripts/anthropic_venv.sh (scripts/test.sh
//! runs it), or `TL_ANTHROPIC_VENV`. Without it this test skips loudly, unless
//! TL_REQUIRE_MODEL is set (CI), in which case it fails.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;

fn python() -> Option<PathBuf> {
    let venv = std::env::var_os("TL_ANTHROPIC_VENV")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv-anthropic"), PathBuf::from);
    let py = venv.join("bin/python");
    if py.is_file() {
        return Some(py);
    }
    assert!(
        std::env::var_os("TL_REQUIRE_MODEL").is_none(),
        "TL_REQUIRE_MODEL is set but {} is missing: run scripts/anthropic_venv.sh",
        py.display()
    );
    eprintln!("\nSKIPPED: {} is missing (run scripts/anthropic_venv.sh)", py.display());
    None
}

/// Run the script against `base` (MODEL behind `key`) and `tools` (TOOLS_MODEL).
fn run(py: &PathBuf, base: &Server, model: &str, key: &str, tools: &Server, tools_model: &str) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/anthropic_client.py");
    let out = Command::new(py)
        .arg(script)
        .args([&format!("http://{}", base.addr), model, key, &format!("http://{}", tools.addr), tools_model])
        .output()
        .expect("run python");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "anthropic SDK failed:\n{text}");
    for check in ["create ok", "stream ok", "count ok", "stop ok", "errors ok", "tool loop ok"] {
        assert!(text.contains(check), "{check} missing:\n{text}");
    }
}

/// The same on SmolLM2, a real model (its template has no tool format: the generic one).
#[test]
fn the_official_anthropic_sdk_works_on_smollm2() {
    let Some(model) = smollm2() else { return };
    let Some(py) = python() else { return };
    let mut o = options(model, 2048, 16, 8, 64);
    o.api_key = Some("sdk-key".into());
    let s = Server::start(o);
    let name = "SmolLM2-135M-Instruct.Q4_1";
    run(&py, &s, name, "sdk-key", &s, name);
    s.assert_pool_clean();
}

#[test]
fn the_official_anthropic_sdk_works_including_a_tool_loop() {
    let Some(py) = python() else { return };
    let mut o = options(tiny(), 256, 16, 8, 64);
    o.api_key = Some("sdk-key".into());
    let s = Server::start(o);
    let mut t = options(fixture("tiny-hermes"), 4096, 16, 8, 64);
    t.model_name = Some("tiny-hermes".into());
    let tools = Server::start(t);
    run(&py, &s, "tiny-llama", "sdk-key", &tools, "tiny-hermes");
    s.assert_pool_clean();
    tools.assert_pool_clean();
}
