//! Anthropic's Messages API (docs/serving.md, "Anthropic Messages API"): the answer's
//! shape and usage; a seeded Messages request is the same text twice, streamed or not, and
//! the same as its chat completion equivalent; stop sequences; tool_use blocks (streamed
//! as input_json_delta) and a tool_result turn that reaches the prompt; thinking blocks
//! from the reasoning split; bad bodies answered 4xx in Anthropic's error shape;
//! `x-api-key` accepted as well as Bearer.

mod common;

use std::path::PathBuf;

use common::*;
use serde_json::{json, Value};

fn post(s: &Server, path: &str, body: &Value) -> Resp {
    s.post(path, body)
}

/// A JSON answer, asserting 200.
fn ok(r: Resp) -> Value {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

/// The SSE events of a streamed answer: (event name, data).
fn events(r: &Resp) -> Vec<(String, Value)> {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    String::from_utf8_lossy(&r.body)
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let name = e.lines().find_map(|l| l.strip_prefix("event: ")).expect("event line");
            let data = e.lines().find_map(|l| l.strip_prefix("data: ")).expect("data line");
            let v: Value = serde_json::from_str(data).expect("data is JSON");
            assert_eq!(v["type"], name, "an event's data names its event");
            (name.to_string(), v)
        })
        .collect()
}

/// A stream folded into the message it describes, checking the event grammar on the way:
/// message_start first, each block started, given deltas of its own type and stopped in
/// index order, then message_delta and message_stop last.
fn fold(evs: &[(String, Value)]) -> Value {
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"), "{names:?}");
    assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"], "{names:?}");
    let mut msg = evs[0].1["message"].clone();
    assert_eq!(msg["content"], json!([]));
    assert!(msg["stop_reason"].is_null());
    let (mut open, mut json_buf) = (None::<usize>, String::new());
    for (name, v) in &evs[1..evs.len() - 2] {
        let content = msg["content"].as_array_mut().expect("content");
        match name.as_str() {
            "content_block_start" => {
                assert!(open.is_none(), "a block starts while another is open: {v}");
                assert_eq!(v["index"], content.len(), "{v}");
                open = Some(content.len());
                content.push(v["content_block"].clone());
                json_buf.clear();
            }
            "content_block_delta" => {
                let i = open.expect("a delta outside a block");
                assert_eq!(v["index"], i);
                let b = &mut content[i];
                let d = &v["delta"];
                match (b["type"].as_str(), d["type"].as_str()) {
                    (Some("text"), Some("text_delta")) => {
                        b["text"] = json!(format!("{}{}", b["text"].as_str().unwrap(), d["text"].as_str().unwrap()))
                    }
                    (Some("thinking"), Some("thinking_delta")) => {
                        let t = format!("{}{}", b["thinking"].as_str().unwrap(), d["thinking"].as_str().unwrap());
                        b["thinking"] = json!(t)
                    }
                    (Some("thinking"), Some("signature_delta")) => b["signature"] = d["signature"].clone(),
                    (Some("tool_use"), Some("input_json_delta")) => {
                        json_buf.push_str(d["partial_json"].as_str().unwrap());
                        b["input"] = serde_json::from_str(&json_buf).unwrap_or(Value::Null);
                    }
                    _ => panic!("delta {d} in block {b}"),
                }
            }
            "content_block_stop" => {
                assert_eq!(v["index"], open.take().expect("a stop outside a block"));
            }
            other => panic!("unexpected event {other}: {names:?}"),
        }
    }
    assert!(open.is_none(), "a block was never stopped");
    let d = &evs[evs.len() - 2].1;
    msg["stop_reason"] = d["delta"]["stop_reason"].clone();
    msg["stop_sequence"] = d["delta"]["stop_sequence"].clone();
    msg["usage"] = d["usage"].clone();
    msg
}

/// The text of a message's text blocks.
fn text(m: &Value) -> String {
    m["content"].as_array().expect("content").iter().filter_map(|b| b["text"].as_str()).collect()
}

fn tiny_server() -> Server {
    Server::start(options(tiny(), 256, 16, 8, 64))
}

