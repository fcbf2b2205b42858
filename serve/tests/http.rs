//! Every endpoint over real HTTP on an ephemeral loopback port, on the tiny fixture:
//! shapes, streaming, n > 1, stop strings, logprobs, every error row, client disconnect.

mod common;

use std::io::Write;

use common::*;
use serde_json::{json, Value};

fn chat_body(content: &str, max_tokens: u32, seed: i64) -> Value {
    json!({"model": "tiny-llama", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": content}],
           "max_tokens": max_tokens, "seed": seed, "temperature": 0.8})
}

#[test]
fn endpoints_answer_in_openai_shapes() {
    let s = Server::start(options(tiny(), 256, 16, 8, 64));
    let h = s.get("/health");
    assert_eq!((h.status, h.json()["status"].clone()), (200, json!("ok")));
    let m = s.get("/v1/models").json();
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["id"], "tiny-llama");

    let r = s.post("/v1/chat/completions", &chat_body("Hi", 12, 5));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert!(v["id"].as_str().is_some_and(|i| i.starts_with("chatcmpl-")));
    assert!(v["system_fingerprint"].as_str().is_some_and(|f| f.starts_with("fp_")));
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert!(v["choices"][0]["message"]["content"].is_string());
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["choices"][0]["logprobs"], Value::Null);
    let u = &v["usage"];
    assert_eq!(u["completion_tokens"], 12);
    assert_eq!(u["total_tokens"].as_u64(), Some(u["prompt_tokens"].as_u64().unwrap_or(0) + 12));
    assert!(u["prompt_tokens_details"]["cached_tokens"].is_u64());
    // The same request again: a prefix hit, the same answer.
    let again = s.post("/v1/chat/completions", &chat_body("Hi", 12, 5)).json();
    assert!(again["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64() > Some(0), "{again}");
    assert_eq!(again["choices"].to_string(), v["choices"].to_string());

    let c = s.post("/v1/completions", &json!({"model": "tiny-llama", "prompt": "Hello", "max_tokens": 5, "seed": 1}));
    let c = c.json();
    assert_eq!(c["object"], "text_completion");
    assert!(c["choices"][0]["text"].is_string());
    assert_eq!(c["usage"]["prompt_tokens"], 5);
    assert_eq!(c["usage"]["completion_tokens"], 5);
    // Token ids as the prompt.
    let ids =
        s.post("/v1/completions", &json!({"prompt": [72, 101, 108, 108, 111], "max_tokens": 5, "seed": 1})).json();
    assert_eq!(ids["choices"], c["choices"]);

    let metrics = String::from_utf8(s.get("/metrics").body).expect("utf8");
    for name in [
        "tl_queue_depth",
        "tl_running_sequences",
        "tl_kv_blocks{state=\"free\"}",
        "tl_prefix_cache_hit_tokens_total",
        "tl_step_seconds_count",
        "tl_time_to_first_token_seconds_count",
        "tl_inter_token_latency_seconds_count",
    ] {
        assert!(metrics.contains(name), "{name} missing from /metrics:\n{metrics}");
    }
    assert!(s.metric("tl_prefix_cache_hit_tokens_total") > 0.0);
    s.assert_pool_clean();
}

/// Joins the streamed deltas (and logprobs) of choice `i`.
fn joined(events: &[String], chat: bool, i: u64) -> (String, Vec<Value>, Option<String>) {
    let (mut text, mut lps, mut finish) = (String::new(), Vec::new(), None);
    for e in events.iter().filter(|e| *e != "[DONE]") {
        let v: Value = serde_json::from_str(e).expect("chunk json");
        for c in v["choices"].as_array().expect("choices").iter().filter(|c| c["index"] == i) {
            let t = if chat { &c["delta"]["content"] } else { &c["text"] };
            text.push_str(t.as_str().unwrap_or(""));
            let lp = if chat { &c["logprobs"]["content"] } else { &c["logprobs"]["token_logprobs"] };
            lps.extend(lp.as_array().cloned().unwrap_or_default());
            if let Some(f) = c["finish_reason"].as_str() {
                finish = Some(f.to_string());
            }
        }
    }
    (text, lps, finish)
}

#[test]
fn streams_equal_the_plain_answers() {
    let s = Server::start(options(tiny(), 256, 16, 8, 64));
    let mut body = chat_body("Tell me", 20, 9);
    body["logprobs"] = json!(true);
    body["top_logprobs"] = json!(2);
    let plain = s.post("/v1/chat/completions", &body).json();
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let r = s.post("/v1/chat/completions", &body);
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").is_some_and(|c| c.starts_with("text/event-stream")));
    let ev = r.events();
    assert_eq!(ev.last().map(String::as_str), Some("[DONE]"));
    let first: Value = serde_json::from_str(&ev[0]).expect("json");
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    let (text, lps, finish) = joined(&ev, true, 0);
    assert_eq!(text, plain["choices"][0]["message"]["content"].as_str().expect("content"));
    assert_eq!(Value::Array(lps).to_string(), plain["choices"][0]["logprobs"]["content"].to_string());
    assert_eq!(finish.as_deref(), Some("length"));
    let usage: Value = serde_json::from_str(&ev[ev.len() - 2]).expect("usage chunk");
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 20);

    let mut c = json!({"prompt": "Once upon", "max_tokens": 10, "seed": 3, "logprobs": 2});
    let plain = s.post("/v1/completions", &c).json();
    c["stream"] = json!(true);
    let ev = s.post("/v1/completions", &c).events();
    assert_eq!(ev.last().map(String::as_str), Some("[DONE]"));
    let (text, lps, _) = joined(&ev, false, 0);
    assert_eq!(text, plain["choices"][0]["text"].as_str().expect("text"));
    assert_eq!(Value::Array(lps), plain["choices"][0]["logprobs"]["token_logprobs"]);
    s.assert_pool_clean();
}

