//! Every binary on every fixture model, run as a user runs them: generate, perplexity
//! and bench on the bigram, the tiny Llama, Qwen2, Qwen3 (safetensors and GGUF; with YaRN),
//! Mistral, Gemma 3 (safetensors and GGUF) and the mixtures of experts (Qwen3-MoE and
//! Mixtral, safetensors and GGUF; OLMoE; gpt-oss in bf16 and MXFP4, safetensors and GGUF;
//! the MXFP4_MOE GGUFs);
//! chat where the model has a template; convert where the model is a GGUF file. The same
//! Qwen2 (and Qwen3) weights from safetensors, GGUF and the GGUF converted back give the
//! same text.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// (name, model path, has a chat template)
fn models() -> Vec<(&'static str, PathBuf, bool)> {
    let r = repo();
    vec![
        ("bigram", r.join("arch-bigram/tests/fixtures/tracer"), false),
        ("llama", r.join("arch-llama/tests/fixtures/tiny-llama"), false),
        ("llama3", r.join("arch-llama/tests/fixtures/tiny-llama3"), false),
        ("llama3-gguf", r.join("arch-llama/tests/fixtures/tiny-llama3/model.gguf"), false),
        ("qwen2", r.join("arch-qwen2/tests/fixtures/tiny-qwen2"), true),
        ("qwen2-tied", r.join("arch-qwen2/tests/fixtures/tiny-qwen2-tied"), false),
        ("qwen2-gguf", r.join("arch-qwen2/tests/fixtures/tiny-qwen2/model.gguf"), true),
        ("qwen3", r.join("arch-qwen3/tests/fixtures/tiny-qwen3"), true),
        ("qwen3-tied", r.join("arch-qwen3/tests/fixtures/tiny-qwen3-tied"), false),
        ("qwen3-gguf", r.join("arch-qwen3/tests/fixtures/tiny-qwen3/model.gguf"), true),
        ("qwen3-tied-gguf", r.join("arch-qwen3/tests/fixtures/tiny-qwen3-tied/model.gguf"), true),
        ("mistral", r.join("arch-mistral/tests/fixtures/tiny-mistral"), false),
        ("gemma3", r.join("arch-gemma3/tests/fixtures/tiny-gemma3"), false),
        ("gemma3-gguf", r.join("arch-gemma3/tests/fixtures/tiny-gemma3/model.gguf"), false),
        ("qwen3-yarn", r.join("arch-qwen3/tests/fixtures/tiny-qwen3-yarn"), false),
        ("qwen3-moe", r.join("arch-qwen3-moe/tests/fixtures/tiny-qwen3-moe"), true),
        ("qwen3-moe-gguf", r.join("arch-qwen3-moe/tests/fixtures/tiny-qwen3-moe/model.gguf"), false),
        ("mixtral", r.join("arch-mixtral/tests/fixtures/tiny-mixtral"), false),
        ("mixtral-gguf", r.join("arch-mixtral/tests/fixtures/tiny-mixtral/model.gguf"), false),
        ("olmoe", r.join("arch-olmoe/tests/fixtures/tiny-olmoe"), false),
        ("gpt-oss", r.join("arch-gpt-oss/tests/fixtures/tiny-gpt-oss"), false),
        ("gpt-oss-mxfp4", r.join("arch-gpt-oss/tests/fixtures/tiny-gpt-oss-mxfp4"), false),
        ("gpt-oss-gguf-mxfp4", r.join("arch-gpt-oss/tests/fixtures/tiny-gpt-oss/model.MXFP4_MOE.gguf"), false),
        ("qwen3-moe-gguf-mxfp4", r.join("arch-qwen3-moe/tests/fixtures/tiny-qwen3-moe/model.MXFP4_MOE.gguf"), false),
    ]
}

