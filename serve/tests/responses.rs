//! OpenAI's Responses API (docs/serving.md, "OpenAI Responses API"): the response object's
//! shape and usage; a seeded request is the same output twice, streamed or not, and the
//! same as its chat completion equivalent (text.format and tools included);
//! `max_output_tokens` makes it `incomplete`; `previous_response_id` continues a stored
//! conversation (bounded store; `store: false`; unknown ids 404); function_call items and
//! a function_call_output turn; bad bodies answered 4xx in OpenAI's error shape.

mod common;

use std::path::PathBuf;

use common::*;
use serde_json::{json, Value};

/// A JSON answer, asserting 200.
fn ok(r: Resp) -> Value {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

/// The SSE events of a streamed answer, checking that each names its event and that
/// `sequence_number` counts up from 0.
fn events(r: &Resp) -> Vec<(String, Value)> {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let evs: Vec<(String, Value)> = String::from_utf8_lossy(&r.body)
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let name = e.lines().find_map(|l| l.strip_prefix("event: ")).expect("event line");
            let data = e.lines().find_map(|l| l.strip_prefix("data: ")).expect("data line");
            let v: Value = serde_json::from_str(data).expect("data is JSON");
            assert_eq!(v["type"], name, "an event's data names its event");
            (name.to_string(), v)
        })
        .collect();
    for (i, (_, v)) in evs.iter().enumerate() {
        assert_eq!(v["sequence_number"], i, "{v}");
    }
    evs
}

/// A stream folded into the output it describes, checking the grammar on the way:
/// created and in_progress first; each item added, given deltas of its own kind and done
/// in output_index order; completed or incomplete last, whose response it returns, with
/// the folded output (which must equal the response's own).
fn fold(evs: &[(String, Value)]) -> Value {
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(&names[..2], ["response.created", "response.in_progress"], "{names:?}");
    assert_eq!(evs[0].1["response"]["status"], "in_progress");
    assert_eq!(evs[0].1["response"]["output"], json!([]));
    let last = *names.last().unwrap();
    assert!(["response.completed", "response.incomplete"].contains(&last), "{names:?}");
    let (mut output, mut open, mut text) = (Vec::<Value>::new(), None::<Value>, String::new());
    for (name, v) in &evs[2..evs.len() - 1] {
        let at = |v: &Value| {
            assert_eq!(v["output_index"], output.len(), "{v}");
            if let Some(o) = &open {
                assert_eq!(v.get("item_id").unwrap_or(&o["id"]), &o["id"], "{v}");
            }
        };
        at(v);
        match name.as_str() {
            "response.output_item.added" => {
                assert!(open.is_none(), "an item added while another is open: {v}");
                open = Some(v["item"].clone());
                text.clear();
            }
            "response.content_part.added" | "response.content_part.done" => {
                assert_eq!(open.as_ref().expect("a part outside an item")["type"], "message")
            }
            "response.output_text.delta"
            | "response.reasoning_text.delta"
            | "response.function_call_arguments.delta" => text.push_str(v["delta"].as_str().expect("delta")),
            "response.output_text.done" | "response.reasoning_text.done" => assert_eq!(v["text"], text),
            "response.function_call_arguments.done" => assert_eq!(v["arguments"], text),
            "response.output_item.done" => {
                let o = open.take().expect("done outside an item");
                assert_eq!(v["item"]["id"], o["id"]);
                let item = &v["item"];
                match item["type"].as_str() {
                    Some("message") => assert_eq!(item["content"][0]["text"], text),
                    Some("function_call") => assert_eq!(item["arguments"], text),
                    Some("reasoning") => assert_eq!(item["content"][0]["text"], text),
                    t => panic!("item type {t:?}"),
                }
                output.push(item.clone());
            }
            other => panic!("unexpected event {other}: {names:?}"),
        }
    }
    assert!(open.is_none(), "an item was never done");
    let r = evs.last().unwrap().1["response"].clone();
    assert_eq!(r["output"], json!(output), "the events add up to the final response's output");
    r
}

