//! Tool calls over HTTP (docs/serving.md, "Tool calls"): each native format (Hermes,
//! Mistral, Llama 3.1 templates on the tiny model) and the generic one (the tiny model's
//! ChatML fallback) answers `required` and named choices with `tool_calls` whose arguments
//! fit the function's schema, `content: null` and `finish_reason: "tool_calls"`; streamed
//! deltas add up to the same calls; ids are `call_` and deterministic; a seeded tool request
//! is the same bytes alone and under load; `auto` is a lazy grammar (free text until the
//! trigger, then only a valid call); bad tool fields are 400s naming the field.

mod common;

use std::path::PathBuf;
use std::sync::{Arc, Barrier};

use common::*;
use serde_json::{json, Value};
use tl_engine::{Allowed, GrammarCompiler};
use tl_serve::tools::{self, Format, ToolChoice};

fn server(model: PathBuf) -> Server {
    Server::start(options(model, 4096, 16, 8, 64))
}

fn weather() -> Value {
    json!({"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 8},
            "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": false}}})
}

fn clock() -> Value {
    json!({"type": "function", "function": {"name": "get_time",
        "parameters": {"type": "object", "properties": {"hours": {"type": "integer", "minimum": 0, "maximum": 23}},
        "required": ["hours"], "additionalProperties": false}}})
}

fn body(choice: Value, seed: u64, stream: bool) -> Value {
    json!({"seed": seed, "temperature": 1.0, "max_tokens": 600, "stream": stream,
           "tools": [weather(), clock()], "tool_choice": choice,
           "messages": [{"role": "user", "content": "Weather in Paris?"}]})
}

/// A call's arguments fit its function's schema (the test's own check, not the grammar's).
fn check_call(call: &Value) {
    assert_eq!(call["type"], "function", "{call}");
    let id = call["id"].as_str().expect("id");
    assert!(id.starts_with("call_") && id.len() == 29, "{id}");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().expect("arguments string"))
        .unwrap_or_else(|e| panic!("arguments are not JSON ({e}): {call}"));
    let keys: Vec<&str> = args.as_object().expect("object").keys().map(String::as_str).collect();
    match call["function"]["name"].as_str() {
        Some("get_weather") => {
            assert_eq!(keys, ["city", "unit"], "{call}");
            assert!(args["city"].as_str().is_some_and(|c| c.chars().count() <= 8), "{call}");
            assert!(["celsius", "fahrenheit"].contains(&args["unit"].as_str().unwrap_or_default()), "{call}");
        }
        Some("get_time") => {
            assert_eq!(keys, ["hours"], "{call}");
            assert!(args["hours"].as_u64().is_some_and(|h| h <= 23), "{call}");
        }
        other => panic!("unknown function {other:?}"),
    }
}

/// The message of a non-streamed answer, checked to be calls only.
fn calls_of(s: &Server, b: &Value) -> Vec<Value> {
    let r = s.post("/v1/chat/completions", b);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "tool_calls", "{v}");
    assert_eq!(c["message"]["content"], Value::Null, "{v}");
    assert_eq!(c["message"]["role"], "assistant", "{v}");
    let calls = c["message"]["tool_calls"].as_array().expect("tool_calls").clone();
    assert!(!calls.is_empty(), "{v}");
    calls.iter().for_each(check_call);
    calls
}

/// The calls a stream adds up to (OpenAI's delta rules), and its finish reason.
fn streamed_calls(s: &Server, b: &Value) -> (Vec<Value>, String, String) {
    let r = s.post("/v1/chat/completions", b);
    assert_eq!(r.status, 200);
    let (mut calls, mut finish, mut content) = (Vec::<Value>::new(), String::new(), String::new());
    for e in r.events() {
        if e == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(&e).expect("chunk");
        let c = &v["choices"][0];
        content.push_str(c["delta"]["content"].as_str().unwrap_or_default());
        for d in c["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let k = d["index"].as_u64().expect("index") as usize;
            if k == calls.len() {
                // The first delta of a call: id, type, name, and empty arguments.
                assert!(d["id"].is_string() && d["type"] == "function" && d["function"]["name"].is_string(), "{d}");
                assert_eq!(d["function"]["arguments"], "", "{d}");
                calls.push(json!({"id": d["id"], "type": "function",
                                  "function": {"name": d["function"]["name"], "arguments": ""}}));
            } else {
                assert!(k + 1 == calls.len() && d.get("id").is_none(), "fragments follow their call: {d}");
                let frag = d["function"]["arguments"].as_str().expect("fragment");
                let a = format!("{}{frag}", calls[k]["function"]["arguments"].as_str().unwrap_or_default());
                calls[k]["function"]["arguments"] = json!(a);
            }
        }
        if let Some(f) = c["finish_reason"].as_str() {
            finish = f.to_string();
        }
    }
    (calls, finish, content)
}

