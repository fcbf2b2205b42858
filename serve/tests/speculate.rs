//! Speculative decoding over HTTP: the same `choices` bytes with `--speculate ngram` as
//! without (greedy, seeded, penalties, stop strings, a JSON schema; alone, concurrent,
//! streamed), per-request `speculate` overrides, 400s for bad values, and the /metrics
//! counters (above zero, so the comparison cannot pass with speculation silently off).

mod common;

use std::path::PathBuf;

use common::*;
use serde_json::{json, Value};
use tl_engine::Speculation;

fn bodies(model: &str, max_tokens: u32) -> Vec<Value> {
    let list = "Repeat this list: apple, pear, plum, apple, pear, plum, apple, pear, plum, apple, pear";
    let code = "Rewrite: let total = a + b; let total = a + b; let total = a + b; let total";
    let free = "Why is the sky blue?";
    let mut out = Vec::new();
    for (i, user) in [list, code, free].iter().enumerate() {
        let base = json!({"model": model, "max_tokens": max_tokens, "logprobs": true, "top_logprobs": 2,
            "messages": [{"role": "user", "content": user}]});
        let with = |extra: Value| {
            let mut b = base.clone();
            for (k, v) in extra.as_object().expect("object") {
                b[k] = v.clone();
            }
            b
        };
        out.push(with(json!({"temperature": 0})));
        out.push(with(json!({"seed": 5 + i, "temperature": 0.9, "top_p": 0.95})));
        out.push(with(json!({"seed": 9, "temperature": 0.7, "frequency_penalty": 0.5, "presence_penalty": 0.3})));
        out.push(with(json!({"temperature": 0, "stop": ["pl", "to", "e b"]})));
        out.push(with(json!({"seed": 2, "temperature": 0.8, "n": 2})));
        out.push(with(json!({"seed": 3, "temperature": 0.6,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema":
                {"type": "object", "properties": {"a": {"type": "string", "maxLength": 12}}, "required": ["a"]}}}})));
    }
    out
}

fn choices(s: &Server, body: &Value) -> String {
    let r = s.post("/v1/chat/completions", body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()["choices"].to_string()
}

/// The streamed text and logprobs, chunk payloads without `id`/`created`.
fn streamed(s: &Server, body: &Value) -> Vec<String> {
    let mut b = body.clone();
    b["stream"] = json!(true);
    let r = s.post("/v1/chat/completions", &b);
    assert_eq!(r.status, 200);
    r.events()
        .into_iter()
        .filter(|e| e != "[DONE]")
        .map(|e| serde_json::from_str::<Value>(&e).expect("chunk")["choices"].to_string())
        .collect()
}

fn server(model: PathBuf, speculate: Option<Speculation>) -> Server {
    let mut o = options(model, 1024, 4, 16, 64);
    o.speculate = speculate;
    Server::start(o)
}

fn same_bytes(model: PathBuf, name: &str, max_tokens: u32) {
    let bodies = bodies(name, max_tokens);
    let off = server(model.clone(), None);
    let want: Vec<String> = bodies.iter().map(|b| choices(&off, b)).collect();
    let want_stream = streamed(&off, &bodies[0]);
    drop(off);

    let on = server(model, Some(Speculation::Ngram { k: 4 }));
    for (k, b) in bodies.iter().enumerate() {
        assert_eq!(choices(&on, b), want[k], "body {k} differs with --speculate ngram: {b}");
    }
    assert_eq!(streamed(&on, &bodies[0]), want_stream, "the stream differs");
    // All at once, half of them turning speculation off for themselves.
    let addr = on.addr;
    let threads: Vec<_> = bodies
        .iter()
        .enumerate()
        .map(|(k, b)| {
            let mut b = b.clone();
            if k % 2 == 1 {
                b["speculate"] = json!(false);
            }
            std::thread::spawn(move || request(addr, "POST", "/v1/chat/completions", b.to_string().as_bytes(), &[]))
        })
        .collect();
    for (k, t) in threads.into_iter().enumerate() {
        let r = t.join().expect("client");
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["choices"].to_string(), want[k], "body {k} differs among concurrent requests");
    }
    let proposed = on.metric("tl_speculative_draft_tokens_total");
    let accepted = on.metric("tl_speculative_accepted_tokens_total");
    let rate = on.metric("tl_speculative_acceptance_rate");
    assert!(accepted > 0.0 && proposed >= accepted, "drafted {proposed}, accepted {accepted}");
    assert_eq!(rate, accepted / proposed, "acceptance rate");
    on.assert_pool_clean();
}

#[test]
fn tiny_http_choices_are_the_same_with_speculation_on() {
    same_bytes(tiny(), "tiny-llama", 40);
}

#[test]
fn smollm2_http_choices_are_the_same_with_speculation_on() {
    let Some(model) = smollm2() else { return };
    same_bytes(model, "SmolLM2-135M-Instruct.Q4_1", 24);
}

#[test]
fn speculate_field_is_checked_and_a_request_can_turn_it_on() {
    let s = server(tiny(), None);
    let base = json!({"model": "tiny-llama", "max_tokens": 24, "temperature": 0,
        "messages": [{"role": "user", "content": "abcabcabcabcabcabcabc"}]});
    let plain = choices(&s, &base);
    assert_eq!(s.metric("tl_speculative_draft_tokens_total"), 0.0);
    for spec in [json!(true), json!({"kind": "ngram", "k": 8}), json!({"kind": "ngram"})] {
        let mut b = base.clone();
        b["speculate"] = spec.clone();
        assert_eq!(choices(&s, &b), plain, "{spec}");
    }
    assert!(s.metric("tl_speculative_draft_tokens_total") > 0.0, "per-request speculation never drafted");
    for bad in [
        json!({"kind": "ngram", "k": 0}),
        json!({"kind": "ngram", "k": 17}),
        json!({"kind": "ngram", "k": -1}),
        json!({"kind": "lookup"}),
        json!({"kind": "ngram", "n": 3}),
        json!({"kind": "draft"}),
        json!("ngram"),
        json!(4),
    ] {
        let mut b = base.clone();
        b["speculate"] = bad.clone();
        let r = s.post("/v1/chat/completions", &b);
        assert_eq!(r.status, 400, "{bad}: {}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["error"]["param"], "speculate", "{bad}");
    }
    let mut b = base.clone();
    b["speculate"] = json!(null);
    assert_eq!(choices(&s, &b), plain);
}