/// The text of a response's message items (the SDK's `output_text`).
fn text(r: &Value) -> String {
    let items = r["output"].as_array().expect("output");
    items
        .iter()
        .filter(|i| i["type"] == "message")
        .flat_map(|i| i["content"].as_array().unwrap())
        .map(|p| p["text"].as_str().unwrap())
        .collect()
}

/// Output items without their fresh ids (call ids hash the body, which differs by route).
fn strip(r: &Value) -> Vec<Value> {
    let items = r["output"].as_array().expect("output");
    items
        .iter()
        .map(|i| {
            let mut i = i.clone();
            let o = i.as_object_mut().unwrap();
            o.remove("id");
            o.remove("call_id");
            i
        })
        .collect()
}

fn tiny_server() -> Server {
    Server::start(options(tiny(), 256, 16, 8, 64))
}

/// A multi-turn Responses body and its chat completion equivalent.
fn pair(seed: i64, max: u32) -> (Value, Value) {
    let r = json!({
        "model": "tiny-llama", "max_output_tokens": max, "seed": seed, "temperature": 0.9, "top_p": 0.95,
        "instructions": "You are terse.", "metadata": {"k": "v"},
        "input": [
            {"role": "user", "content": "Name a colour."},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Blue."}]},
            {"role": "user", "content": [{"type": "input_text", "text": "Another"}, {"type": "input_text", "text": " one?"}]},
        ],
    });
    let c = json!({
        "model": "tiny-llama", "max_tokens": max, "seed": seed, "temperature": 0.9, "top_p": 0.95,
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "Another one?"},
        ],
    });
    (r, c)
}