/// A multi-turn Messages body and its chat completion equivalent.
fn pair(seed: i64, max_tokens: u32) -> (Value, Value) {
    let m = json!({
        "model": "tiny-llama", "max_tokens": max_tokens, "seed": seed, "temperature": 0.9, "top_p": 0.95,
        "top_k": 40, "metadata": {"user_id": "u-1"},
        "system": [{"type": "text", "text": "You are terse. "}, {"type": "text", "text": "Answer in English."}],
        "messages": [
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": [{"type": "text", "text": "Blue."}]},
            {"role": "user", "content": [{"type": "text", "text": "Another"}, {"type": "text", "text": " one?"}]},
        ],
    });
    let c = json!({
        "model": "tiny-llama", "max_tokens": max_tokens, "seed": seed, "temperature": 0.9, "top_p": 0.95,
        "top_k": 40,
        "messages": [
            {"role": "system", "content": "You are terse. Answer in English."},
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "Another one?"},
        ],
    });
    (m, c)
}

#[test]
fn a_message_has_anthropic_shape_and_its_usage_matches_count_tokens() {
    let s = tiny_server();
    let (m, _) = pair(1, 6);
    let v = ok(post(&s, "/v1/messages", &m));
    assert!(v["id"].as_str().is_some_and(|i| i.starts_with("msg_")), "{v}");
    assert_eq!((&v["type"], &v["role"], &v["model"]), (&json!("message"), &json!("assistant"), &json!("tiny-llama")));
    let blocks = v["content"].as_array().expect("content");
    assert!(blocks.iter().all(|b| b["type"] == "text"), "{v}");
    let u = &v["usage"];
    let out = u["output_tokens"].as_u64().expect("output_tokens");
    match v["stop_reason"].as_str() {
        Some("max_tokens") => assert_eq!(out, 6, "{v}"),
        Some("end_turn") => assert!(out < 6, "{v}"),
        r => panic!("stop_reason {r:?}: {v}"),
    }
    assert!(v["stop_sequence"].is_null());
    let mut count_body = m.clone();
    count_body.as_object_mut().unwrap().remove("max_tokens");
    let n = ok(post(&s, "/v1/messages/count_tokens", &count_body))["input_tokens"].as_u64().expect("input_tokens");
    let input = u["input_tokens"].as_u64().unwrap() + u["cache_read_input_tokens"].as_u64().unwrap();
    assert_eq!(input, n, "input_tokens + cache_read_input_tokens is the prompt count_tokens gives: {v}");
    // The same prompt through chat: the same count.
    let (_, c) = pair(1, 6);
    assert_eq!(ok(post(&s, "/v1/chat/completions", &c))["usage"]["prompt_tokens"], n);
    s.assert_pool_clean();
}

#[test]
fn a_seeded_message_is_the_same_twice_streamed_and_as_its_chat_completion() {
    let s = tiny_server();
    let (m, c) = pair(7, 24);
    let a = ok(post(&s, "/v1/messages", &m));
    let b = ok(post(&s, "/v1/messages", &m));
    assert_eq!(a["content"], b["content"], "same seed, same blocks");
    assert_eq!(a["stop_reason"], b["stop_reason"]);
    let chat = ok(post(&s, "/v1/chat/completions", &c));
    let ct = chat["choices"][0]["message"]["content"].as_str().expect("content").to_string();
    assert_eq!(text(&a), ct, "/v1/messages and the equivalent chat completion give the same text");
    let finish = chat["choices"][0]["finish_reason"].as_str().unwrap();
    let want = if finish == "length" { "max_tokens" } else { "end_turn" };
    assert_eq!(a["stop_reason"], want);
    assert_eq!(a["usage"]["output_tokens"], chat["usage"]["completion_tokens"]);
    let mut ms = m.clone();
    ms["stream"] = json!(true);
    let streamed = fold(&events(&post(&s, "/v1/messages", &ms)));
    assert_eq!(streamed["content"], a["content"], "the stream adds up to the same blocks");
    assert_eq!(
        (&streamed["stop_reason"], &streamed["usage"]["output_tokens"]),
        (&a["stop_reason"], &a["usage"]["output_tokens"])
    );
    let (other, _) = pair(8, 24);
    assert_ne!(text(&ok(post(&s, "/v1/messages", &other))), text(&a), "another seed, another answer");
    s.assert_pool_clean();
}

