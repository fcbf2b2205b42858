//! `serve --kv-disk DIR --kv-disk-max-gib N`: a restarted server answers a long shared
//! prompt without prefilling its full blocks (usage's `cached_tokens` and the
//! `step_prefill_tokens` sum both show it), with the cold server's answer bit for bit; a
//! damaged file is refused and recomputed, never served.

mod common;

use serde_json::{json, Value};

use common::*;

/// A prompt of well over four 16-token blocks.
fn body() -> Value {
    let prompt = "The quick brown fox jumps over the lazy dog while the cat watches from the old wooden fence.";
    json!({"model": "tiny-llama", "prompt": prompt, "max_tokens": 8, "seed": 3, "temperature": 0.8, "logprobs": 3})
}

/// (choices as JSON text, prompt tokens, cached tokens, prompt tokens prefilled in steps).
fn ask(p: &Proc) -> (String, u64, u64, f64) {
    let before = p.metric("tl_step_prefill_tokens_sum");
    let v = p.post("/v1/completions", &body(), &[]).json();
    let u = &v["usage"];
    let (n, cached) = (
        u["prompt_tokens"].as_u64().unwrap_or_else(|| panic!("{v}")),
        u["prompt_tokens_details"]["cached_tokens"].as_u64(),
    );
    (v["choices"].to_string(), n, cached.unwrap_or(0), p.metric("tl_step_prefill_tokens_sum") - before)
}

fn serve(dir: Option<&std::path::Path>) -> Proc {
    let mut args = vec!["--block-tokens", "16"];
    let d = dir.map(|d| d.to_string_lossy().into_owned());
    if let Some(d) = &d {
        args.extend(["--kv-disk", d, "--kv-disk-max-gib", "0.5"]);
    }
    Proc::spawn(&args, &[])
}

#[test]
fn a_restarted_server_answers_a_long_prompt_without_prefilling_it() {
    let (cold, n, cached, prefilled) = ask(&serve(None));
    assert!(n >= 65, "the prompt has {n} tokens");
    assert_eq!((cached, prefilled), (0, n as f64));
    let dir = tempfile::tempdir().expect("tempdir");
    let first = ask(&serve(Some(dir.path())));
    assert_eq!(first.0, cold, "writing to disk changes no answer");
    // A new process over the same directory: an empty pool.
    let full = (n - 1) / 16 * 16;
    let (again, _, cached, prefilled) = ask(&serve(Some(dir.path())));
    assert_eq!(again, cold, "the answer from disk keeps every bit of the cold one");
    assert_eq!(cached, full, "every full block came from disk");
    assert_eq!(prefilled, (n - full) as f64, "only the tail was prefilled");
    let p = serve(Some(dir.path()));
    ask(&p);
    assert_eq!(p.metric("tl_kv_disk_blocks_total{event=\"read\"}"), (full / 16) as f64);
    assert_eq!(p.metric("tl_kv_disk_blocks_total{event=\"refused\"}"), 0.0);
    drop(p);

    // Damage every file: the next server refuses them all and recomputes.
    for f in std::fs::read_dir(dir.path()).expect("dir").flatten() {
        for b in std::fs::read_dir(f.path()).expect("model dir").flatten() {
            let mut bytes = std::fs::read(b.path()).expect("read");
            let at = bytes.len() / 3;
            bytes[at] ^= 0x40;
            std::fs::write(b.path(), bytes).expect("write");
        }
    }
    let p = serve(Some(dir.path()));
    let (damaged, _, cached, prefilled) = ask(&p);
    assert_eq!(damaged, cold, "a damaged file is never served");
    assert_eq!((cached, prefilled), (0, n as f64), "every damaged block was prefilled again");
    // The walk stops at the first bad block: one refused; the files after it, unread,
    // are suspect, and every recomputed block is written over its damaged file.
    assert_eq!(p.metric("tl_kv_disk_blocks_total{event=\"refused\"}"), 1.0);
    assert_eq!(p.metric("tl_kv_disk_blocks_total{event=\"written\"}"), (full / 16) as f64);
    drop(p);
    let (repaired, _, cached, _) = ask(&serve(Some(dir.path())));
    assert_eq!((repaired, cached), (cold, full), "the directory was repaired in one run");
}
