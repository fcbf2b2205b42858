//! Tool loops driven by clients nobody here wrote, against SmolLM2 (whose template has no
//! tool support: the generic format): the official `openai` client
//! (serve/tests/openai_tools.py) and langchain-openai, an agent library's OpenAI adapter
//! (serve/tests/agent_tools.py). Each completes call -> `role: "tool"` result -> answer.
//!
//! The venvs are target/venv-openai and target/venv-agents, built by scripts/openai_venv.sh
//! and scripts/agents_venv.sh (scripts/test.sh runs both). Without one this test skips
//! loudly, unless TL_REQUIRE_MODEL is set (CI), in which case it fails.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;

fn python(venv: &str, script: &str) -> Option<PathBuf> {
    let py = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target").join(venv).join("bin/python");
    if py.is_file() {
        return Some(py);
    }
    assert!(
        std::env::var_os("TL_REQUIRE_MODEL").is_none(),
        "TL_REQUIRE_MODEL is set but {} is missing: run {script}",
        py.display()
    );
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("\nSKIPPED: {} is missing (run {script})\n", py.display()).as_bytes(),
    );
    None
}

fn run(py: PathBuf, script: &str, s: &Server) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join(script);
    let out = Command::new(py)
        .arg(&script)
        .arg(format!("http://{}/v1", s.addr))
        .arg("SmolLM2-135M-Instruct.Q4_1")
        .output()
        .expect("run python");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{} failed:\n{text}", script.display());
    text
}

#[test]
fn the_official_client_completes_a_tool_loop() {
    let Some(model) = smollm2() else { return };
    let Some(py) = python("venv-openai", "scripts/openai_venv.sh") else { return };
    let s = Server::start(options(model, 2048, 16, 8, 64));
    let text = run(py, "openai_tools.py", &s);
    for check in ["tool call ok", "final answer ok", "streamed tool call ok"] {
        assert!(text.contains(check), "{check} missing:\n{text}");
    }
    s.assert_pool_clean();
}

#[test]
fn langchain_openai_completes_a_tool_loop() {
    let Some(model) = smollm2() else { return };
    let Some(py) = python("venv-agents", "scripts/agents_venv.sh") else { return };
    let s = Server::start(options(model, 2048, 16, 8, 64));
    let text = run(py, "agent_tools.py", &s);
    for check in ["agent tool call ok", "agent final answer ok"] {
        assert!(text.contains(check), "{check} missing:\n{text}");
    }
    s.assert_pool_clean();
}