#[test]
fn n_choices_stop_strings_and_logprobs() {
    let s = Server::start(options(tiny(), 256, 16, 8, 64));
    let one = s.post("/v1/chat/completions", &chat_body("Pick", 10, 11)).json();
    let mut body = chat_body("Pick", 10, 11);
    body["n"] = json!(3);
    let three = s.post("/v1/chat/completions", &body).json();
    let ch = three["choices"].as_array().expect("choices");
    assert_eq!(ch.len(), 3);
    assert_eq!((ch[0]["index"].clone(), ch[2]["index"].clone()), (json!(0), json!(2)));
    // Choice 0 of n = 3 is the single-choice stream (pcg32.md).
    assert_eq!(ch[0], one["choices"][0]);
    assert_ne!(ch[1]["message"], ch[2]["message"]);
    assert_eq!(three["usage"]["completion_tokens"], 30);
    body["stream"] = json!(true);
    let ev = s.post("/v1/chat/completions", &body).events();
    for i in 0..3 {
        assert_eq!(joined(&ev, true, i).0, ch[i as usize]["message"]["content"].as_str().expect("content"));
    }

    // A stop string from the middle of a greedy answer ends the text right before it.
    let greedy = json!({"prompt": "Hello", "max_tokens": 40, "temperature": 0});
    let base = s.post("/v1/completions", &greedy).json()["choices"][0]["text"].as_str().expect("text").to_string();
    let chars: Vec<char> = base.chars().collect();
    let stop: String = chars[12..14].iter().collect();
    let cut = base.find(&stop).expect("stop");
    let mut with_stop = greedy.clone();
    with_stop["stop"] = json!(["zzz-not-there", stop]);
    let r = s.post("/v1/completions", &with_stop).json();
    assert_eq!(r["choices"][0]["text"].as_str(), Some(&base[..cut]));
    assert_eq!(r["choices"][0]["finish_reason"], "stop");
    with_stop["stream"] = json!(true);
    let (text, _, finish) = joined(&s.post("/v1/completions", &with_stop).events(), false, 0);
    assert_eq!((text.as_str(), finish.as_deref()), (&base[..cut], Some("stop")));

    // top_logprobs: k entries, best first, the chosen token among them when greedy.
    let mut lp = chat_body("Hi", 6, 1);
    lp["temperature"] = json!(0);
    lp["logprobs"] = json!(true);
    lp["top_logprobs"] = json!(20);
    let v = s.post("/v1/chat/completions", &lp).json();
    for e in v["choices"][0]["logprobs"]["content"].as_array().expect("content") {
        let top = e["top_logprobs"].as_array().expect("top");
        assert_eq!(top.len(), 20);
        assert_eq!(top[0]["logprob"], e["logprob"], "greedy picks the best: {e}");
        assert!(top.windows(2).all(|w| w[0]["logprob"].as_f64() >= w[1]["logprob"].as_f64()));
        assert!(e["bytes"].is_array() && e["token"].is_string());
    }
    s.assert_pool_clean();
}