/// The determinism promise under load: the seeded request's blocks alone equal its blocks
/// while other requests (other seeds, streamed ones) share the batch.
#[test]
fn a_seeded_message_is_the_same_alone_and_in_a_busy_batch() {
    let s = tiny_server();
    let (m, _) = pair(21, 32);
    let alone = ok(post(&s, "/v1/messages", &m))["content"].clone();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(6));
    let addr = s.addr;
    let handles: Vec<_> = (0..6)
        .map(|i| {
            let barrier = std::sync::Arc::clone(&barrier);
            let (mut body, _) = pair(if i % 2 == 0 { 21 } else { 100 + i }, 32);
            if i == 3 {
                body["stream"] = json!(true);
            }
            std::thread::spawn(move || {
                barrier.wait();
                (i, request(addr, "POST", "/v1/messages", body.to_string().as_bytes(), &[]))
            })
        })
        .collect();
    for h in handles {
        let (i, r) = h.join().expect("thread");
        if i % 2 == 0 {
            assert_eq!(ok(r)["content"], alone, "request {i} under load");
        } else if i == 3 {
            fold(&events(&r));
        } else {
            ok(r);
        }
    }
    s.assert_pool_clean();
}

/// A stop sequence taken from the unstopped answer: the answer ends before its first
/// occurrence with `stop_reason: "stop_sequence"` naming it, streamed or not, and chat
/// with the same `stop` gives the same text.
#[test]
fn a_stop_sequence_ends_the_answer_and_is_named() {
    let s = tiny_server();
    let (m, c) = pair(3, 32);
    let full = text(&ok(post(&s, "/v1/messages", &m)));
    let chars: Vec<char> = full.chars().collect();
    let k = (4..chars.len().saturating_sub(2))
        .find(|&k| chars[k..k + 2].iter().all(|&ch| ch != char::REPLACEMENT_CHARACTER))
        .unwrap_or_else(|| panic!("no clean pair of characters in {full:?}"));
    let stop: String = chars[k..k + 2].iter().collect();
    let want = &full[..full.find(&stop).unwrap()];
    let mut ms = m.clone();
    ms["stop_sequences"] = json!(["\u{1}never", stop]);
    let v = ok(post(&s, "/v1/messages", &ms));
    assert_eq!(text(&v), want, "{v}");
    assert_eq!((&v["stop_reason"], &v["stop_sequence"]), (&json!("stop_sequence"), &json!(stop)), "{v}");
    ms["stream"] = json!(true);
    let st = fold(&events(&post(&s, "/v1/messages", &ms)));
    assert_eq!(
        (text(&st), &st["stop_reason"], &st["stop_sequence"]),
        (want.to_string(), &v["stop_reason"], &v["stop_sequence"])
    );
    let mut cs = c.clone();
    cs["stop"] = json!(["\u{1}never", stop]);
    let chat = ok(post(&s, "/v1/chat/completions", &cs));
    assert_eq!(chat["choices"][0]["message"]["content"], json!(want));
    s.assert_pool_clean();
}