#[test]
fn a_response_has_openai_shape_and_its_usage_matches_chat() {
    let s = tiny_server();
    let (r, c) = pair(1, 6);
    let v = ok(s.post("/v1/responses", &r));
    assert!(v["id"].as_str().is_some_and(|i| i.starts_with("resp_")), "{v}");
    assert_eq!((&v["object"], &v["model"]), (&json!("response"), &json!("tiny-llama")));
    assert_eq!(
        (&v["instructions"], &v["metadata"], &v["max_output_tokens"]),
        (&r["instructions"], &r["metadata"], &json!(6))
    );
    let items = v["output"].as_array().expect("output");
    assert_eq!(items.len(), 1, "{v}");
    let m = &items[0];
    assert_eq!((&m["type"], &m["role"]), (&json!("message"), &json!("assistant")));
    assert!(m["id"].as_str().is_some_and(|i| i.starts_with("msg_")), "{m}");
    assert_eq!(m["content"][0]["type"], "output_text");
    let u = &v["usage"];
    let out = u["output_tokens"].as_u64().expect("output_tokens");
    match v["status"].as_str() {
        Some("incomplete") => {
            assert_eq!(out, 6, "{v}");
            assert_eq!(m["status"], "incomplete", "the cut item is marked too");
            assert_eq!(v["incomplete_details"], json!({"reason": "max_output_tokens"}));
        }
        Some("completed") => assert!(out < 6 && v["incomplete_details"].is_null() && m["status"] == "completed", "{v}"),
        st => panic!("status {st:?}: {v}"),
    }
    let chat = ok(s.post("/v1/chat/completions", &c));
    assert_eq!(u["input_tokens"], chat["usage"]["prompt_tokens"], "the same prompt as the chat equivalent");
    assert_eq!(u["total_tokens"], u["input_tokens"].as_u64().unwrap() + out);
    assert!(
        u["input_tokens_details"]["cached_tokens"].is_u64() && u["output_tokens_details"]["reasoning_tokens"].is_u64()
    );
    // A string input is one user turn.
    let one = ok(s.post("/v1/responses", &json!({"input": "hi", "max_output_tokens": 2, "seed": 1})));
    let chat = ok(s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "seed": 1}),
    ));
    assert_eq!(one["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]);
    assert_eq!(text(&one), chat["choices"][0]["message"]["content"].as_str().unwrap());
    s.assert_pool_clean();
}

#[test]
fn a_seeded_response_is_the_same_twice_streamed_and_as_its_chat_completion() {
    let s = tiny_server();
    let (r, c) = pair(7, 24);
    let a = ok(s.post("/v1/responses", &r));
    let b = ok(s.post("/v1/responses", &r));
    assert_eq!(strip(&a), strip(&b), "same seed, same output");
    let chat = ok(s.post("/v1/chat/completions", &c));
    assert_eq!(text(&a), chat["choices"][0]["message"]["content"].as_str().unwrap(), "/v1/responses == chat");
    let want = if chat["choices"][0]["finish_reason"] == "length" { "incomplete" } else { "completed" };
    assert_eq!(a["status"], want);
    assert_eq!(a["usage"]["output_tokens"], chat["usage"]["completion_tokens"]);
    let mut rs = r.clone();
    rs["stream"] = json!(true);
    let streamed = fold(&events(&s.post("/v1/responses", &rs)));
    assert_eq!(strip(&streamed), strip(&a), "the stream adds up to the same output");
    // (Usage but the cached count, which the prefix cache makes differ run to run.)
    let u = |r: &Value| (r["status"].clone(), r["usage"]["input_tokens"].clone(), r["usage"]["output_tokens"].clone());
    assert_eq!(u(&streamed), u(&a));
    let (other, _) = pair(8, 24);
    assert_ne!(text(&ok(s.post("/v1/responses", &other))), text(&a), "another seed, another answer");
    // text.format maps onto response_format: the same grammar, the same tokens.
    let schema = json!({"type": "object", "properties": {"c": {"type": "string", "maxLength": 6}}, "required": ["c"]});
    let mut rf = r.clone();
    rf["text"] = json!({"format": {"type": "json_schema", "name": "colour", "schema": schema, "strict": true}});
    let mut cf = c.clone();
    cf["response_format"] =
        json!({"type": "json_schema", "json_schema": {"name": "colour", "schema": schema, "strict": true}});
    let (rv, cv) = (ok(s.post("/v1/responses", &rf)), ok(s.post("/v1/chat/completions", &cf)));
    assert_eq!(text(&rv), cv["choices"][0]["message"]["content"].as_str().unwrap(), "text.format == response_format");
    assert!(text(&rv).starts_with('{'), "the grammar held: {rv}");
    assert_eq!(rv["text"]["format"]["name"], "colour");
    s.assert_pool_clean();
}

/// The determinism promise under load: the seeded request's output alone equals its
/// output while other requests (other seeds, streamed ones, chat) share the batch.
#[test]
fn a_seeded_response_is_the_same_alone_and_in_a_busy_batch() {
    let s = tiny_server();
    let (r, _) = pair(21, 32);
    let alone = strip(&ok(s.post("/v1/responses", &r)));
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(6));
    let addr = s.addr;
    let handles: Vec<_> = (0..6)
        .map(|i| {
            let barrier = std::sync::Arc::clone(&barrier);
            let (mut body, chat) = pair(if i % 2 == 0 { 21 } else { 100 + i }, 32);
            let path = if i == 5 { "/v1/chat/completions" } else { "/v1/responses" };
            if i == 3 {
                body["stream"] = json!(true);
            }
            let body = if i == 5 { chat } else { body };
            std::thread::spawn(move || {
                barrier.wait();
                (i, request(addr, "POST", path, body.to_string().as_bytes(), &[]))
            })
        })
        .collect();
    for h in handles {
        let (i, r) = h.join().expect("thread");
        match i {
            0 | 2 | 4 => assert_eq!(strip(&ok(r)), alone, "request {i} under load"),
            3 => {
                fold(&events(&r));
            }
            _ => {
                ok(r);
            }
        }
    }
    s.assert_pool_clean();
}