fn error(r: &Resp, status: u16, param: Option<&str>) -> Value {
    assert_eq!(r.status, status, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    let e = &v["error"];
    assert!(e["message"].is_string() && e["type"].is_string() && e.get("code").is_some(), "{v}");
    assert_eq!(e["param"].as_str(), param, "{v}");
    v
}

#[test]
fn bad_input_gets_openai_errors_and_leaves_nothing() {
    let s = Server::start(options(tiny(), 256, 16, 8, 64));
    let r = request(s.addr, "POST", "/v1/chat/completions", b"{\"messages\": [", &[]);
    error(&r, 400, None);
    for (field, value) in [
        ("temperature", json!(2.5)),
        ("top_p", json!(0)),
        ("top_logprobs", json!(21)),
        ("n", json!(0)),
        ("presence_penalty", json!(-3)),
        ("max_tokens", json!(0)),
        ("stop", json!(["a", "b", "c", "d", "e"])),
    ] {
        let mut b = chat_body("x", 4, 1);
        b[field] = value;
        if field == "top_logprobs" {
            b["logprobs"] = json!(true);
        }
        error(&s.post("/v1/chat/completions", &b), 400, Some(field));
    }
    let mut b = chat_body("x", 4, 1);
    b["model"] = json!("gpt-4o");
    error(&s.post("/v1/chat/completions", &b), 404, Some("model"));
    error(&s.post("/v1/chat/completions", &json!({"model": "tiny-llama"})), 400, Some("messages"));
    error(&s.post("/v1/completions", &json!({"prompt": {"a": 1}})), 400, Some("prompt"));
    // The tiny model's context is 256 tokens.
    let v = error(&s.post("/v1/completions", &json!({"prompt": "Hello", "max_tokens": 300})), 400, Some("max_tokens"));
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    let big = json!({"prompt": "x".repeat(70 << 10), "max_tokens": 1}).to_string();
    error(&request(s.addr, "POST", "/v1/completions", big.as_bytes(), &[]), 413, None);
    // Unknown fields are ignored.
    let mut b = chat_body("x", 2, 1);
    b["user"] = json!("someone");
    b["tools_future_field"] = json!({"x": 1});
    assert_eq!(s.post("/v1/chat/completions", &b).status, 200);
    let r = s.get("/v1/nope");
    error(&r, 404, None);
    s.assert_pool_clean();
}

#[test]
fn a_full_queue_answers_503_with_retry_after() {
    // One running sequence at a time, one waiting: the third concurrent request is refused.
    let s = Server::start(options(tiny(), 256, 16, 1, 1));
    let long = json!({"prompt": "Hello", "max_tokens": 200, "seed": 1, "stream": true}).to_string();
    let mut held = Vec::new();
    let mut refused = None;
    for _ in 0..6 {
        let mut c = connect(s.addr, "POST", "/v1/completions", long.as_bytes(), &[]);
        let (status, headers) = read_head(&mut c);
        if status == 200 {
            held.push(c);
            continue;
        }
        refused = Some((status, headers));
        break;
    }
    let (status, headers) = refused.expect("never refused");
    assert_eq!(status, 503);
    assert!(headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("retry-after") && v == "1"), "{headers:?}");
    drop(held);
    s.assert_pool_clean();
}

#[test]
fn a_client_leaving_mid_stream_frees_its_blocks() {
    let s = Server::start(options(tiny(), 256, 16, 8, 64));
    let body = json!({"prompt": "Hello there", "max_tokens": 240, "seed": 2, "stream": true}).to_string();
    let mut c = connect(s.addr, "POST", "/v1/completions", body.as_bytes(), &[]);
    let (status, _) = read_head(&mut c);
    assert_eq!(status, 200);
    let first = read_chunk(&mut c).expect("a first chunk");
    assert!(first.starts_with(b"data: "));
    assert!(s.metric("tl_kv_blocks{state=\"in_use\"}") > 0.0 || s.metric("tl_generated_tokens_total") > 0.0);
    let _ = c.get_mut().flush();
    drop(c);
    s.assert_pool_clean();
    // It was cancelled, not run to the end (unless it finished before we left).
    if s.metric("tl_generated_tokens_total") < 240.0 {
        assert_eq!(s.metric("tl_cancelled_sequences_total"), 1.0);
    }
}