/// Every bad body is a 4xx with `{"type": "error", "error": {"type", "message"}}`, on
/// both routes, streamed or not; never a 500.
#[test]
fn bad_bodies_get_anthropic_errors() {
    let s = tiny_server();
    let user = json!([{"role": "user", "content": "hi"}]);
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("not json", b"{\"max_tokens\": ".to_vec(), 400, "invalid_request_error"),
        ("a list", b"[1]".to_vec(), 400, "invalid_request_error"),
        ("no max_tokens", json!({"messages": user}).to_string().into_bytes(), 400, "invalid_request_error"),
        ("max_tokens 0", json!({"max_tokens": 0, "messages": user}).to_string().into_bytes(), 400, "invalid_request_error"),
        ("no messages", json!({"max_tokens": 4}).to_string().into_bytes(), 400, "invalid_request_error"),
        ("empty messages", json!({"max_tokens": 4, "messages": []}).to_string().into_bytes(), 400, "invalid_request_error"),
        ("bad role", json!({"max_tokens": 4, "messages": [{"role": "system", "content": "x"}]}).to_string().into_bytes(), 400, "invalid_request_error"),
        ("image", json!({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}).to_string().into_bytes(), 400, "invalid_request_error"),
        ("tool_use from the user", json!({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}]}).to_string().into_bytes(), 400, "invalid_request_error"),
        ("tool_result without id", json!({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]}).to_string().into_bytes(), 400, "invalid_request_error"),
        ("temperature 1.5", json!({"max_tokens": 4, "messages": user, "temperature": 1.5}).to_string().into_bytes(), 400, "invalid_request_error"),
        ("top_p 0", json!({"max_tokens": 4, "messages": user, "top_p": 0}).to_string().into_bytes(), 400, "invalid_request_error"),
        ("five stops", json!({"max_tokens": 4, "messages": user, "stop_sequences": ["a", "b", "c", "d", "e"]}).to_string().into_bytes(), 400, "invalid_request_error"),
        ("server tool", json!({"max_tokens": 4, "messages": user, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}).to_string().into_bytes(), 400, "invalid_request_error"),
        ("tool without schema", json!({"max_tokens": 4, "messages": user, "tools": [{"name": "f"}]}).to_string().into_bytes(), 400, "invalid_request_error"),
        ("bad tool_choice", json!({"max_tokens": 4, "messages": user, "tool_choice": {"type": "sometimes"}}).to_string().into_bytes(), 400, "invalid_request_error"),
        ("tool_choice without tools", json!({"max_tokens": 4, "messages": user, "tool_choice": {"type": "any"}}).to_string().into_bytes(), 400, "invalid_request_error"),
        ("bad thinking", json!({"max_tokens": 4, "messages": user, "thinking": {"type": "enabled"}}).to_string().into_bytes(), 400, "invalid_request_error"),
        ("bad metadata", json!({"max_tokens": 4, "messages": user, "metadata": "x"}).to_string().into_bytes(), 400, "invalid_request_error"),
        ("too long", json!({"max_tokens": 100000, "messages": user}).to_string().into_bytes(), 400, "invalid_request_error"),
        ("another model", json!({"model": "claude-x", "max_tokens": 4, "messages": user}).to_string().into_bytes(), 404, "not_found_error"),
    ];
    for (what, body, status, kind) in &cases {
        for path in ["/v1/messages", "/v1/messages/count_tokens"] {
            // count_tokens reads no max_tokens and no sampling field (nothing is generated).
            if path.ends_with("count_tokens") && (what.contains("max_tokens") || ["too long", "top_p 0"].contains(what))
            {
                continue;
            }
            let mut bodies = vec![body.clone()];
            if let Ok(Value::Object(mut o)) = serde_json::from_slice::<Value>(body) {
                o.insert("stream".into(), json!(true));
                bodies.push(Value::Object(o).to_string().into_bytes());
            }
            for b in bodies {
                let r = request(s.addr, "POST", path, &b, &[("content-type", "application/json")]);
                let v = r.json();
                assert_eq!(r.status, *status, "{what} on {path}: {v}");
                assert_eq!(v["type"], "error", "{what} on {path}: {v}");
                assert_eq!(v["error"]["type"], *kind, "{what} on {path}: {v}");
                assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{what}: {v}");
            }
        }
    }
    // Another method, an unknown path under the route: Anthropic's shape too.
    for (method, path, status) in
        [("GET", "/v1/messages", 405), ("PUT", "/v1/messages/count_tokens", 405), ("POST", "/v1/messages/batches", 404)]
    {
        let v = request(s.addr, method, path, b"{}", &[]);
        assert_eq!(v.status, status, "{method} {path}");
        let v = v.json();
        assert_eq!(v["type"], "error", "{method} {path}: {v}");
        assert_eq!(v["error"]["type"], if status == 404 { "not_found_error" } else { "invalid_request_error" });
    }
    s.assert_pool_clean();
}

/// Past `--request-timeout`: a 504 `timeout_error`, or after the stream started an
/// `error` event that ends it (no `message_stop`).
#[test]
fn a_late_answer_is_a_timeout_error_streamed_or_not() {
    let mut o = options(tiny(), 256, 16, 8, 64);
    o.limits.request_timeout = std::time::Duration::from_millis(1);
    let s = Server::start(o);
    let body = json!({"max_tokens": 200, "messages": [{"role": "user", "content": "hi"}]});
    let r = post(&s, "/v1/messages", &body);
    assert_eq!(r.status, 504, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["error"]["type"], "timeout_error");
    let mut b = body.clone();
    b["stream"] = json!(true);
    let evs = events(&post(&s, "/v1/messages", &b));
    assert_eq!(evs[0].0, "message_start");
    let (name, last) = evs.last().expect("events");
    assert_eq!((name.as_str(), &last["error"]["type"]), ("error", &json!("timeout_error")), "{evs:?}");
    assert!(!evs.iter().any(|(n, _)| n == "message_stop"));
}

