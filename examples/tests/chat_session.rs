//! `chat --session FILE`: a conversation saved after one turn and resumed by a second
//! process answers its next turn exactly as one process running both turns does, with
//! the saved K/V reused instead of prefilled; a damaged, mismatched or foreign saved KV
//! is refused and the conversation recomputed, with the same answer.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../arch-qwen2/tests/fixtures/tiny-qwen2")
}

/// (stdout, stderr) of `chat` fed `input`, with `extra` flags.
fn chat(input: &str, extra: &[&str]) -> (String, String) {
    let m = model();
    let mut child = Command::new(env!("CARGO_BIN_EXE_chat"))
        .args(["--model", m.to_str().expect("utf-8"), "--temperature", "0", "--max-tokens", "12", "--threads", "1"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn chat");
    child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write");
    let out = child.wait_with_output().expect("chat");
    let (o, e) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "chat failed: {e}");
    (o, e)
}

/// The `[reused N cached tokens, prefilled M ...]` figures of each turn.
fn reuse(stderr: &str) -> Vec<(usize, usize)> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("[reused "))
        .map(|l| {
            let n: Vec<usize> = l.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
            (n[0], n[1])
        })
        .collect()
}

/// A way to damage a saved session (its JSON path).
type Spoil = Box<dyn Fn(&Path)>;

fn copy_session(from: &Path, to: &Path) {
    std::fs::copy(from, to).expect("copy json");
    std::fs::copy(from.with_extension("json.kvb"), to.with_extension("json.kvb")).expect("copy kvb");
}

#[test]
fn a_resumed_session_answers_as_one_process_and_reuses_its_kv() {
    let (first, second) = ("Hello there, how are you today?\n", "Tell me a story about a fox.\n");
    // One process, both turns: the reference answers and reuse.
    let (both, both_err) = chat(&format!("{first}{second}"), &[]);
    let both_reuse = reuse(&both_err);
    assert_eq!(both_reuse.len(), 2, "{both_err}");
    assert!(both_reuse[1].0 > 0, "the second turn reuses the first's KV in one process");

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("s.json");
    let f = file.to_str().expect("utf-8");
    let (out1, _) = chat(first, &["--session", f]);
    let saved = dir.path().join("after-turn-1.json");
    copy_session(&file, &saved);
    let (out2, err2) = chat(second, &["--session", f]);
    assert!(err2.contains("[resumed 2 messages"), "{err2}");
    // Each process ends with its prompt and a newline at end of input.
    let joined = format!("{}{}", out1.strip_suffix("> \n").expect("prompt at end"), out2);
    assert_eq!(joined, both, "the resumed conversation says what one process says");
    assert_eq!(reuse(&err2), vec![both_reuse[1]], "the resumed turn reused as much KV as in one process");

    // Bad saved KV: refused, recomputed from the messages, the same answer.
    let damage: Vec<(&str, Spoil)> = vec![
        (
            "a flipped byte",
            Box::new(|p: &Path| {
                let kvb = p.with_extension("json.kvb");
                let mut b = std::fs::read(&kvb).expect("kvb");
                let at = b.len() / 2;
                b[at] ^= 4;
                std::fs::write(kvb, b).expect("write");
            }),
        ),
        (
            "truncated",
            Box::new(|p: &Path| {
                let kvb = p.with_extension("json.kvb");
                let b = std::fs::read(&kvb).expect("kvb");
                std::fs::write(kvb, &b[..b.len() - 100]).expect("write");
            }),
        ),
        (
            "another model's",
            Box::new(|p: &Path| {
                let t = std::fs::read_to_string(p).expect("json");
                let mut v: serde_json::Value = serde_json::from_str(&t).expect("json");
                v["model"] = "fp_0000000000000000-f16-slab".into();
                std::fs::write(p, v.to_string()).expect("write");
            }),
        ),
        (
            "edited token ids",
            Box::new(|p: &Path| {
                let t = std::fs::read_to_string(p).expect("json");
                let mut v: serde_json::Value = serde_json::from_str(&t).expect("json");
                v["tokens"][3] = 7.into();
                std::fs::write(p, v.to_string()).expect("write");
            }),
        ),
    ];
    for (what, spoil) in damage {
        let bad = dir.path().join("bad.json");
        copy_session(&saved, &bad);
        spoil(&bad);
        let (out, err) = chat(second, &["--session", bad.to_str().expect("utf-8")]);
        assert!(err.contains("the saved KV was refused"), "{what}: {err}");
        assert_eq!(out, out2, "{what}: the recomputed answer is the same");
        assert_eq!(reuse(&err)[0].0, 0, "{what}: nothing was reused");
    }
}
