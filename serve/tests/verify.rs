//! `verify`, as a user runs it: every condition identical on the tiny fixture and on
//! SmolLM2 (exit 0); a condition that cannot happen (a prompt no longer than a chunk or too
//! short to cache, a request too short to draft) is `not exercised (why)`, counted apart,
//! exit 0; `--replay` of a pair saved from a running `serve` says identical, a
//! tampered one (one token changed) exits 1 naming the position, and bad files or another
//! model's fingerprint are one-line errors (exit 2).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::{json, Value};
use tl_engine::{FinishReason, TokenInfo};
use tl_serve::verify::replay::compare;
use tl_serve::verify::{first_difference, summary, Outcome, Trace, Verdict};

fn verify(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_verify")).args(args).output().expect("run verify");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// Every condition line, checked: the reference first, then each condition identical, the
/// summary last.
fn all_identical(stdout: &str, batches: usize, chunks: usize, threads: usize) {
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("reference: alone"), "{stdout}");
    let conditions: Vec<&&str> = lines.iter().filter(|l| l.contains(": identical")).collect();
    let expected = batches + chunks + (threads - 1) + 4;
    assert_eq!(conditions.len(), expected, "{stdout}");
    for (what, n) in [
        ("batch of ", batches),
        ("prefill chunks of ", chunks),
        ("prefix-cache hit", 2),
        ("preemption", 1),
        ("speculative decoding", 1),
    ] {
        assert_eq!(conditions.iter().filter(|l| l.starts_with(what)).count(), n, "{what}: {stdout}");
    }
    assert!(!stdout.contains("DIFFERS"), "{stdout}");
    assert!(!stdout.contains("not exercised ("), "{stdout}");
    assert!(stdout.contains(&format!("all {expected} conditions identical")), "{stdout}");
    assert!(stdout.contains(&format!("({expected} identical, 0 differ, 0 not exercised)")), "{stdout}");
    // The conditions were exercised: the cache served tokens, the pool preempted.
    let pre = lines.iter().find(|l| l.starts_with("preemption")).expect("preemption line");
    assert!(!pre.contains("(0 preemptions"), "{pre}");
}