#[test]
fn every_format_answers_required_and_named_choices_with_valid_calls() {
    for (model, format) in [
        (fixture("tiny-hermes"), Format::Hermes),
        (fixture("tiny-mistral-tools"), Format::Mistral),
        (fixture("tiny-llama31-tools"), Format::Llama3),
        (fixture("tiny-generic"), Format::Generic),
    ] {
        let s = server(model);
        for seed in 0..6 {
            let calls = calls_of(&s, &body(json!("required"), seed, false));
            if format == Format::Llama3 {
                assert_eq!(calls.len(), 1, "Llama 3.x writes one call per turn");
            }
            let named = json!({"type": "function", "function": {"name": "get_time"}});
            let calls = calls_of(&s, &body(named, seed, false));
            assert!(calls.iter().all(|c| c["function"]["name"] == "get_time"), "{calls:?}");
            let mut single = body(json!("required"), seed, false);
            single["parallel_tool_calls"] = json!(false);
            assert_eq!(calls_of(&s, &single).len(), 1, "{format:?}");
        }
        s.assert_pool_clean();
    }
}

#[test]
fn streamed_calls_add_up_to_the_answer_and_ids_are_deterministic() {
    for model in
        [fixture("tiny-hermes"), fixture("tiny-mistral-tools"), fixture("tiny-llama31-tools"), fixture("tiny-generic")]
    {
        let s = server(model);
        for seed in [3, 4] {
            let whole = calls_of(&s, &body(json!("required"), seed, false));
            assert_eq!(calls_of(&s, &body(json!("required"), seed, false)), whole, "same request, same calls and ids");
            let (streamed, finish, content) = streamed_calls(&s, &body(json!("required"), seed, true));
            assert_eq!(finish, "tool_calls");
            assert_eq!(content, "");
            // The stream's body differs (stream: true), so its ids do; names and arguments agree.
            let strip = |v: &[Value]| v.iter().map(|c| c["function"].clone()).collect::<Vec<_>>();
            assert_eq!(strip(&streamed), strip(&whole));
            assert!(streamed.iter().zip(&whole).all(|(a, b)| a["id"] != b["id"]));
            // Another seed: other ids.
            let other = calls_of(&s, &body(json!("required"), seed + 100, false));
            assert_ne!(other[0]["id"], whole[0]["id"]);
        }
        let ids: Vec<Value> =
            calls_of(&s, &body(json!("required"), 5, false)).iter().map(|c| c["id"].clone()).collect();
        let mut uniq = ids.clone();
        uniq.dedup();
        assert_eq!(uniq, ids, "one id per call");
    }
}

/// The determinism promise with tools: a seeded constrained request is the same bytes
/// (choices and usage) alone and among concurrent requests.
#[test]
fn a_seeded_tool_request_is_the_same_alone_and_under_load() {
    let s = Arc::new(server(fixture("tiny-hermes")));
    let req = |seed: u64, choice: Value| {
        let mut b = body(choice, seed, false);
        b["n"] = json!(2);
        b
    };
    let strip = |r: Resp| {
        assert_eq!(r.status, 200);
        let v = r.json();
        (v["choices"].clone(), v["usage"]["completion_tokens"].clone())
    };
    let alone: Vec<_> = (0..3).map(|k| strip(s.post("/v1/chat/completions", &req(k, json!("required"))))).collect();
    let alone_auto = strip(s.post("/v1/chat/completions", &req(9, json!("auto"))));
    let barrier = Arc::new(Barrier::new(6));
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let (s, barrier) = (Arc::clone(&s), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                let b = if t == 5 { req(9, json!("auto")) } else { req(t as u64 % 3, json!("required")) };
                (t, s.post("/v1/chat/completions", &b))
            })
        })
        .collect();
    for th in threads {
        let (t, r) = th.join().expect("thread");
        let got = strip(r);
        if t == 5 {
            assert_eq!(got, alone_auto, "auto under load");
        } else {
            assert_eq!(got, alone[t % 3], "thread {t}");
        }
    }
    s.assert_pool_clean();
}