#[test]
fn x_api_key_is_accepted_as_well_as_bearer() {
    let mut o = options(tiny(), 256, 16, 8, 64);
    o.api_key = Some("sekrit".into());
    let s = Server::start(o);
    let body = json!({"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let go = |path: &str, h: &[(&str, &str)]| request(s.addr, "POST", path, body.as_bytes(), h);
    assert_eq!(go("/v1/messages", &[("x-api-key", "sekrit")]).status, 200);
    assert_eq!(go("/v1/messages", &[("authorization", "Bearer sekrit")]).status, 200);
    assert_eq!(go("/v1/messages/count_tokens", &[("x-api-key", "sekrit")]).status, 200);
    assert_eq!(go("/v1/chat/completions", &[("x-api-key", "sekrit")]).status, 200);
    for h in [&[("x-api-key", "wrong")][..], &[], &[("authorization", "Bearer wrong")]] {
        let r = go("/v1/messages", h);
        assert_eq!(r.status, 401, "{h:?}");
        let v = r.json();
        assert_eq!((&v["type"], &v["error"]["type"]), (&json!("error"), &json!("authentication_error")), "{v}");
        // OpenAI's routes keep OpenAI's shape.
        let v = go("/v1/chat/completions", h).json();
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    }
}

fn hermes() -> PathBuf {
    fixture("tiny-hermes")
}

fn weather() -> Value {
    json!({"name": "get_weather", "description": "Weather in a city.", "input_schema": {"type": "object",
        "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": false}})
}

/// Tools on the Hermes template: `any` gives tool_use blocks whose input fits the schema
/// and `stop_reason: "tool_use"`, the same call chat gives; streamed as input_json_delta
/// that adds up to it; the tool_result of a tool loop reaches the prompt.
#[test]
fn tool_use_blocks_and_a_tool_result_turn() {
    let s = Server::start(options(hermes(), 4096, 16, 8, 64));
    let m = json!({"max_tokens": 300, "seed": 5, "temperature": 1.0, "tools": [weather()],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "messages": [{"role": "user", "content": "Weather in Paris?"}]});
    let v = ok(post(&s, "/v1/messages", &m));
    assert_eq!(v["stop_reason"], "tool_use", "{v}");
    let calls: Vec<&Value> = v["content"].as_array().unwrap().iter().filter(|b| b["type"] == "tool_use").collect();
    assert_eq!(calls.len(), 1, "{v}");
    let call = calls[0];
    assert!(call["id"].as_str().is_some_and(|i| i.starts_with("toolu_") && i.len() == 30), "{call}");
    assert_eq!(call["name"], "get_weather");
    let input = call["input"].as_object().expect("input is an object");
    assert!(input["city"].as_str().is_some_and(|c| c.chars().count() <= 8), "{call}");
    assert!(["celsius", "fahrenheit"].contains(&input["unit"].as_str().unwrap_or_default()), "{call}");
    // The chat equivalent makes the same call.
    let c = json!({"max_tokens": 300, "seed": 5, "temperature": 1.0, "parallel_tool_calls": false,
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
            "parameters": weather()["input_schema"]}}],
        "tool_choice": "required", "messages": [{"role": "user", "content": "Weather in Paris?"}]});
    let chat = ok(post(&s, "/v1/chat/completions", &c));
    let tc = &chat["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(tc["name"], "get_weather");
    let args: Value = serde_json::from_str(tc["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, call["input"], "the same seeded call as chat");
    // Streamed: the blocks add up to the same (ids hash the body, which now streams).
    let mut ms = m.clone();
    ms["stream"] = json!(true);
    let st = fold(&events(&post(&s, "/v1/messages", &ms)));
    let strip = |m: &Value| -> Vec<Value> {
        m["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                let mut b = b.clone();
                b.as_object_mut().unwrap().remove("id");
                b
            })
            .collect()
    };
    assert_eq!(strip(&st), strip(&v), "{st}");
    assert_eq!(st["stop_reason"], "tool_use");
    // The loop's next turn: the call and its result go back; the result is in the prompt.
    let turn = |result: &str| {
        json!({"max_tokens": 8, "seed": 5, "tools": [weather()], "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": v["content"]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"],
                "content": [{"type": "text", "text": result}]}]}]})
    };
    let count = |b: &Value| ok(post(&s, "/v1/messages/count_tokens", b))["input_tokens"].as_u64().unwrap();
    assert_eq!(count(&turn("sunny, 25 degrees")), count(&turn("")) + "sunny, 25 degrees".len() as u64);
    let next = ok(post(&s, "/v1/messages", &turn("sunny, 25 degrees")));
    assert!(["end_turn", "max_tokens", "tool_use"].contains(&next["stop_reason"].as_str().unwrap()), "{next}");
    s.assert_pool_clean();
}