fn run(exe: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(exe);
    cmd.args(args).env("RAYON_NUM_THREADS", "2").stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{exe} did not start: {e}"));
    if let Some(text) = stdin {
        use std::io::Write;
        // A binary that refuses its model (chat without a template) may exit before it
        // reads stdin: the write then fails with a broken pipe, and what the test checks
        // is the exit status and stderr below, not the write.
        match child.stdin.take().expect("stdin").write_all(text.as_bytes()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            r => r.expect("write stdin"),
        }
    }
    child.wait_with_output().expect("wait")
}

fn ok(what: &str, out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} failed: {err}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn generate(model: &Path) -> String {
    let m = model.to_str().expect("utf-8 path");
    let out = run(
        env!("CARGO_BIN_EXE_generate"),
        &["--model", m, "--prompt", "Hello", "--temperature", "0", "--max-tokens", "8", "--threads", "2"],
        None,
    );
    ok(&format!("generate on {m}"), &out)
}

#[test]
fn generate_perplexity_and_bench_run_on_every_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = dir.path().join("text.txt");
    std::fs::write(&text, "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.")
        .expect("write text");
    for (name, model, _) in models() {
        let m = model.to_str().expect("utf-8 path");
        generate(&model);
        let out = run(
            env!("CARGO_BIN_EXE_perplexity"),
            &["--model", m, "--file", text.to_str().expect("path"), "--window", "32", "--threads", "2"],
            None,
        );
        let line = ok(&format!("perplexity on {name}"), &out);
        let ppl: f64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("{name}: no perplexity in {line:?}"));
        assert!(ppl.is_finite() && ppl > 1.0, "{name}: perplexity {ppl}");
        let out = run(
            env!("CARGO_BIN_EXE_bench"),
            &[
                "--model",
                m,
                "--prompt-tokens",
                "8",
                "--decode-tokens",
                "4",
                "--batch",
                "2",
                "--repeats",
                "1",
                "--json-only",
                "--threads",
                "2",
            ],
            None,
        );
        let json = ok(&format!("bench on {name}"), &out);
        assert!(json.contains("weights_mib") || json.contains("prefill"), "{name}: bench printed {json:?}");
    }
}

#[test]
fn chat_runs_with_the_model_template_and_convert_round_trips_the_gguf() {
    for (name, model, template) in models() {
        let m = model.to_str().expect("utf-8 path");
        let out = run(
            env!("CARGO_BIN_EXE_chat"),
            &["--model", m, "--temperature", "0", "--max-tokens", "4", "--threads", "2"],
            Some("hi\n"),
        );
        if template {
            ok(&format!("chat on {name}"), &out);
        } else {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success() && err.contains("no chat template"), "chat on {name}: {err}");
        }
    }
    // The Qwen2 and Qwen3 weights: safetensors, GGUF, and the GGUF converted back all say
    // the same.
    for fixture in ["arch-qwen2/tests/fixtures/tiny-qwen2", "arch-qwen3/tests/fixtures/tiny-qwen3"] {
        let r = repo().join(fixture);
        let gguf = r.join("model.gguf");
        let dir = tempfile::tempdir().expect("tempdir");
        let out_dir = dir.path().join("converted");
        let out = run(
            env!("CARGO_BIN_EXE_convert"),
            &["--gguf", gguf.to_str().expect("path"), "--out", out_dir.to_str().expect("path"), "--dtype", "f32"],
            None,
        );
        ok(&format!("convert on {fixture}/model.gguf"), &out);
        assert!(out_dir.join("chat_template.jinja").is_file(), "{fixture}: the template was not carried over");
        let want = generate(&r);
        assert_eq!(generate(&gguf), want, "{fixture}: GGUF and safetensors generate different text");
        assert_eq!(generate(&out_dir), want, "{fixture}: the converted directory generates different text");
    }
    // The Gemma 3 GGUF and the directory converted from it say the same (the GGUF stores
    // the norms as 1 + w; the directory keeps them so, and says it in its config). The
    // fixture's own safetensors differ on purpose: a GGUF carries no query_pre_attn_scalar
    // (arch-gemma3's tests compare it with the safetensors under the scale it implies).
    let gguf = repo().join("arch-gemma3/tests/fixtures/tiny-gemma3/model.gguf");
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().join("converted-gemma3");
    let out = run(
        env!("CARGO_BIN_EXE_convert"),
        &["--gguf", gguf.to_str().expect("path"), "--out", out_dir.to_str().expect("path"), "--dtype", "f32"],
        None,
    );
    ok("convert on the Gemma 3 GGUF", &out);
    assert_eq!(generate(&out_dir), generate(&gguf), "Gemma 3: the converted directory generates different text");
}