/// `auto` is lazy: free text passes unconstrained and may end; once the trigger is written
/// only a call that fits the schema may follow (checked on the grammar itself, with the
/// tiny model's tokenizer, for each native format).
#[test]
fn auto_is_free_text_until_the_trigger_then_a_valid_call() {
    let t = tools::parse(Some(&json!([weather(), clock()])), Some(&json!("auto")), None).expect("ok").expect("some");
    let tok = Arc::new(tl_core::Tokenizer::Byte);
    let gc = GrammarCompiler::new(tok, 320, Some(257));
    let good_hermes = "Let me check.<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"hours\": 7}}\n</tool_call>";
    let cases: [(Format, &str, &str, &str); 3] = [
        (
            Format::Hermes,
            good_hermes,
            "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"hours\": 99}}",
            "<tool_call>\n{\"name\": \"rm_rf\"",
        ),
        (
            Format::Mistral,
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"celsius\"}}]",
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"celsius\"",
            "[TOOL_CALLS]hello",
        ),
        (
            Format::Llama3,
            "{\"name\": \"get_time\", \"parameters\": {\"hours\": 0}}",
            "{\"name\": \"get_time\", \"parameters\": {\"hours\": -1}}",
            "{\"name\": \"get_time\", \"arguments\"",
        ),
    ];
    for (format, good, bad_args, bad_name) in cases {
        let g = tools::grammar(format, &t).expect("a grammar");
        let free = "Sure! <tool or {\"nam\" [TOOL_C\nfree text ends here.";
        let allows = |s: &str| gc.allows(&g, s).unwrap_or_else(|e| panic!("{format:?}: {e}"));
        assert_eq!(allows(free), Allowed::Complete, "{format:?}: free text may end");
        assert_eq!(allows(""), Allowed::Complete, "{format:?}: an empty answer");
        assert_eq!(allows(good), Allowed::Complete, "{format:?}: {good}");
        assert_eq!(allows(&good[..good.len() - 2]), Allowed::Prefix, "{format:?}");
        assert_eq!(allows(bad_args), Allowed::Refused, "{format:?}: {bad_args}");
        assert_eq!(allows(bad_name), Allowed::Refused, "{format:?}: {bad_name}");
        assert_eq!(allows(&format!("{good}trailing text")), Allowed::Refused, "{format:?}: text after the calls");
        // The parser reads the same text back.
        let p = tools::parse_output(format, &ToolChoice::Auto, good, true);
        assert_eq!(p.calls.len(), 1, "{format:?}: {p:?}");
        assert!(p.calls[0].done && p.closed, "{format:?}: {p:?}");
        let free_p = tools::parse_output(format, &ToolChoice::Auto, free, true);
        assert!(free_p.calls.is_empty() && free_p.content == free, "{format:?}: {free_p:?}");
    }
    let p = tools::parse_output(Format::Hermes, &ToolChoice::Auto, good_hermes, true);
    assert_eq!(p.content, "Let me check.");
    assert_eq!(p.calls[0].name, "get_time");
    assert_eq!(p.calls[0].arguments, "{\"hours\": 7}");
    // While streaming, a suffix that may begin the trigger is held back from content.
    let p = tools::parse_output(Format::Hermes, &ToolChoice::Auto, "Hi <tool_c", false);
    assert_eq!(p.content, "Hi ");
    // `required` has no free text: the call section from the first byte.
    let req = tools::parse(Some(&json!([clock()])), Some(&json!("required")), None).expect("ok").expect("some");
    let g = tools::grammar(Format::Hermes, &req).expect("grammar");
    assert_eq!(gc.allows(&g, "Hello").expect("ok"), Allowed::Refused);
    assert_eq!(gc.allows(&g, &good_hermes["Let me check.".len()..]).expect("ok"), Allowed::Complete);
    // Two calls: allowed unless parallel_tool_calls is false.
    let two = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"hours\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"hours\": 2}}\n</tool_call>";
    assert_eq!(gc.allows(&g, two).expect("ok"), Allowed::Complete);
    assert_eq!(tools::parse_output(Format::Hermes, &ToolChoice::Required, two, true).calls.len(), 2);
    let one = tools::parse(Some(&json!([clock()])), Some(&json!("required")), Some(&json!(false)))
        .expect("ok")
        .expect("some");
    let g = tools::grammar(Format::Hermes, &one).expect("grammar");
    assert_eq!(gc.allows(&g, two).expect("ok"), Allowed::Refused);
}

