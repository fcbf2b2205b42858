//! The bench binary, run as scripts/bench_compare.sh runs it: its JSON lines are a
//! contract with that script. No assertion here depends on how fast anything ran.

use std::process::Command;

const TRACER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../arch-bigram/tests/fixtures/tracer");

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bench")).args(args).output().expect("bench did not start")
}

/// The stdout lines that are JSON objects, parsed.
fn json_lines(stdout: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn one_json_line_per_batch_size_with_the_fields_scripts_read() {
    let out = bench(&[
        "--model",
        TRACER,
        "--prompt-tokens",
        "5",
        "--decode-tokens",
        "3",
        "--batch",
        "4,2,4,1",
        "--repeats",
        "2",
        "--threads",
        "1",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("prefill 1 x 5") && text.contains("decode 4 seqs together"), "{text}");
    let lines = json_lines(&out.stdout);
    // batch 1 (always), then each size above 1 ascending, duplicates once.
    let batches: Vec<u64> = lines.iter().map(|j| j["batch"].as_u64().unwrap()).collect();
    assert_eq!(batches, [1, 2, 4], "{text}");
    for j in &lines {
        for key in ["prefill_tok_s", "decode_tok_s", "peak_rss_mib", "rss_after_load_mib", "weights_mib"] {
            assert!(j[key].as_f64().is_some_and(|v| v > 0.0), "{key} in {j}");
        }
        assert!(j["load_s"].as_f64().is_some_and(|v| v >= 0.0), "{j}");
        // The tracer's pool is a few KiB: 0.0 at MiB precision, but always reported.
        assert!(j["kv_pool_mib"].as_f64().is_some_and(|v| v >= 0.0), "{j}");
        assert_eq!(j["model"], TRACER);
        assert_eq!(j["tool"], "tl");
        assert_eq!(j["weights"], "native");
        assert_eq!(j["threads"], 1);
        assert_eq!(j["prompt_tokens"], 5);
        assert_eq!(j["decode_tokens"], 3);
        assert_eq!(j["repeats"], 2);
        assert!(j["isa"].as_str().is_some_and(|s| !s.is_empty()), "{j}");
        assert!(j["decode_tok_s_min"].as_f64() <= j["decode_tok_s_max"].as_f64(), "{j}");
    }
    assert!(lines[0]["batch_prefill_tok_s"].is_null());
    assert!(lines[1]["batch_prefill_tok_s"].as_f64().is_some_and(|v| v > 0.0));
}

#[test]
fn json_only_prints_nothing_else_and_no_decode_means_one_line() {
    let out =
        bench(&["--model", TRACER, "--prompt-tokens", "3", "--decode-tokens", "0", "--repeats", "1", "--json-only"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 1, "{text}");
    let lines = json_lines(&out.stdout);
    assert_eq!(lines[0]["batch"], 1);
    assert!(lines[0]["decode_tok_s"].is_null(), "{text}");
    assert!(lines[0]["prefill_tok_s"].as_f64().is_some_and(|v| v > 0.0), "{text}");
}

#[test]
fn bad_input_prints_one_line_and_fails() {
    for args in [
        vec!["--model", "/no/such/model"],
        vec!["--model", TRACER, "--batch", "0"],
        vec!["--model", TRACER, "--batch", "8,x"],
        vec!["--model", TRACER, "--repeats", "0"],
        vec!["--model", TRACER, "--prompt-tokens", "0"],
        vec!["--model", TRACER, "--weights", "int5"],
        vec!["--model", TRACER, "--no-such-flag"],
    ] {
        let out = bench(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: not one line: {err}");
        assert!(!err.contains("panicked") && !err.contains("backtrace"), "{err}");
    }
}
