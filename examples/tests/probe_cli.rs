//! The probe binary, run as scripts/bench_compare.sh (SIZE=1b) runs it: its JSON lines are
//! a contract with that script. No assertion here depends on how fast anything ran.

use std::process::Command;

fn probe(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_probe")).args(args).output().expect("probe did not start")
}

fn json_lines(stdout: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The SIMD paths this CPU can run (the probe refuses the others).
fn paths() -> Vec<&'static str> {
    let mut v = vec!["portable"];
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            v.push("avx2");
        }
        if is_x86_feature_detected!("avx512f") {
            v.push("avx512");
        }
    }
    v
}

#[test]
fn one_bandwidth_and_one_fma_line_per_thread_count_on_every_path() {
    for isa in paths() {
        let out = probe(&[
            "--threads",
            "1,2",
            "--mib",
            "4",
            "--repeats",
            "2",
            "--fma-mega-iters",
            "1",
            "--isa",
            isa,
            "--json-only",
        ]);
        assert!(out.status.success(), "{isa}: {}", String::from_utf8_lossy(&out.stderr));
        let lines = json_lines(&out.stdout);
        let kinds: Vec<(String, u64)> =
            lines.iter().map(|j| (j["probe"].as_str().unwrap().to_owned(), j["threads"].as_u64().unwrap())).collect();
        let want: Vec<(String, u64)> = [("read_bandwidth", 1), ("read_bandwidth", 2), ("fma_peak", 1), ("fma_peak", 2)]
            .iter()
            .map(|(k, t)| (k.to_string(), *t))
            .collect();
        assert_eq!(kinds, want, "{isa}");
        let name = match isa {
            "avx512" => "Avx512",
            "avx2" => "Avx2",
            _ => "Portable",
        };
        for j in &lines {
            assert_eq!(j["isa"], name, "{j}");
            let (key, max) = if j["probe"] == "fma_peak" { ("gflop_s", "gflop_s_max") } else { ("gb_s", "gb_s_max") };
            assert!(j[key].as_f64().is_some_and(|v| v > 0.0), "{key} in {j}");
            assert!(j[key].as_f64() <= j[max].as_f64(), "median above max in {j}");
            assert_eq!(j["repeats"], 2);
        }
        assert!(lines.iter().filter(|j| j["probe"] == "read_bandwidth").all(|j| j["mib"] == 4));
        assert!(lines.iter().filter(|j| j["probe"] == "fma_peak").all(|j| j["accumulators"] == 12));
    }
}

#[test]
fn best_is_the_widest_path_the_cpu_has() {
    let out = probe(&["--threads", "1", "--mib", "1", "--repeats", "1", "--fma-mega-iters", "1", "--json-only"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let widest = match *paths().last().unwrap() {
        "avx512" => "Avx512",
        "avx2" => "Avx2",
        _ => "Portable",
    };
    assert!(json_lines(&out.stdout).iter().all(|j| j["isa"] == widest));
}

#[test]
fn bad_arguments_fail_in_one_line() {
    for args in [&["--isa", "sse9"][..], &["--threads", "0"], &["--repeats", "0"], &["--mib", "0"]] {
        let out = probe(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed {}", String::from_utf8_lossy(&out.stdout));
    }
}