/// `--kv q8-slab` works in every binary that runs a model (the same flag as `--kv
/// f16-slab`, the default), and an unknown backend is refused by name.
#[test]
fn every_binary_takes_the_q8_kv_backend() {
    let model = repo().join("arch-llama/tests/fixtures/tiny-llama");
    let m = model.to_str().expect("utf-8 path");
    let dir = tempfile::tempdir().expect("tempdir");
    let text = dir.path().join("text.txt");
    std::fs::write(&text, "The quick brown fox jumps over the lazy dog. ".repeat(4)).expect("write");
    let base = ["--model", m, "--threads", "2", "--kv", "q8-slab"];
    let runs: [(&str, Vec<&str>); 3] = [
        (env!("CARGO_BIN_EXE_generate"), vec!["--prompt", "Hello", "--temperature", "0", "--max-tokens", "8"]),
        (env!("CARGO_BIN_EXE_perplexity"), vec!["--file", text.to_str().expect("path"), "--window", "32"]),
        (
            env!("CARGO_BIN_EXE_bench"),
            vec!["--prompt-tokens", "8", "--decode-tokens", "4", "--batch", "2", "--repeats", "1", "--json-only"],
        ),
    ];
    for (exe, args) in &runs {
        let all: Vec<&str> = base.iter().copied().chain(args.iter().copied()).collect();
        ok(&format!("{exe} --kv q8-slab"), &run(exe, &all, None));
    }
    let bad = run(env!("CARGO_BIN_EXE_generate"), &["--model", m, "--prompt", "Hi", "--kv", "q4-slab"], None);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("q4-slab") && err.contains("q8-slab"),
        "the error names the backend and the known ones: {err}"
    );
}

#[test]
fn perplexity_scores_from_the_position_asked_as_llama_perplexity_does() {
    let model = repo().join("arch-llama/tests/fixtures/tiny-llama");
    let m = model.to_str().expect("utf-8 path");
    let dir = tempfile::tempdir().expect("tempdir");
    let text = dir.path().join("text.txt");
    std::fs::write(&text, "The quick brown fox jumps over the lazy dog. ".repeat(20)).expect("write");
    let t = text.to_str().expect("path");
    let scored = |extra: &[&str]| -> (usize, usize) {
        let mut args = vec!["--model", m, "--file", t, "--window", "32", "--max-windows", "3", "--threads", "2"];
        args.extend_from_slice(extra);
        let line = ok("perplexity", &run(env!("CARGO_BIN_EXE_perplexity"), &args, None));
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = |w: &str| words.iter().position(|x| *x == w).unwrap_or_else(|| panic!("{w:?} in {line:?}"));
        (
            words[at("over") + 1].parse().expect("tokens"),
            words[at("windows") - 1].trim_start_matches('(').parse().expect("windows"),
        )
    };
    // Every window full: 31 predictions each, or the 15 from position 16 on.
    assert_eq!(scored(&[]), (3 * 31, 3));
    assert_eq!(scored(&["--score-from", "16"]), (3 * 15, 3));
    // No prediction left to score: one clean line, exit non-zero.
    let out = run(
        env!("CARGO_BIN_EXE_perplexity"),
        &["--model", m, "--file", t, "--window", "32", "--score-from", "31"],
        None,
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--score-from 31") && err.trim_end().lines().count() == 1, "{err}");
}