#[test]
fn previous_response_id_continues_a_stored_conversation() {
    let s = tiny_server();
    let first = ok(s.post(
        "/v1/responses",
        &json!({"instructions": "Be terse.", "input": "Name a colour.", "max_output_tokens": 5, "seed": 3}),
    ));
    let said = text(&first);
    let next = json!({"previous_response_id": first["id"], "input": "Another one?", "max_output_tokens": 8, "seed": 4});
    let v = ok(s.post("/v1/responses", &next));
    assert_eq!(v["previous_response_id"], first["id"]);
    // The chain's turns (not its instructions: OpenAI does not carry them over), then the new input.
    let c = json!({"max_tokens": 8, "seed": 4, "messages": [{"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": said}, {"role": "user", "content": "Another one?"}]});
    let chat = ok(s.post("/v1/chat/completions", &c));
    assert_eq!(v["usage"]["input_tokens"], chat["usage"]["prompt_tokens"], "{v}");
    assert_eq!(text(&v), chat["choices"][0]["message"]["content"].as_str().unwrap());
    // Stored answers read back; unknown ids and unstored answers are OpenAI-shaped 404s.
    let got = ok(s.get(&format!("/v1/responses/{}", v["id"].as_str().unwrap())));
    assert_eq!(got, v);
    let unstored = ok(s.post("/v1/responses", &json!({"input": "hi", "max_output_tokens": 1, "store": false})));
    assert_eq!(unstored["store"], false);
    for id in ["resp_nope", unstored["id"].as_str().unwrap()] {
        let r = s.post("/v1/responses", &json!({"previous_response_id": id, "input": "x", "max_output_tokens": 1}));
        assert_eq!(r.status, 404, "{}", String::from_utf8_lossy(&r.body));
        let e = r.json();
        assert_eq!(
            (&e["error"]["code"], &e["error"]["type"]),
            (&json!("previous_response_not_found"), &json!("invalid_request_error"))
        );
        assert!(e["error"]["message"].as_str().unwrap().contains(id));
        assert_eq!(s.get(&format!("/v1/responses/{id}")).status, 404);
    }
    // The store is bounded: past its capacity the least recently used goes.
    let keep = first["id"].as_str().unwrap().to_string();
    for i in 0..tl_serve::responses::STORE_CAPACITY {
        if i % 64 == 0 {
            // Using an entry makes it recent.
            assert_eq!(s.get(&format!("/v1/responses/{keep}")).status, 200);
            ok(s.post(
                "/v1/responses",
                &json!({"previous_response_id": keep, "input": "x", "max_output_tokens": 1, "store": false}),
            ));
        }
        ok(s.post("/v1/responses", &json!({"input": "x", "max_output_tokens": 1})));
    }
    assert_eq!(s.get(&format!("/v1/responses/{}", v["id"].as_str().unwrap())).status, 404, "evicted");
    assert_eq!(s.get(&format!("/v1/responses/{keep}")).status, 200, "recently used: kept");
    s.assert_pool_clean();
}