/// `auto` over HTTP: whatever the random model writes is either text (stop/length) or
/// calls that fit (tool_calls); and `none` is text, with the tools in the prompt.
#[test]
fn auto_and_none_over_http() {
    let s = server(fixture("tiny-hermes"));
    for seed in 0..4 {
        let r = s.post("/v1/chat/completions", &body(json!("auto"), seed, false));
        assert_eq!(r.status, 200);
        let v = r.json();
        let c = &v["choices"][0];
        match c["finish_reason"].as_str() {
            Some("tool_calls") => c["message"]["tool_calls"].as_array().expect("calls").iter().for_each(check_call),
            Some("stop" | "length") => {
                assert!(c["message"].get("tool_calls").is_none(), "{v}");
                assert!(!c["message"]["content"].as_str().expect("text").contains("<tool_call>"), "{v}");
            }
            other => panic!("{other:?}: {v}"),
        }
    }
    let with = s.post("/v1/chat/completions", &body(json!("none"), 1, false)).json();
    assert!(with["choices"][0]["message"]["content"].is_string(), "{with}");
    let mut without = body(json!("none"), 1, false);
    without.as_object_mut().expect("object").remove("tools");
    without.as_object_mut().expect("object").remove("tool_choice");
    let without = s.post("/v1/chat/completions", &without).json();
    assert!(
        with["usage"]["prompt_tokens"].as_u64() > without["usage"]["prompt_tokens"].as_u64(),
        "the tools are rendered into the prompt: {with} {without}"
    );
}

/// A conversation with an assistant call and its tool result renders (each format) and
/// the model answers it; with the generic format the result is answered as a reply.
#[test]
fn a_history_with_calls_and_results_is_answered() {
    for model in
        [fixture("tiny-hermes"), fixture("tiny-mistral-tools"), fixture("tiny-llama31-tools"), fixture("tiny-generic")]
    {
        let s = server(model.clone());
        let first = calls_of(&s, &body(json!("required"), 1, false));
        let call = &first[0];
        let b = json!({"seed": 1, "max_tokens": 20, "tools": [weather(), clock()],
            "messages": [{"role": "user", "content": "Weather in Paris?"},
                         {"role": "assistant", "content": null, "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"], "content": "21 C"}]});
        let r = s.post("/v1/chat/completions", &b);
        assert_eq!(r.status, 200, "{model:?}: {}", String::from_utf8_lossy(&r.body));
        let mut bad = b.clone();
        bad["messages"][1]["tool_calls"][0]["function"]["arguments"] = json!("{not json");
        let r = s.post("/v1/chat/completions", &bad);
        assert_eq!(r.status, 400);
        assert_eq!(r.json()["error"]["param"], "messages");
    }
}

