//! A client nobody here wrote: the official `openai` Python package runs a chat, a
//! streamed chat and a completion against the server (serve/tests/openai_client.py).
//!
//! The venv is target/venv-openai, built by scripts/openai_venv.sh (scripts/test.sh runs
//! it). Without it this test skips loudly, unless TL_REQUIRE_MODEL is set (CI), in which
//! case it fails.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;

fn python() -> Option<PathBuf> {
    let venv = match std::env::var_os("TL_OPENAI_VENV") {
        Some(v) => PathBuf::from(v),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv-openai"),
    };
    let py = venv.join("bin/python");
    if py.is_file() {
        return Some(py);
    }
    assert!(
        std::env::var_os("TL_REQUIRE_MODEL").is_none(),
        "TL_REQUIRE_MODEL is set but {} is missing: run scripts/openai_venv.sh",
        py.display()
    );
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("\nSKIPPED: {} is missing (run scripts/openai_venv.sh)\n", py.display()).as_bytes(),
    );
    None
}

#[test]
fn the_official_openai_client_works() {
    let Some(py) = python() else { return };
    let s = Server::start(options(tiny(), 256, 16, 8, 64));
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/openai_client.py");
    let out = Command::new(py)
        .arg(script)
        .arg(format!("http://{}/v1", s.addr))
        .arg("tiny-llama")
        .output()
        .expect("run python");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "openai client failed:\n{text}");
    for check in ["models ok", "chat ok", "streamed chat ok", "completion ok", "errors ok"] {
        assert!(text.contains(check), "{check} missing:\n{text}");
    }
    s.assert_pool_clean();
}

/// Structured outputs through the official client (serve/tests/openai_parse.py):
/// `chat.completions.parse(response_format=Model)` with ten Pydantic models on SmolLM2,
/// streaming, `finish_reason: "length"`, and a bad schema's 400.
#[test]
fn the_official_client_parses_structured_outputs() {
    let Some(model) = smollm2() else { return };
    let Some(py) = python() else { return };
    let s = Server::start(options(model, 2048, 16, 8, 64));
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/openai_parse.py");
    let out = Command::new(py)
        .arg(script)
        .arg(format!("http://{}/v1", s.addr))
        .arg("SmolLM2-135M-Instruct.Q4_1")
        .output()
        .expect("run python");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "openai client failed:\n{text}");
    assert_eq!(text.matches("parsed ok:").count(), 10, "{text}");
    for check in ["streamed parse ok", "length ok", "bad schema ok"] {
        assert!(text.contains(check), "{check} missing:\n{text}");
    }
    s.assert_pool_clean();
}