/// Every bad body is a 4xx with OpenAI's `{"error": {"message", "type", "param", "code"}}`,
/// streamed or not; never a 500.
#[test]
fn bad_bodies_get_openai_errors() {
    let s = tiny_server();
    let f = json!({"type": "function", "name": "f", "parameters": {"type": "object"}});
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("not json", b"{\"input\": ".to_vec(), 400),
        ("a list", b"[1]".to_vec(), 400),
        ("no input", json!({"max_output_tokens": 4}).to_string().into_bytes(), 400),
        ("empty input", json!({"input": []}).to_string().into_bytes(), 400),
        ("input a number", json!({"input": 3}).to_string().into_bytes(), 400),
        ("bad role", json!({"input": [{"role": "robot", "content": "x"}]}).to_string().into_bytes(), 400),
        ("no content", json!({"input": [{"role": "user"}]}).to_string().into_bytes(), 400),
        (
            "image",
            json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]})
                .to_string()
                .into_bytes(),
            400,
        ),
        ("unknown item", json!({"input": [{"type": "web_search_call", "id": "x"}]}).to_string().into_bytes(), 400),
        (
            "call without id",
            json!({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}).to_string().into_bytes(),
            400,
        ),
        (
            "call args object",
            json!({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]})
                .to_string()
                .into_bytes(),
            400,
        ),
        (
            "output without id",
            json!({"input": [{"type": "function_call_output", "output": "x"}]}).to_string().into_bytes(),
            400,
        ),
        ("max_output_tokens 0", json!({"input": "hi", "max_output_tokens": 0}).to_string().into_bytes(), 400),
        ("max_output_tokens text", json!({"input": "hi", "max_output_tokens": "9"}).to_string().into_bytes(), 400),
        ("too long", json!({"input": "hi", "max_output_tokens": 100000}).to_string().into_bytes(), 400),
        ("temperature 3", json!({"input": "hi", "temperature": 3}).to_string().into_bytes(), 400),
        ("instructions list", json!({"input": "hi", "instructions": [1]}).to_string().into_bytes(), 400),
        ("hosted tool", json!({"input": "hi", "tools": [{"type": "web_search"}]}).to_string().into_bytes(), 400),
        ("tool without name", json!({"input": "hi", "tools": [{"type": "function"}]}).to_string().into_bytes(), 400),
        (
            "bad tool_choice",
            json!({"input": "hi", "tools": [f], "tool_choice": "sometimes"}).to_string().into_bytes(),
            400,
        ),
        ("tool_choice without tools", json!({"input": "hi", "tool_choice": "required"}).to_string().into_bytes(), 400),
        ("bad format", json!({"input": "hi", "text": {"format": {"type": "xml"}}}).to_string().into_bytes(), 400),
        (
            "schema without name",
            json!({"input": "hi", "text": {"format": {"type": "json_schema", "schema": {}}}}).to_string().into_bytes(),
            400,
        ),
        (
            "bad schema",
            json!({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": 5}}}})
                .to_string()
                .into_bytes(),
            400,
        ),
        (
            "format and tools",
            json!({"input": "hi", "tools": [f], "text": {"format": {"type": "json_object"}}}).to_string().into_bytes(),
            400,
        ),
        ("bad effort", json!({"input": "hi", "reasoning": {"effort": "max"}}).to_string().into_bytes(), 400),
        ("bad store", json!({"input": "hi", "store": "no"}).to_string().into_bytes(), 400),
        ("bad previous id", json!({"input": "hi", "previous_response_id": 7}).to_string().into_bytes(), 400),
        ("another model", json!({"model": "gpt-x", "input": "hi"}).to_string().into_bytes(), 404),
    ];
    for (what, body, status) in &cases {
        let mut bodies = vec![body.clone()];
        if let Ok(Value::Object(mut o)) = serde_json::from_slice::<Value>(body) {
            o.insert("stream".into(), json!(true));
            bodies.push(Value::Object(o).to_string().into_bytes());
        }
        for b in bodies {
            let r = request(s.addr, "POST", "/v1/responses", &b, &[("content-type", "application/json")]);
            assert_eq!(r.status, *status, "{what}: {}", String::from_utf8_lossy(&r.body));
            let v = r.json();
            let e = &v["error"];
            assert!(e["type"].is_string() && e["message"].as_str().is_some_and(|m| !m.is_empty()), "{what}: {v}");
            assert!(e.get("param").is_some() && e.get("code").is_some(), "{what}: {v}");
        }
    }
    // Another method: OpenAI's shape too.
    for (method, path) in [("GET", "/v1/responses"), ("DELETE", "/v1/responses/resp_1"), ("POST", "/v1/responses/x")] {
        let r = request(s.addr, method, path, b"{}", &[]);
        assert_eq!(r.status, 405, "{method} {path}");
        assert_eq!(r.json()["error"]["code"], "method_not_allowed", "{method} {path}");
    }
    s.assert_pool_clean();
}