/// A thinking template: the reasoning split's thinking is a `thinking` block first (empty
/// signature), streamed as thinking_delta; the same text as chat's `reasoning_content`.
#[test]
fn thinking_blocks_come_from_the_reasoning_split() {
    let d = tempfile::tempdir().expect("tempdir");
    let s = Server::start(options(qwen3_with_template(d.path(), OPENS), 64, 16, 4, 64));
    // Sampling fields too: on this fixture they change the tokens, so a field lost in the
    // translation shows (the tiny Llama's peaked distributions hide them).
    let m = json!({"max_tokens": 24, "seed": 11, "thinking": {"type": "enabled", "budget_tokens": 1024},
        "temperature": 0.9, "top_k": 3, "top_p": 0.9,
        "messages": [{"role": "user", "content": "Why is the sky blue?"}]});
    let v = ok(post(&s, "/v1/messages", &m));
    let blocks = v["content"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "thinking", "{v}");
    assert_eq!(blocks[0]["signature"], "");
    let thinking = blocks[0]["thinking"].as_str().unwrap();
    assert!(!thinking.is_empty());
    let c = json!({"max_tokens": 24, "seed": 11, "chat_template_kwargs": {"enable_thinking": true},
        "temperature": 0.9, "top_k": 3, "top_p": 0.9,
        "messages": [{"role": "user", "content": "Why is the sky blue?"}]});
    let chat = ok(post(&s, "/v1/chat/completions", &c));
    let msg = &chat["choices"][0]["message"];
    assert_eq!(msg["reasoning_content"], json!(thinking), "the same thinking as chat's reasoning_content");
    assert_eq!(msg["content"], json!(text(&v)));
    let mut ms = m.clone();
    ms["stream"] = json!(true);
    let evs = events(&post(&s, "/v1/messages", &ms));
    assert!(
        evs.iter().any(|(_, e)| e["delta"]["type"] == "signature_delta"),
        "a thinking block ends with its signature"
    );
    assert_eq!(fold(&evs)["content"], v["content"]);
    s.assert_pool_clean();
}

/// The translation itself (`tl_serve::messages::translate`), for the fields whose effect
/// the tiny models may not show: tool_choice and disable_parallel_tool_use, a tool_result
/// (its tool's name found from the tool_use id, `is_error` told in the text, before the
/// user's text), dropped thinking blocks, and thinking as `enable_thinking`.
#[test]
fn the_translation_maps_tool_and_thinking_fields() {
    use tl_serve::api::Content;
    let go = |v: Value| tl_serve::messages::translate(v.to_string().as_bytes(), false).expect("accepted").body;
    let tools = json!([{"name": "f", "input_schema": {"type": "object"}}]);
    let user = json!([{"role": "user", "content": "q"}]);
    for (choice, want, parallel) in [
        (json!({"type": "auto"}), json!("auto"), None),
        (json!({"type": "any", "disable_parallel_tool_use": true}), json!("required"), Some(json!(false))),
        (json!({"type": "none"}), json!("none"), None),
        (
            json!({"type": "tool", "name": "f", "disable_parallel_tool_use": false}),
            json!({"type": "function", "function": {"name": "f"}}),
            Some(json!(true)),
        ),
    ] {
        let b = go(json!({"max_tokens": 1, "messages": user, "tools": tools, "tool_choice": choice}));
        assert_eq!((b.tool_choice, b.parallel_tool_calls), (Some(want), parallel), "{choice}");
    }
    let b = go(json!({"max_tokens": 1, "tools": tools, "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": ""},
            {"type": "tool_use", "id": "toolu_a", "name": "f", "input": {"x": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "boom", "is_error": true},
            {"type": "text", "text": "and?"}]}]}));
    let m = b.messages.expect("messages");
    let roles: Vec<&str> = m.iter().map(|t| t.role.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "user"]);
    let text = |c: &Option<Content>| match c {
        Some(Content::Text(t)) => t.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(text(&m[1].content), "", "the thinking block is not shown again");
    assert_eq!(
        m[1].tool_calls,
        Some(json!([{"id": "toolu_a", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]))
    );
    assert_eq!(
        (text(&m[2].content), &m[2].tool_call_id, &m[2].name),
        ("Error: boom".to_string(), &Some(json!("toolu_a")), &Some(json!("f")))
    );
    assert_eq!(text(&m[3].content), "and?");
    for (thinking, want) in [
        (json!({"type": "enabled", "budget_tokens": 2048}), Some(json!({"enable_thinking": true}))),
        (json!({"type": "disabled"}), Some(json!({"enable_thinking": false}))),
        (json!({"type": "adaptive"}), None),
    ] {
        assert_eq!(go(json!({"max_tokens": 1, "messages": user, "thinking": thinking})).chat_template_kwargs, want);
    }
}
