//! The generate binary, run as a user runs it.

use std::process::Command;

const TRACER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../arch-bigram/tests/fixtures/tracer");

fn generate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_generate")).args(args).output().expect("generate did not start")
}

#[test]
fn generate_greedy_on_the_tracer_prints_bcd() {
    let out = generate(&["--model", TRACER, "--prompt", "a", "--temperature", "0", "--max-tokens", "3"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim_end(), "bcd");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("prompt 1 tokens, generated 3 tokens"), "{err}");
}

#[test]
fn the_same_seed_repeats_and_another_differs() {
    let run = |seed: &str| {
        let out = generate(&["--model", TRACER, "--prompt", "a", "--max-tokens", "40", "--seed", seed]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    assert_eq!(run("7"), run("7"));
    assert_ne!(run("7"), run("8"), "two seeds sampled the same 40 bytes of a smoothed bigram");
}

#[test]
fn bad_input_prints_one_line_and_fails() {
    for args in [
        vec!["--model", "/no/such/model", "--prompt", "a"],
        vec!["--model", TRACER, "--prompt", "a", "--top-p", "2"],
        vec!["--model", TRACER, "--no-such-flag"],
        vec!["--model", TRACER, "--prompt", "a", "--kv", "no-such-pool"],
        vec!["--model", TRACER, "--prompt", "a", "--weights", "int5"],
    ] {
        let out = generate(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: not one line: {err}");
        assert!(!err.contains("panicked") && !err.contains("backtrace"), "{err}");
    }
}

#[test]
fn a_stop_string_ends_the_output_before_it() {
    // Greedy on the tracer continues "a" with "bcd\nabcd\n...".
    for (stop, want) in [("d", "bc"), ("cd\na", "b"), ("zz", "bcd\nabcd\nabc")] {
        let out =
            generate(&["--model", TRACER, "--prompt", "a", "--temperature", "0", "--max-tokens", "12", "--stop", stop]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim_end_matches('\n'),
            want.trim_end_matches('\n'),
            "stop {stop:?}"
        );
    }
}
