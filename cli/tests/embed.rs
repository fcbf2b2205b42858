//! `tl embed`: the lines of a file through the tiny random BERT of arch-bert's fixtures
//! give sentence-transformers' vectors (its reference.json, from sentence-transformers
//! alone), one JSON line per non-empty line, the same bits for any `--batch`; an
//! over-long line stops the run naming it unless `--truncate`; a decoder or a
//! cross-encoder is refused in one line.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

fn tl(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tl")).args(args).output().expect("run tl")
}

fn reference() -> Value {
    let text = std::fs::read_to_string(fixture("arch-bert/tests/fixtures/tiny-bert/reference.json")).expect("read");
    serde_json::from_str(&text).expect("json")
}

#[test]
fn embed_writes_sentence_transformers_vectors_per_line() {
    let r = reference();
    let cases: Vec<&Value> = r["cases"].as_array().expect("cases").iter().filter(|c| c["text"].is_string()).collect();
    let dir = tempfile::tempdir().expect("tmp");
    let lines = dir.path().join("lines.txt");
    // An empty line between the texts is skipped; line numbers count it.
    let mut text = String::new();
    for (i, c) in cases.iter().enumerate() {
        text.push_str(c["text"].as_str().expect("text"));
        text.push('\n');
        if i == 1 {
            text.push('\n');
        }
    }
    std::fs::write(&lines, text).expect("write");
    let model = fixture("arch-bert/tests/fixtures/tiny-bert");
    let (m, l) = (model.to_str().expect("utf-8"), lines.to_str().expect("utf-8"));
    let mut outputs = Vec::new();
    for batch in ["1", "32"] {
        let out = tl(&["embed", m, "--file", l, "--truncate", "--batch", batch]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        outputs.push(out.stdout);
    }
    assert_eq!(outputs[0], outputs[1], "--batch changed a vector");
    let rows: Vec<Value> = String::from_utf8(outputs.remove(0))
        .expect("utf-8")
        .lines()
        .map(|x| serde_json::from_str(x).expect("json"))
        .collect();
    assert_eq!(rows.len(), cases.len());
    for (i, (row, c)) in rows.iter().zip(&cases).enumerate() {
        assert_eq!(row["line"].as_u64(), Some(if i <= 1 { i as u64 + 1 } else { i as u64 + 2 }));
        let got = row["embedding"].as_array().expect("vector");
        let want = c["vectors"]["mean"].as_array().expect("reference");
        assert_eq!(got.len(), want.len());
        let d = got
            .iter()
            .zip(want)
            .map(|(a, b)| (a.as_f64().expect("f") - b.as_f64().expect("f")).abs())
            .fold(0.0, f64::max);
        assert!(d <= 1e-5, "line {}: {d} from sentence-transformers", row["line"]);
    }
    // Without --truncate, the text past max_seq_length (24) stops the run, named.
    let out = tl(&["embed", m, "--file", l]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is longer than the model's 24 tokens") && err.contains("--truncate"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn embed_refuses_models_that_do_not_pool() {
    let dir = tempfile::tempdir().expect("tmp");
    let lines = dir.path().join("lines.txt");
    std::fs::write(&lines, "water\n").expect("write");
    let l = lines.to_str().expect("utf-8");
    for (model, needle) in [
        ("arch-llama/tests/fixtures/tiny-llama", "not an encoder"),
        ("arch-bert/tests/fixtures/tiny-bert-ce", "no pooled vector"),
    ] {
        let out = tl(&["embed", fixture(model).to_str().expect("utf-8"), "--file", l]);
        assert!(!out.status.success(), "{model}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{model}: {err}");
    }
}

#[test]
fn embed_reads_a_gguf_encoder_as_its_directory() {
    // llama.cpp's converter's F32 file of tiny-bert (scripts/fixtures/make_encoder_ggufs.sh):
    // the same JSON lines, byte for byte, as the directory it was made from.
    let dir = tempfile::tempdir().expect("tmp");
    let lines = dir.path().join("lines.txt");
    std::fs::write(&lines, "the water was hot\nCafé naïve, they said!\nwalking talked\n").expect("write");
    let l = lines.to_str().expect("utf-8");
    let run = |model: &str| {
        let m = fixture(model);
        let out = tl(&["embed", m.to_str().expect("utf-8"), "--file", l]);
        assert!(out.status.success(), "{model}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    let (want, got) =
        (run("arch-bert/tests/fixtures/tiny-bert"), run("arch-bert/tests/fixtures/gguf/tiny-bert.F32.gguf"));
    assert_eq!(String::from_utf8_lossy(&got).lines().count(), 3);
    assert_eq!(got, want);
}