#[test]
fn bad_tool_fields_are_400s_naming_the_field() {
    let s = server(fixture("tiny-generic"));
    let cases = [
        (json!({"tools": {"a": 1}}), "tools"),
        (json!({"tools": [{"type": "code", "function": {"name": "f"}}]}), "tools[0]"),
        (json!({"tools": [{"type": "function", "function": {"name": "bad name"}}]}), "tools[0]"),
        (json!({"tools": [{"type": "function"}]}), "tools[0]"),
        (json!({"tools": [weather(), weather()]}), "tools[1]"),
        (json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]}), "tools[0]"),
        (json!({"tools": [weather()], "tool_choice": "sometimes"}), "tool_choice"),
        (
            json!({"tools": [weather()], "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            "tool_choice",
        ),
        (json!({"tools": [weather()], "tool_choice": {"type": "function"}}), "tool_choice"),
        (json!({"tool_choice": "required"}), "tool_choice"),
        (json!({"tools": [weather()], "parallel_tool_calls": "yes"}), "parallel_tool_calls"),
        (json!({"tools": [weather()], "response_format": {"type": "json_object"}}), "response_format"),
        (
            json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "frob"}}}}}]}),
            "tools",
        ),
    ];
    for (extra, param) in cases {
        let mut b = json!({"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]});
        for (k, v) in extra.as_object().expect("object") {
            b[k] = v.clone();
        }
        let r = s.post("/v1/chat/completions", &b);
        assert_eq!(r.status, 400, "{extra}: {}", String::from_utf8_lossy(&r.body));
        let e = r.json();
        assert_eq!(e["error"]["param"], param, "{extra}: {e}");
        assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
        assert!(e["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{e}");
    }
    // `none` and `auto` without tools are plain chat.
    for choice in ["none", "auto"] {
        let b = json!({"max_tokens": 4, "tool_choice": choice, "messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(s.post("/v1/chat/completions", &b).status, 200);
    }
    s.assert_pool_clean();
}

/// The format rule of tools.rs on real templates.
#[test]
fn the_format_is_chosen_from_the_template() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/chat_templates/tools");
    for (file, want) in [
        ("Qwen-Qwen2.5-7B-Instruct.jinja", Format::Hermes),
        ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", Format::Hermes),
        ("mistralai-Mistral-Nemo-Instruct-2407.jinja", Format::Mistral),
        ("meta-llama-Llama-3.1-8B-Instruct.jinja", Format::Llama3),
    ] {
        let src = std::fs::read_to_string(dir.join(file)).expect("template");
        let t = tl_core::ChatTemplate::new(&src, vec![("bos_token".into(), "<s>".into())]).expect("compiles");
        assert_eq!(Format::of(&t), want, "{file}");
    }
    let plain = tl_core::ChatTemplate::new(tl_serve::FALLBACK_TEMPLATE, vec![]).expect("compiles");
    assert_eq!(Format::of(&plain), Format::Generic);
    // A template that names `<tool_call>` but ignores `tools` gets the generic format.
    let fake =
        tl_core::ChatTemplate::new("{# <tool_call> #}{% for m in messages %}{{ m.content }}{% endfor %}", vec![])
            .expect("compiles");
    assert_eq!(Format::of(&fake), Format::Generic);
}

/// SmolLM2 (generic format): `required` gives a call of get_weather with a city; the
/// history with its result (`tool_choice: none`) gets a text answer.
#[test]
fn smollm2_calls_the_tool_then_answers_the_result() {
    let Some(model) = smollm2() else { return };
    let s = Server::start(options(model, 2048, 16, 8, 64));
    let tool = json!({"type": "function", "function": {"name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                       "required": ["city"], "additionalProperties": false}}});
    let mut msgs = vec![
        json!({"role": "system", "content": "You are a helpful assistant. Use the tools when they help."}),
        json!({"role": "user", "content": "What is the weather in Paris?"}),
    ];
    let b = json!({"seed": 7, "temperature": 0, "max_tokens": 80, "tools": [tool],
                   "tool_choice": "required", "messages": msgs});
    let r = s.post("/v1/chat/completions", &b);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let msg = v["choices"][0]["message"].clone();
    let call = &msg["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather", "{v}");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().expect("string")).expect("JSON");
    assert!(args["city"].is_string(), "{args}");
    msgs.push(msg.clone());
    msgs.push(
        json!({"role": "tool", "tool_call_id": call["id"], "content": "{\"temperature_c\": 21, \"sky\": \"sunny\"}"}),
    );
    // SmolLM2 (135M) calls again under `auto` whatever the prompt says: the answer step
    // says `none`, as a loop does to force a final answer.
    let b = json!({"seed": 7, "temperature": 0, "max_tokens": 80, "tools": [tool], "tool_choice": "none", "messages": msgs});
    let v = s.post("/v1/chat/completions", &b).json();
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "stop", "{v}");
    assert!(c["message"].get("tool_calls").is_none(), "{v}");
    assert!(c["message"]["content"].as_str().is_some_and(|t| !t.trim().is_empty()), "{v}");
    s.assert_pool_clean();
}

/// The parser on every prefix of a two-call section: calls only grow, content stays empty
/// (no prefix is mistaken for text), and the whole reads as both calls, closed.
#[test]
fn every_prefix_of_a_call_section_parses_as_a_prefix_of_its_calls() {
    let sections = [
        (Format::Generic, "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"a\": \"}]\"}}, {\"name\": \"g\", \"arguments\": {}}]}"),
        (Format::Hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>"),
        (Format::Mistral, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": [1]}}, {\"name\": \"g\", \"arguments\": {}}]"),
    ];
    for (format, text) in sections {
        let mut last = 0;
        for end in 0..=text.len() {
            let p = tools::parse_output(format, &ToolChoice::Required, &text[..end], end == text.len());
            assert_eq!(p.content, "", "{format:?} at {end}: {p:?}");
            assert!(p.calls.len() >= last, "{format:?} at {end}: {p:?}");
            last = p.calls.len();
        }
        let p = tools::parse_output(format, &ToolChoice::Required, text, true);
        assert!(p.closed && p.calls.len() == 2 && p.calls.iter().all(|c| c.done), "{format:?}: {p:?}");
        assert_eq!((p.calls[0].name.as_str(), p.calls[1].arguments.as_str()), ("f", "{}"), "{format:?}");
    }
}