#[test]
fn verify_on_the_tiny_fixture_finds_every_condition_identical() {
    let model = tiny();
    let (code, out, err) = verify(&[
        "--model",
        &model.to_string_lossy(),
        "--prompt",
        "You are a careful assistant. What is a KV cache?",
        "--seed",
        "7",
        "--temperature",
        "0.9",
        "--top-p",
        "0.95",
        "--repetition-penalty",
        "1.1",
        "--max-tokens",
        "40",
        "--threads",
        "2",
        // The prompt is 48 tokens: the default 64 would not cut it (not exercised).
        "--chunks",
        "1,7,32",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    all_identical(&out, 6, 3, 2);
}

#[test]
fn verify_on_smollm2_finds_every_condition_identical() {
    let Some(model) = smollm2() else { return };
    let (code, out, err) = verify(&[
        "--model",
        &model.to_string_lossy(),
        "--messages",
        r#"[{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Name a colour."}]"#,
        "--seed",
        "3",
        "--temperature",
        "0.8",
        "--max-tokens",
        "12",
        "--threads",
        "2",
        "--batches",
        "2,8,64",
        "--chunks",
        "1,13",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    all_identical(&out, 3, 2, 2);
}

#[test]
fn verify_with_q8_activations_finds_every_condition_identical() {
    // The int8-activation mode (`--activations q8`) keeps the promise on SmolLM2, whose
    // Q4_1 projections and Q8_0 head all run on int8 rows.
    let Some(model) = smollm2() else { return };
    let (code, out, err) = verify(&[
        "--model",
        &model.to_string_lossy(),
        "--prompt",
        "Name three colours and say why you like them.",
        "--seed",
        "5",
        "--temperature",
        "0.8",
        "--max-tokens",
        "16",
        "--threads",
        "2",
        "--batches",
        "2,8",
        // The prompt is about 11 tokens: a chunk of 13 would not cut it (not exercised).
        "--chunks",
        "1,7",
        "--activations",
        "q8",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    all_identical(&out, 2, 2, 2);
    let (code, _, err) = verify(&["--model", &model.to_string_lossy(), "--prompt", "x", "--activations", "q4"]);
    assert_eq!(code, 2, "a bad mode is a one-line error: {err}");
    assert!(err.contains("activations") && err.lines().count() == 1, "{err}");
}

/// A request/response pair saved from a running serve, as the docs say to make one.
fn saved_pair(dir: &Path) -> (PathBuf, Value) {
    let s = Server::start(options(tiny(), 256, 16, 8, 16));
    let request = json!({"model": "tiny-llama", "seed": 11, "temperature": 0.9, "max_tokens": 16,
        "logprobs": true, "top_logprobs": 2,
        "messages": [{"role": "user", "content": "What is a cache?"}]});
    let r = s.post("/v1/chat/completions", &request);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let pair = json!({"request": request, "response": r.json()});
    let path = dir.join("pair.json");
    std::fs::write(&path, pair.to_string()).expect("write");
    (path, pair)
}

#[test]
fn replay_confirms_a_saved_answer_and_names_where_a_tampered_one_departs() {
    let d = tempfile::tempdir().expect("tempdir");
    let (path, pair) = saved_pair(d.path());
    let model = tiny();
    let m = model.to_string_lossy();
    let (code, out, err) = verify(&["--model", &m, "--replay", &path.to_string_lossy()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(": identical (1 choice, 16 tokens"), "{out}");

    // One token changed: its text and logprob, and the message text with it.
    let mut bad = pair.clone();
    let tok = &mut bad["response"]["choices"][0]["logprobs"]["content"][5];
    let old = tok["token"].as_str().expect("token").to_string();
    let new = if old == "x" { "y" } else { "x" };
    tok["token"] = json!(new);
    tok["logprob"] = json!(-0.125);
    let tampered = d.path().join("tampered.json");
    std::fs::write(&tampered, bad.to_string()).expect("write");
    let (code, out, err) = verify(&["--model", &m, "--replay", &tampered.to_string_lossy()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("DEPARTS at choice 0, token 5:"), "{out}");
    assert!(out.contains(&format!("saved {new:?} (logprob -0.125)")), "{out}");
}

#[test]
fn replay_refuses_bad_files_and_another_fingerprint_in_one_line() {
    let d = tempfile::tempdir().expect("tempdir");
    let (_, pair) = saved_pair(d.path());
    let model = tiny();
    let m = model.to_string_lossy();
    let write = |name: &str, text: String| {
        let p = d.path().join(name);
        std::fs::write(&p, text).expect("write");
        p.to_string_lossy().into_owned()
    };
    let mut other = pair.clone();
    other["response"]["system_fingerprint"] = json!("fp_0123456789abcdef");
    let mut streamed = pair.clone();
    streamed["request"]["stream"] = json!(true);
    let mut unseeded = pair.clone();
    unseeded["request"].as_object_mut().expect("object").remove("seed");
    let cases = [
        (d.path().join("missing.json").to_string_lossy().into_owned(), "cannot read it"),
        (write("garbage.json", "{\"request\": ".into()), "not JSON"),
        (write("shape.json", json!({"req": {}, "resp": {}}).to_string()), "no \"request\" or \"response\""),
        (write("other.json", other.to_string()), "saved with system_fingerprint fp_0123456789abcdef"),
        (write("streamed.json", streamed.to_string()), "the request streams"),
        (write("unseeded.json", unseeded.to_string()), "no integer \"seed\""),
    ];
    for (file, want) in cases {
        let (code, out, err) = verify(&["--model", &m, "--replay", &file]);
        assert_eq!(code, 2, "{file}: {out}{err}");
        assert_eq!(err.lines().count(), 1, "{file}: one line: {err}");
        assert!(err.starts_with("error: ") && err.contains(want), "{file}: {err}");
    }
    let (code, _, err) = verify(&["--model", &m]);
    assert_eq!(code, 2);
    assert!(err.contains("--prompt, --messages or --request"), "{err}");
}

/// A `/v1/messages` pair (Anthropic's shape; `seed` is tl's extension) replays as
/// identical; one changed character of its text is a difference naming the position.
#[test]
fn replay_accepts_a_saved_messages_answer() {
    let d = tempfile::tempdir().expect("tempdir");
    let s = Server::start(options(tiny(), 256, 16, 8, 16));
    let request = json!({"model": "tiny-llama", "seed": 5, "temperature": 0.9, "max_tokens": 16,
        "system": "Be brief.", "messages": [{"role": "user", "content": "What is a cache?"}]});
    let r = s.post("/v1/messages", &request);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let pair = json!({"request": request, "response": r.json()});
    drop(s);
    let path = d.path().join("messages.json");
    std::fs::write(&path, pair.to_string()).expect("write");
    let model = tiny();
    let m = model.to_string_lossy();
    let (code, out, err) = verify(&["--model", &m, "--replay", &path.to_string_lossy()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(": identical (1 choice"), "{out}");
    let mut bad = pair.clone();
    let block = &mut bad["response"]["content"][0]["text"];
    let text = block.as_str().expect("a text block").to_string();
    let first = text.chars().next().expect("some text");
    *block = json!(format!("{}{}", if first == 'x' { 'y' } else { 'x' }, &text[first.len_utf8()..]));
    let tampered = d.path().join("tampered.json");
    std::fs::write(&tampered, bad.to_string()).expect("write");
    let (code, out, err) = verify(&["--model", &m, "--replay", &tampered.to_string_lossy()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("DEPARTS at choice 0, text character 0"), "{out}");
}

/// A `/v1/responses` pair (`seed` is tl's extension) replays as identical; one changed
/// character of its output text is a difference naming the position; a request that
/// continues a stored response is refused (the chain is not in the file).
#[test]
fn replay_accepts_a_saved_responses_answer() {
    let d = tempfile::tempdir().expect("tempdir");
    let s = Server::start(options(tiny(), 256, 16, 8, 16));
    let request = json!({"model": "tiny-llama", "seed": 5, "temperature": 0.9, "max_output_tokens": 16,
        "instructions": "Be brief.", "input": "What is a cache?"});
    let r = s.post("/v1/responses", &request);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let pair = json!({"request": request, "response": r.json()});
    drop(s);
    let path = d.path().join("responses.json");
    std::fs::write(&path, pair.to_string()).expect("write");
    let model = tiny();
    let m = model.to_string_lossy();
    let (code, out, err) = verify(&["--model", &m, "--replay", &path.to_string_lossy()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(": identical (1 choice"), "{out}");
    let mut bad = pair.clone();
    let part = &mut bad["response"]["output"][0]["content"][0]["text"];
    let text = part.as_str().expect("an output_text part").to_string();
    let first = text.chars().next().expect("some text");
    *part = json!(format!("{}{}", if first == 'x' { 'y' } else { 'x' }, &text[first.len_utf8()..]));
    let tampered = d.path().join("tampered.json");
    std::fs::write(&tampered, bad.to_string()).expect("write");
    let (code, out, err) = verify(&["--model", &m, "--replay", &tampered.to_string_lossy()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("DEPARTS at choice 0, text character 0"), "{out}");
    let mut chained = pair.clone();
    chained["request"]["previous_response_id"] = json!("resp_1");
    let chained_path = d.path().join("chained.json");
    std::fs::write(&chained_path, chained.to_string()).expect("write");
    let (code, out, err) = verify(&["--model", &m, "--replay", &chained_path.to_string_lossy()]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("previous_response_id"), "{out}{err}");
}

#[test]
fn first_difference_names_the_token_the_ids_and_the_logprob_difference() {
    let tok = |id, logprob: f64, top: &[(u32, f64)]| TokenInfo { id, logprob, top: top.to_vec() };
    let trace = |tokens: Vec<TokenInfo>| Trace {
        tokens,
        text: "ab".into(),
        finish: FinishReason::Length,
        cached: 0,
        preempted: 0,
    };
    let a = trace(vec![tok(1, -0.5, &[(1, -0.5), (2, -1.0)]), tok(3, -0.25, &[(3, -0.25), (4, -2.0)])]);
    assert_eq!(first_difference(&a, &a.clone()), None);
    // Another id at token 1; the reference's id is among this run's alternatives.
    let b = trace(vec![a.tokens[0].clone(), tok(4, -0.5, &[(4, -0.5), (3, -0.75)])]);
    let d = first_difference(&a, &b).expect("differs");
    assert!(d.starts_with("token 1: id 3 vs id 4;") && d.contains("-0.75 here, logprob difference -5e-1"), "{d}");
    // The same id, one bit of its logprob off.
    let mut c = a.clone();
    c.tokens[1].logprob = f64::from_bits((-0.25f64).to_bits() + 1);
    let d = first_difference(&a, &c).expect("differs");
    assert!(d.starts_with("token 1: id 3 in both, logprob -0.25 vs -0.25000000000000006"), "{d}");
    // A top alternative's bits.
    let mut t = a.clone();
    t.tokens[0].top[1].1 = -1.0000001;
    assert!(first_difference(&a, &t).expect("differs").starts_with("token 0: id 1 in both, its top logprobs differ"));
    // One output stops early.
    let mut e = a.clone();
    e.tokens.pop();
    e.finish = FinishReason::Stop;
    let d = first_difference(&a, &e).expect("differs");
    assert!(d.starts_with("token 1: only the reference goes on (id 3)"), "{d}");
}

/// A `/v1/embeddings` pair and a `/v1/rerank` pair (no seed: they sample nothing) replay as
/// identical; one changed value of a vector, or a changed score, is a difference naming it;
/// `--pooling` replays a server that ran with it.
#[test]
fn replay_accepts_saved_embeddings_and_rerank_answers() {
    let d = tempfile::tempdir().expect("tempdir");
    let mut o = options(tiny(), 256, 16, 8, 16);
    o.pooling = Some(tl_engine::Pooling::Mean);
    let s = Server::start(o);
    let emb = json!({"model": "tiny-llama", "input": ["What is a cache?", "a second text"]});
    let rr = json!({"model": "tiny-llama", "query": "cache", "documents": ["a cache", "a dog"], "top_n": 2});
    let save = |name: &str, path: &str, request: &Value| {
        let r = s.post(path, request);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let pair = json!({"request": request, "response": r.json()});
        let p = d.path().join(name);
        std::fs::write(&p, pair.to_string()).expect("write");
        (p, pair)
    };
    let (emb_path, emb_pair) = save("embeddings.json", "/v1/embeddings", &emb);
    let (rr_path, rr_pair) = save("rerank.json", "/v1/rerank", &rr);
    drop(s);
    let model = tiny();
    let m = model.to_string_lossy();
    for path in [&emb_path, &rr_path] {
        let (code, out, err) = verify(&["--model", &m, "--pooling", "mean", "--replay", &path.to_string_lossy()]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains(": identical (2 choices"), "{out}");
        // Another pooling is another answer.
        let (code, out, err) = verify(&["--model", &m, "--pooling", "last", "--replay", &path.to_string_lossy()]);
        assert_eq!(code, 1, "{out}{err}");
    }
    let mut bad = emb_pair.clone();
    let x = &mut bad["response"]["data"][1]["embedding"][7];
    *x = json!(x.as_f64().expect("a float") + 0.5);
    let tampered = d.path().join("tampered.json");
    std::fs::write(&tampered, bad.to_string()).expect("write");
    let (code, out, err) = verify(&["--model", &m, "--pooling", "mean", "--replay", &tampered.to_string_lossy()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("DEPARTS at choice 1, embedding value 7"), "{out}");
    let mut bad = rr_pair.clone();
    bad["response"]["results"][0]["relevance_score"] = json!(0.5);
    std::fs::write(&tampered, bad.to_string()).expect("write");
    let (code, out, err) = verify(&["--model", &m, "--pooling", "mean", "--replay", &tampered.to_string_lossy()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("DEPARTS at choice 0"), "{out}");
}

/// The line of the condition starting `what` (exactly one).
fn line<'a>(stdout: &'a str, what: &str) -> &'a str {
    let found: Vec<&str> = stdout.lines().filter(|l| l.starts_with(what)).collect();
    assert_eq!(found.len(), 1, "{what}: {stdout}");
    found[0]
}

/// verify on the tiny fixture (byte tokens: a prompt of n characters is n tokens; KV
/// blocks of 16), one thread, one batch of 2, the given chunks.
fn verify_tiny(prompt: &str, max_tokens: &str, chunks: &str) -> (i32, String, String) {
    let model = tiny();
    verify(&[
        "--model",
        &model.to_string_lossy(),
        "--prompt",
        prompt,
        "--seed",
        "7",
        "--temperature",
        "0.9",
        "--max-tokens",
        max_tokens,
        "--threads",
        "1",
        "--batches",
        "2",
        "--chunks",
        chunks,
    ])
}

/// Issue 50: an 8-token prompt, shorter than one KV block of 16. Both prefix-cache
/// conditions take tokens from the cache (the shared half through a warm request whose
/// block fills from its prompt alone), the chunk of 64 cannot cut the prompt and says so,
/// and the run exits 0 with the three counts.
#[test]
fn verify_on_a_prompt_shorter_than_one_block_shares_its_prefix_and_reports_a_chunk_it_cannot_cut() {
    let (code, out, err) = verify_tiny("Hi there", "40", "1,5,64");
    assert_eq!(code, 0, "nothing differs, so exit 0: {out}{err}");
    assert!(out.starts_with("reference: alone, 1 thread: 8 prompt tokens"), "{out}");
    assert_eq!(
        line(&out, "prefix-cache hit (the same"),
        "prefix-cache hit (the same request ran before): identical (7 of 8 prompt tokens from the cache)"
    );
    assert_eq!(
        line(&out, "prefix-cache hit (a request sharing"),
        "prefix-cache hit (a request sharing the first half of the prompt ran before): identical (4 of 8 prompt \
         tokens from the cache)"
    );
    assert!(line(&out, "prefill chunks of 5 ").ends_with(": identical"), "{out}");
    assert_eq!(
        line(&out, "prefill chunks of 64 "),
        "prefill chunks of 64 (max_batch_tokens 64, 3 co-requests): not exercised (the 8-token prompt fits in one \
         chunk of 64)"
    );
    assert!(!out.contains("DIFFERS"), "{out}");
    assert_eq!(out.matches(": not exercised (").count(), 1, "{out}");
    assert_eq!(
        out.lines().last(),
        Some(
            "no condition differs from the reference, but 1 of 8 could not be exercised (7 identical, 0 differ, 1 \
             not exercised)"
        ),
        "{out}"
    );
}

/// Issue 50's case: the request sharing half of a short prompt ran before and stopped at
/// once (here EOS forced by `logit_bias`, as a real model may stop on its own), before its
/// generated tokens could fill a KV block. Its prompt runs to the end of the block, so
/// the block was cached all the same and the hit happens; the request itself, ending at
/// once, fills no block and drafts nothing, and says so.
#[test]
fn verify_shares_half_a_short_prompt_even_when_the_earlier_request_stops_at_once() {
    let d = tempfile::tempdir().expect("tempdir");
    let body = d.path().join("eos.json");
    let eos = json!({"prompt": "Hi there", "logit_bias": {"257": 100}, "max_tokens": 8});
    std::fs::write(&body, eos.to_string()).expect("write");
    let model = tiny();
    let (code, out, err) = verify(&[
        "--model",
        &model.to_string_lossy(),
        "--request",
        &body.to_string_lossy(),
        "--threads",
        "1",
        "--batches",
        "2",
        "--chunks",
        "1",
    ]);
    assert_eq!(code, 0, "nothing differs, so exit 0: {out}{err}");
    assert!(
        out.starts_with("reference: alone, 1 thread: 8 prompt tokens, seed 1, 0 of max 8 tokens, finish stop"),
        "{out}"
    );
    assert_eq!(
        line(&out, "prefix-cache hit (a request sharing"),
        "prefix-cache hit (a request sharing the first half of the prompt ran before): identical (4 of 8 prompt \
         tokens from the cache)"
    );
    assert!(
        line(&out, "prefix-cache hit (the same").ends_with(
            "not exercised (the request's 8 prompt and 0 generated tokens fill no whole KV block of 16, so it left \
             nothing in the cache; 0 of 8 prompt tokens from the cache)"
        ),
        "{out}"
    );
    assert!(
        line(&out, "speculative decoding").ends_with(
            "not exercised (the request generated 0 tokens, from its prefill alone: no decode step to draft in; 0 \
             tokens drafted, 0 accepted)"
        ),
        "{out}"
    );
    assert!(!out.contains("DIFFERS"), "{out}");
    assert!(out.ends_with("but 2 of 6 could not be exercised (4 identical, 0 differ, 2 not exercised)\n"), "{out}");
}

/// A request of one token drafts nothing (its only token comes from the prefill), and an
/// 8-token prompt with 1 generated token fills no KV block of 16, so the same request run
/// before leaves nothing to hit: both say why, the shared half is still exercised, exit 0.
#[test]
fn verify_where_speculation_drafts_nothing_says_not_exercised_and_exits_0() {
    let (code, out, err) = verify_tiny("Hi there", "1", "1");
    assert_eq!(code, 0, "nothing differs, so exit 0: {out}{err}");
    assert_eq!(
        line(&out, "speculative decoding"),
        "speculative decoding (n-gram, up to 4 drafted tokens a step, 3 plain co-requests): not exercised (the \
         request generated 1 token, from its prefill alone: no decode step to draft in; 0 tokens drafted, 0 \
         accepted)"
    );
    assert_eq!(
        line(&out, "prefix-cache hit (the same"),
        "prefix-cache hit (the same request ran before): not exercised (the request's 8 prompt and 1 generated \
         tokens fill no whole KV block of 16, so it left nothing in the cache; 0 of 8 prompt tokens from the cache)"
    );
    assert!(
        line(&out, "prefix-cache hit (a request sharing")
            .ends_with(": identical (4 of 8 prompt tokens from the cache)"),
        "{out}"
    );
    assert!(!out.contains("DIFFERS"), "{out}");
    assert_eq!(out.matches(": not exercised (").count(), 2, "{out}");
    assert!(out.ends_with("but 2 of 6 could not be exercised (4 identical, 0 differ, 2 not exercised)\n"), "{out}");
}

/// An empty prompt is one token (BOS): nothing of it can come from the cache, since its
/// last token is always computed, so neither prefix-cache condition can happen, and a
/// chunk of 1 is no shorter than it.
#[test]
fn verify_on_a_one_token_prompt_says_the_cache_cannot_be_exercised() {
    let (code, out, err) = verify_tiny("", "8", "1");
    assert_eq!(code, 0, "nothing differs, so exit 0: {out}{err}");
    assert!(out.starts_with("reference: alone, 1 thread: 1 prompt tokens"), "{out}");
    let why = "not exercised (a one-token prompt: its only token is always computed, for the logits to sample \
               from; 0 of 1 prompt tokens from the cache)";
    for what in ["prefix-cache hit (the same", "prefix-cache hit (a request sharing"] {
        assert!(line(&out, what).ends_with(why), "{out}");
    }
    assert!(line(&out, "prefill chunks of 1 ").ends_with("not exercised (the 1-token prompt fits in one chunk of 1)"));
    assert!(!out.contains("DIFFERS"), "{out}");
    let skipped = out.matches(": not exercised (").count();
    assert!(out.contains(&format!(", 0 differ, {skipped} not exercised)")), "{out}");
}

/// The summary line's three counts and wording, one case each, and how a condition not
/// exercised prints; a difference wins the summary's first words.
#[test]
fn summary_counts_identical_differing_and_not_exercised_conditions() {
    let v = |outcome: Outcome| Verdict { condition: "c".into(), outcome, note: String::new() };
    let same = v(Outcome::Identical);
    let skipped =
        Verdict { note: "0 preemptions".into(), ..v(Outcome::NotExercised("the pool never ran short".into())) };
    let differs = v(Outcome::Differs("token 3: id 1 vs id 2".into()));
    assert_eq!(skipped.to_string(), "c: not exercised (the pool never ran short; 0 preemptions)");
    assert_eq!(
        summary(&[same.clone(), same.clone()]),
        "all 2 conditions identical to the reference, bit for bit (2 identical, 0 differ, 0 not exercised)"
    );
    assert_eq!(
        summary(&[same.clone(), skipped.clone()]),
        "no condition differs from the reference, but 1 of 2 could not be exercised (1 identical, 0 differ, 1 not \
         exercised)"
    );
    assert_eq!(
        summary(&[same, skipped, differs]),
        "1 of 3 conditions differ from the reference (1 identical, 1 differ, 1 not exercised)"
    );
}

/// A replay whose saved answer has no choices compared nothing: not exercised, not
/// identical; a rerun that does answer is a difference.
#[test]
fn replay_of_an_answer_with_no_choices_is_not_exercised() {
    let r = compare(&json!([]), &json!([]));
    assert_eq!(r.outcome, Outcome::NotExercised("the saved answer has no choices: nothing to compare".into()));
    let r = compare(&json!([]), &json!([{"text": "a"}]));
    assert_eq!(r.outcome, Outcome::Differs("the number of choices: 0 saved, 1 now".into()));
    let r = compare(&json!([{"text": "a"}]), &json!([{"text": "a"}]));
    assert_eq!(r.outcome, Outcome::Identical);
}
