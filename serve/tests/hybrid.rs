//! A hybrid model (the tiny Qwen3.5: Gated DeltaNet layers whose recurrent state lives in
//! the pool's state column) over HTTP: a seeded completion's bytes (tokens and logprobs)
//! are the same alone, beside 15 concurrent requests sharing its prefix, after a prefix
//! hit that resumes from a state snapshot, and under a pool small enough to preempt; with
//! speculation they are the bytes of plain decoding.

mod common;

use std::path::PathBuf;
use std::sync::{Arc, Barrier};

use common::*;
use serde_json::{json, Value};

const PREFIX: &str = "A cache keeps recent answers close to whoever asks for them again. ";

fn model() -> PathBuf {
    crate_fixture("arch-qwen3-5", "tiny-qwen3_5")
}

fn opts(n_blocks: u32) -> tl_serve::Options {
    let mut o = options(model(), n_blocks, 4, 16, 64);
    o.engine.kv.state_snapshot_tokens = 0; // a snapshot on every block: short prompts hit
    o
}

fn target() -> Value {
    json!({"model": "tiny-qwen3_5", "prompt": format!("{PREFIX}What is a cache?"), "seed": 42,
           "temperature": 0.9, "top_p": 0.95, "logprobs": 3, "max_tokens": 40})
}

fn neighbour(i: usize) -> Value {
    let temperature = [0.0, 0.7, 1.0, 1.3][i % 4];
    let mut b = json!({"model": "tiny-qwen3_5", "prompt": format!("{PREFIX}{}", "Why? ".repeat(1 + i % 4)),
                       "seed": 100 + i, "temperature": temperature, "max_tokens": 20 + i % 7});
    if i % 3 == 1 {
        b["stream"] = json!(true);
    }
    b
}

fn answer(s: &Server, body: &Value) -> (String, Value) {
    let r = s.post("/v1/completions", body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    (v["choices"].to_string(), v["usage"].clone())
}

/// The target in the middle of 15 concurrent neighbours.
fn crowded(s: &Server) -> String {
    let start = Arc::new(Barrier::new(16));
    let addr = s.addr;
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let start = Arc::clone(&start);
            let body = if i == 8 { target() } else { neighbour(i) };
            std::thread::spawn(move || {
                start.wait();
                let r = request(addr, "POST", "/v1/completions", body.to_string().as_bytes(), &[]);
                assert_eq!(r.status, 200, "request {i}: {}", String::from_utf8_lossy(&r.body));
                r
            })
        })
        .collect();
    let mut mine = String::new();
    for (i, t) in threads.into_iter().enumerate() {
        let r = t.join().expect("request thread");
        if i == 8 {
            mine = r.json()["choices"].to_string();
        }
    }
    mine
}

#[test]
fn hybrid_http_answers_do_not_depend_on_traffic() {
    let alone = answer(&Server::start(opts(2048)), &target()).0;
    assert!(alone.contains("logprobs"), "{alone}");

    let s = Server::start(opts(2048));
    assert_eq!(crowded(&s), alone, "the answer changed beside 15 concurrent requests");
    let (hit, usage) = answer(&s, &target());
    assert!(usage["prompt_tokens_details"]["cached_tokens"].as_u64() > Some(0), "no prefix hit: {usage}");
    assert_eq!(hit, alone, "the answer changed after a prefix hit on a state snapshot");
    s.assert_pool_clean();
    drop(s);

    let s = Server::start(opts(90));
    assert_eq!(crowded(&s), alone, "the answer changed under a small pool");
    assert!(s.metric("tl_preemptions_total") > 0.0, "the small pool never preempted");
    s.assert_pool_clean();
}

/// Speculation over HTTP on a hybrid: the verify steps roll the recurrent state back past
/// rejected drafts, so the answer is the bytes of plain decoding.
#[test]
fn speculation_on_a_hybrid_model_keeps_the_answer() {
    let s = Server::start(opts(256));
    let plain = answer(&s, &target()).0;
    let mut body = target();
    body["speculate"] = json!({"kind": "ngram", "k": 4});
    // A prompt that repeats itself, so prompt lookup drafts.
    body["prompt"] = json!(format!("{PREFIX}{PREFIX}What is a cache?"));
    let spec = answer(&s, &body).0;
    body.as_object_mut().map(|o| o.remove("speculate"));
    assert_eq!(spec, answer(&s, &body).0, "speculation changed the answer");
    assert!(plain.contains("logprobs"), "{plain}");
    assert!(s.metric("tl_speculative_draft_tokens_total") > 0.0, "nothing was drafted");
    s.assert_pool_clean();
}
