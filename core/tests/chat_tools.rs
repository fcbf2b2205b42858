//! Tool-use conversations (tools, assistant `tool_calls`, `role: "tool"` results) render
//! through real templates (Qwen2.5, Hermes 3, Llama 3.1, Mistral Nemo) exactly as
//! transformers' `apply_chat_template(messages, tools=...)` renders them
//! (scripts/chat_templates/tool_renders.json, written by tool_renders.py beside it).

use serde_json::Value;
use tl_core::{ChatTemplate, Message, ToolCall};

fn golden() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/chat_templates/tool_renders.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("golden file")).expect("json")
}

/// A message of the golden file as tl's Message (arguments stay a JSON object).
fn message(m: &Value) -> Message {
    let mut msg = Message::new(m["role"].as_str().expect("role"), m["content"].as_str().unwrap_or_default());
    for c in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
        msg.tool_calls.push(ToolCall {
            id: c["id"].as_str().expect("id").into(),
            name: c["function"]["name"].as_str().expect("name").into(),
            arguments: c["function"]["arguments"].clone(),
        });
    }
    msg.tool_call_id = m.get("tool_call_id").and_then(Value::as_str).map(str::to_string);
    msg.name = m.get("name").and_then(Value::as_str).map(str::to_string);
    msg
}

#[test]
fn tool_conversations_render_as_transformers_does() {
    let g = golden();
    let tools = g["tools"].as_array().expect("tools").clone();
    let cases = g["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 32);
    let (mut texts, mut errors) = (0, 0);
    for case in cases {
        let name = case["template"].as_str().expect("template");
        let tokens = g["tokens"][name]
            .as_object()
            .expect("tokens")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().expect("token").to_string()))
            .collect();
        let tmpl = ChatTemplate::new(g["templates"][name].as_str().expect("source"), tokens).expect("compiles");
        let conv = case["conversation"].as_str().expect("conversation");
        let msgs: Vec<Message> = g["conversations"][conv].as_array().expect("messages").iter().map(message).collect();
        let agp = case["add_generation_prompt"].as_bool().expect("agp");
        let got = tmpl.render_with_tools(&msgs, Some(&tools), agp);
        match (&case["text"], &case["error"]) {
            (Value::String(want), _) => {
                let got = got.unwrap_or_else(|e| panic!("{name} / {conv}: {e}"));
                assert_eq!(&got, want, "{name} / {conv} / {agp}");
                // The tools really are in the prompt (a template that ignored them would
                // also differ from the golden text, but say so plainly).
                assert!(got.contains("get_time"), "{name} / {conv}");
                texts += 1;
            }
            (_, Value::String(msg)) => {
                let e = got.expect_err("the template raises").to_string();
                assert!(e.contains(msg.as_str()), "{name} / {conv}: {e}");
                errors += 1;
            }
            _ => panic!("case without text or error"),
        }
    }
    assert_eq!((texts, errors), (30, 2), "Llama 3.1 refuses two calls in one turn");
}

/// `render` is `render_with_tools` without tools: `tools is none` holds, and a message
/// without calls has no `tool_calls` key (`'tool_calls' in message` is false).
#[test]
fn without_tools_the_template_sees_none_and_no_tool_keys() {
    let t = ChatTemplate::new(
        "{{ tools is none }} {{ 'tool_calls' in messages[0] }} {{ messages[1].content is none }} \
         {{ messages[1].tool_calls[0].function.arguments.x }} {{ messages[2].tool_call_id }}",
        vec![],
    )
    .expect("compiles");
    let mut call = Message::new("assistant", "");
    call.tool_calls.push(ToolCall { id: "c1".into(), name: "f".into(), arguments: serde_json::json!({"x": 5}) });
    let mut result = Message::new("tool", "ok");
    result.tool_call_id = Some("c1".into());
    let msgs = [Message::new("user", "hi"), call, result];
    assert_eq!(t.render(&msgs, false).expect("renders"), "True False True 5 c1");
}