/// Past `--request-timeout`: a 504, or after the stream started an `error` event that
/// ends it (no `response.completed`).
#[test]
fn a_late_answer_is_a_timeout_error_streamed_or_not() {
    let mut o = options(tiny(), 256, 16, 8, 64);
    o.limits.request_timeout = std::time::Duration::from_millis(1);
    let s = Server::start(o);
    let body = json!({"max_output_tokens": 200, "input": "hi"});
    let r = s.post("/v1/responses", &body);
    assert_eq!(r.status, 504, "{}", String::from_utf8_lossy(&r.body));
    let mut b = body.clone();
    b["stream"] = json!(true);
    let evs = events(&s.post("/v1/responses", &b));
    assert_eq!(evs[0].0, "response.created");
    let (name, last) = evs.last().expect("events");
    assert_eq!(name, "error", "{evs:?}");
    assert!(last["message"].as_str().is_some_and(|m| !m.is_empty()) && last["code"].is_string(), "{last}");
    assert!(!evs.iter().any(|(n, _)| n == "response.completed"));
}

fn hermes() -> PathBuf {
    fixture("tiny-hermes")
}

fn weather_params() -> Value {
    json!({"type": "object",
        "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": false})
}

/// Tools on the Hermes template: `required` gives a function_call item whose arguments
/// fit the schema, the same call chat gives; streamed as function_call_arguments deltas
/// that add up to it; the loop's next turn (function_call_output after
/// previous_response_id) puts the result in the prompt.
#[test]
fn function_call_items_and_a_function_call_output_turn() {
    let s = Server::start(options(hermes(), 4096, 16, 8, 64));
    let tool = json!({"type": "function", "name": "get_weather", "description": "Weather in a city.",
        "parameters": weather_params(), "strict": true});
    let r = json!({"max_output_tokens": 300, "seed": 5, "temperature": 1.0, "tools": [tool],
        "tool_choice": "required", "parallel_tool_calls": false, "input": "Weather in Paris?"});
    let v = ok(s.post("/v1/responses", &r));
    let calls: Vec<&Value> = v["output"].as_array().unwrap().iter().filter(|i| i["type"] == "function_call").collect();
    assert_eq!(calls.len(), 1, "{v}");
    let call = calls[0];
    assert!(call["call_id"].as_str().is_some_and(|i| i.starts_with("call_")), "{call}");
    assert!(call["id"].as_str().is_some_and(|i| i.starts_with("fc_")), "{call}");
    assert_eq!((&call["name"], &call["status"]), (&json!("get_weather"), &json!("completed")));
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).expect("arguments are JSON");
    assert!(args["city"].as_str().is_some_and(|c| c.chars().count() <= 8), "{call}");
    assert_eq!(v["tools"][0]["name"], "get_weather", "the tools are echoed as sent");
    let c = json!({"max_tokens": 300, "seed": 5, "temperature": 1.0, "parallel_tool_calls": false,
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
            "parameters": weather_params(), "strict": true}}],
        "tool_choice": "required", "messages": [{"role": "user", "content": "Weather in Paris?"}]});
    let chat = ok(s.post("/v1/chat/completions", &c));
    let tc = &chat["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!((&tc["name"], &tc["arguments"]), (&call["name"], &call["arguments"]), "the same seeded call as chat");
    let mut rs = r.clone();
    rs["stream"] = json!(true);
    let st = fold(&events(&s.post("/v1/responses", &rs)));
    assert_eq!(strip(&st), strip(&v), "{st}");
    // The loop: the result after previous_response_id; the result is in the prompt.
    let turn = |result: &str| {
        json!({"previous_response_id": v["id"], "max_output_tokens": 4, "seed": 5, "tools": [tool],
            "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": result}]})
    };
    let n = |b: &Value| ok(s.post("/v1/responses", b))["usage"]["input_tokens"].as_u64().unwrap();
    assert_eq!(n(&turn("sunny, 25 degrees")), n(&turn("")) + "sunny, 25 degrees".len() as u64);
    // The same turn written out in full (no previous_response_id) is the same prompt.
    let full = json!({"max_output_tokens": 4, "seed": 5, "tools": [tool], "input": [
        {"role": "user", "content": "Weather in Paris?"}, call,
        {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny, 25 degrees"}]});
    assert_eq!(n(&full), n(&turn("sunny, 25 degrees")));
    s.assert_pool_clean();
}

/// A thinking template: the reasoning split's thinking is a `reasoning` item first
/// (`reasoning_text` content), streamed as reasoning_text deltas; the same text as chat's
/// `reasoning_content`, the message the same as chat's content.
#[test]
fn reasoning_items_come_from_the_reasoning_split() {
    let d = tempfile::tempdir().expect("tempdir");
    let s = Server::start(options(qwen3_with_template(d.path(), OPENS), 64, 16, 4, 64));
    // Sampling fields too: on this fixture they change the tokens, so a field lost in the
    // translation shows.
    let r = json!({"max_output_tokens": 24, "seed": 11, "reasoning": {"effort": "high"}, "temperature": 0.9,
        "top_p": 0.9, "input": "Why is the sky blue?"});
    let v = ok(s.post("/v1/responses", &r));
    let items = v["output"].as_array().unwrap();
    assert_eq!(items[0]["type"], "reasoning", "{v}");
    assert!(items[0]["id"].as_str().is_some_and(|i| i.starts_with("rs_")));
    let thinking = items[0]["content"][0]["text"].as_str().unwrap();
    assert!(!thinking.is_empty());
    let c = json!({"max_tokens": 24, "seed": 11, "chat_template_kwargs": {"enable_thinking": true},
        "temperature": 0.9, "top_p": 0.9, "messages": [{"role": "user", "content": "Why is the sky blue?"}]});
    let chat = ok(s.post("/v1/chat/completions", &c));
    let msg = &chat["choices"][0]["message"];
    assert_eq!(msg["reasoning_content"], json!(thinking), "the same thinking as chat's reasoning_content");
    assert_eq!(msg["content"].as_str().unwrap_or_default(), text(&v));
    let mut rs = r.clone();
    rs["stream"] = json!(true);
    let evs = events(&s.post("/v1/responses", &rs));
    assert!(evs.iter().any(|(n, _)| n == "response.reasoning_text.delta"), "{evs:?}");
    assert_eq!(strip(&fold(&evs)), strip(&v));
    s.assert_pool_clean();
}

/// The translation alone: what fields become in the chat body.
#[test]
fn the_translation_maps_items_tools_and_formats() {
    let go = |v: Value| tl_serve::responses::translate(v.to_string().as_bytes(), &[]).expect("translates");
    let t = go(json!({"input": [
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\":1}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "ok"}]}],
        "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "f"},
        "reasoning": {"effort": "minimal"}, "text": {"format": {"type": "json_object"}}, "store": false}));
    let m = t.body.messages.as_ref().unwrap();
    assert_eq!(m.len(), 3, "developer as system, text and calls as one assistant turn, then the tool turn");
    assert_eq!(m[0].role, "system");
    assert_eq!(m[1].tool_calls.as_ref().unwrap().as_array().unwrap().len(), 2);
    assert_eq!((m[2].role.as_str(), m[2].name.clone()), ("tool", Some(json!("g"))));
    assert_eq!(t.body.tool_choice, Some(json!({"type": "function", "function": {"name": "f"}})));
    assert_eq!(t.body.tools.as_ref().unwrap()[0]["function"]["name"], "f");
    assert_eq!(t.body.chat_template_kwargs, Some(json!({"enable_thinking": false})));
    assert_eq!(t.body.response_format, Some(json!({"type": "json_object"})));
    assert!(!t.store && !t.stream);
    assert_eq!(t.items.len(), 6, "the input items are kept for a follow-up");
}
