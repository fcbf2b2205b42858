//! An Anthropic Messages body translated into the chat body chat.rs plans from: the same
//! turns, tools and sampling fields, so a Messages request and its chat equivalent feed
//! the engine the same request (docs/serving.md, "Anthropic Messages API").
//!
//! Anthropic's fields are read by hand from the JSON (not through a derive) so every
//! refusal names the field at fault, `messages[1].content[0].tool_use_id` and so on.
//! Unknown fields are ignored, as the chat route does.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use crate::api::{self, ApiError, ChatMessage, Content};
use crate::fields::{kind, opt, opt_f64, opt_i64};

/// A checked Messages body: the chat body it means, and whether it streams.
#[derive(Debug)]
pub struct Translated {
    /// The equivalent chat body (`n` 1; no logprobs, no response format).
    pub body: api::Body,
    /// `stream`.
    pub stream: bool,
}

fn bad(param: &str, msg: impl Into<String>) -> ApiError {
    ApiError::bad(param, msg)
}

/// `text` of a list of `{"type": "text", "text": ...}` blocks (or a string), concatenated
/// as chat concatenates its text parts.
fn text_blocks(v: &Value, at: &str) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut out = String::new();
            for (j, b) in blocks.iter().enumerate() {
                match (b.get("type").and_then(Value::as_str), b.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => out.push_str(t),
                    _ => {
                        return Err(bad(at, format!("{at}[{j}] must be a {{\"type\": \"text\", \"text\": ...}} block")))
                    }
                }
            }
            Ok(out)
        }
        v => Err(bad(at, format!("{at} must be a string or a list of text blocks, not {}", kind(v)))),
    }
}

/// The turns of one Anthropic message: an assistant message's text and `tool_use` blocks
/// make one turn with `tool_calls`; a user message's `tool_result` blocks make one `tool`
/// turn each (first, as Anthropic requires them first), then its text one user turn.
/// `names` maps the tool_use ids seen so far to their functions (a `tool` turn names it).
fn message(i: usize, m: &Value, names: &mut HashMap<String, String>) -> Result<Vec<ChatMessage>, ApiError> {
    let at = format!("messages[{i}]");
    let Some(o) = m.as_object() else { return Err(bad(&at, format!("{at} must be an object, not {}", kind(m)))) };
    let role = match o.get("role").and_then(Value::as_str) {
        Some(r @ ("user" | "assistant")) => r,
        _ => return Err(bad(&at, format!("{at}.role must be \"user\" or \"assistant\""))),
    };
    let blocks = match o.get("content") {
        Some(Value::String(s)) => return Ok(vec![ChatMessage::text(role, s.clone())]),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(bad(&at, format!("{at}.content must be a string or a list of blocks, not {}", kind(v)))),
        None => return Err(bad(&at, format!("{at}.content is required"))),
    };
    let (mut text, mut calls, mut results) = (String::new(), Vec::new(), Vec::new());
    for (j, b) in blocks.iter().enumerate() {
        let bat = format!("{at}.content[{j}]");
        let field = |k: &str| b.get(k).filter(|v| !v.is_null());
        match (role, b.get("type").and_then(Value::as_str)) {
            (_, Some("text")) => match field("text") {
                Some(Value::String(t)) => text.push_str(t),
                _ => return Err(bad(&bat, format!("{bat}.text must be a string"))),
            },
            ("assistant", Some("tool_use")) => {
                let (Some(Value::String(id)), Some(Value::String(name))) = (field("id"), field("name")) else {
                    return Err(bad(&bat, format!("{bat} needs an id and a name (strings)")));
                };
                let input = match field("input") {
                    None => json!({}),
                    Some(v @ Value::Object(_)) => v.clone(),
                    Some(v) => return Err(bad(&bat, format!("{bat}.input must be an object, not {}", kind(v)))),
                };
                names.insert(id.clone(), name.clone());
                calls.push(json!({"id": id, "type": "function", "function": {"name": name, "arguments": input}}));
            }
            // Past thinking is not shown to the model again (Qwen3's and DeepSeek's
            // templates drop it too); a client that sends it back is not refused.
            ("assistant", Some("thinking" | "redacted_thinking")) => {}
            ("user", Some("tool_result")) => {
                let Some(Value::String(id)) = field("tool_use_id") else {
                    return Err(bad(&bat, format!("{bat}.tool_use_id is required (a string)")));
                };
                let mut content = match field("content") {
                    None => String::new(),
                    Some(v) => text_blocks(v, &format!("{bat}.content"))?,
                };
                match field("is_error") {
                    None | Some(Value::Bool(false)) => {}
                    // The chat turn has no error flag: the model is told in the text.
                    Some(Value::Bool(true)) => content = format!("Error: {content}"),
                    Some(_) => return Err(bad(&bat, format!("{bat}.is_error must be a boolean"))),
                }
                let name = names.get(id).map(|n| Value::String(n.clone()));
                results.push(ChatMessage {
                    role: "tool".into(),
                    content: Some(Content::Text(content)),
                    tool_calls: None,
                    tool_call_id: Some(Value::String(id.clone())),
                    name,
                });
            }
            (_, Some(t)) => {
                return Err(bad(
                    &bat,
                    format!(
                        "{bat}.type {t:?} is not supported in a {role} message (text, tool_use and thinking in \
                         assistant messages; text and tool_result in user messages)"
                    ),
                ))
            }
            (_, None) => return Err(bad(&bat, format!("{bat}.type is required (a string)"))),
        }
    }
    if role == "assistant" {
        let mut m = ChatMessage::text(role, text);
        if !calls.is_empty() {
            m.tool_calls = Some(Value::Array(calls));
        }
        return Ok(vec![m]);
    }
    if !text.is_empty() || results.is_empty() {
        results.push(ChatMessage::text(role, text));
    }
    Ok(results)
}

/// `tools`: Anthropic's client tools `{name, description?, input_schema}` as chat's
/// functions. Server tools (a `type` other than `custom`) are refused: tl runs no tools.
fn tools(v: &Value) -> Result<Value, ApiError> {
    let Value::Array(list) = v else { return Err(bad("tools", format!("tools must be a list, not {}", kind(v)))) };
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let at = format!("tools[{i}]");
        let Some(o) = t.as_object() else { return Err(bad(&at, format!("{at} must be an object"))) };
        match opt(o, "type").map(|t| t.as_str()) {
            None | Some(Some("custom")) => {}
            Some(Some(t)) => {
                return Err(bad(&at, format!("{at}.type {t:?}: only client tools (type \"custom\") are supported")))
            }
            Some(None) => return Err(bad(&at, format!("{at}.type must be a string"))),
        }
        let Some(name) = o.get("name").and_then(Value::as_str) else {
            return Err(bad(&at, format!("{at}.name is required (a string)")));
        };
        let schema = match o.get("input_schema") {
            Some(s @ Value::Object(_)) => s.clone(),
            _ => return Err(bad(&at, format!("{at}.input_schema is required (a JSON schema object)"))),
        };
        let mut f = Map::new();
        f.insert("name".into(), json!(name));
        match opt(o, "description") {
            None => {}
            Some(d @ Value::String(_)) => {
                f.insert("description".into(), d.clone());
            }
            Some(_) => return Err(bad(&at, format!("{at}.description must be a string"))),
        }
        f.insert("parameters".into(), schema);
        out.push(json!({"type": "function", "function": f}));
    }
    Ok(Value::Array(out))
}

/// `tool_choice` `{type: auto | any | tool | none, name?, disable_parallel_tool_use?}` as
/// chat's `tool_choice` and `parallel_tool_calls`.
fn tool_choice(v: &Value) -> Result<(Value, Option<Value>), ApiError> {
    let p = "tool_choice";
    let Some(o) = v.as_object() else { return Err(bad(p, format!("{p} must be an object, not {}", kind(v)))) };
    let choice = match o.get("type").and_then(Value::as_str) {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => match o.get("name").and_then(Value::as_str) {
            Some(n) => json!({"type": "function", "function": {"name": n}}),
            None => return Err(bad(p, "tool_choice of type \"tool\" needs a name (a string)")),
        },
        _ => return Err(bad(p, "tool_choice.type must be \"auto\", \"any\", \"tool\" or \"none\"")),
    };
    let parallel = match opt(o, "disable_parallel_tool_use") {
        None => None,
        Some(Value::Bool(d)) => Some(Value::Bool(!d)),
        Some(_) => return Err(bad(p, "tool_choice.disable_parallel_tool_use must be a boolean")),
    };
    Ok((choice, parallel))
}

/// `thinking` `{type: "enabled", budget_tokens} | {type: "disabled"} | {type: "adaptive"}`
/// as the template's `enable_thinking` (Qwen3's switch; templates that do not read it
/// ignore it), true, false or unset. The budget is checked, not enforced: `max_tokens`
/// bounds the whole answer.
fn thinking(v: &Value) -> Result<Option<bool>, ApiError> {
    let p = "thinking";
    match v.get("type").and_then(Value::as_str) {
        Some("enabled") => match v.get("budget_tokens").and_then(Value::as_i64) {
            Some(b) if b >= 1 => Ok(Some(true)),
            _ => Err(bad(p, "thinking.budget_tokens must be a positive integer")),
        },
        Some("disabled") => Ok(Some(false)),
        // The model decides: the template's default.
        Some("adaptive") => Ok(None),
        _ => Err(bad(
            p,
            "thinking must be {\"type\": \"enabled\", \"budget_tokens\": N}, {\"type\": \"disabled\"} or \
             {\"type\": \"adaptive\"}",
        )),
    }
}

/// Most stop sequences (the engine's limit, as chat's `stop`).
pub const MAX_STOP: usize = 4;

/// Check an Anthropic Messages body and translate it. `count`: a `count_tokens` body,
/// where `max_tokens` is not asked for.
pub fn translate(bytes: &[u8], count: bool) -> Result<Translated, ApiError> {
    let v: Value = crate::http::parse_json(bytes)?;
    let Value::Object(o) = v else { return Err(bad("", "the body must be a JSON object")) };
    let model = match opt(&o, "model") {
        None => None,
        Some(Value::String(m)) => Some(m.clone()),
        Some(v) => return Err(bad("model", format!("model must be a string, not {}", kind(v)))),
    };
    let mut messages = Vec::new();
    if let Some(s) = opt(&o, "system") {
        messages.push(ChatMessage::text("system", text_blocks(s, "system")?));
    }
    let list = match o.get("messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        _ => return Err(bad("messages", "messages must be a non-empty list")),
    };
    let mut names = HashMap::new();
    for (i, m) in list.iter().enumerate() {
        messages.extend(message(i, m, &mut names)?);
    }
    let max_tokens = opt_i64(&o, "max_tokens")?;
    if !count && max_tokens.is_none() {
        return Err(bad("max_tokens", "max_tokens is required"));
    }
    if let Some(m) = max_tokens.filter(|&m| m < 1) {
        return Err(bad("max_tokens", format!("max_tokens = {m}: must be at least 1")));
    }
    // Anthropic's temperature is [0, 1] (chat's is [0, 2]); the same value means the same.
    let temperature = opt_f64(&o, "temperature")?;
    if let Some(t) = temperature.filter(|t| !(0.0..=1.0).contains(t)) {
        return Err(bad("temperature", format!("temperature = {t} is out of range: must be in [0, 1]")));
    }
    let stop = match opt(&o, "stop_sequences") {
        None => None,
        Some(Value::Array(a)) if a.len() <= MAX_STOP => {
            let s: Option<Vec<String>> = a.iter().map(|s| s.as_str().map(String::from)).collect();
            Some(api::Stop::Many(s.ok_or_else(|| bad("stop_sequences", "stop_sequences must be strings"))?))
        }
        Some(Value::Array(a)) => {
            return Err(bad("stop_sequences", format!("{} stop sequences: at most {MAX_STOP}", a.len())))
        }
        Some(v) => return Err(bad("stop_sequences", format!("stop_sequences must be a list, not {}", kind(v)))),
    };
    match opt(&o, "metadata") {
        None => {}
        Some(Value::Object(m)) if !matches!(m.get("user_id"), None | Some(Value::Null) | Some(Value::String(_))) => {
            return Err(bad("metadata", "metadata.user_id must be a string"));
        }
        Some(Value::Object(_)) => {}
        Some(v) => return Err(bad("metadata", format!("metadata must be an object, not {}", kind(v)))),
    }
    let stream = match opt(&o, "stream") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Err(bad("stream", format!("stream must be a boolean, not {}", kind(v)))),
    };
    let tools = opt(&o, "tools").map(tools).transpose()?;
    let (tool_choice, parallel) = match opt(&o, "tool_choice") {
        None => (None, None),
        Some(v) => {
            let (c, p) = tool_choice(v)?;
            (Some(c), p)
        }
    };
    let kwargs = opt(&o, "thinking").map(thinking).transpose()?.flatten().map(|on| json!({"enable_thinking": on}));
    let body = api::Body {
        model,
        messages: Some(messages),
        max_tokens,
        temperature,
        top_p: opt_f64(&o, "top_p")?,
        top_k: opt_i64(&o, "top_k")?,
        // tl's extension: Anthropic's API has no seed; with one the answer is reproducible.
        seed: opt_i64(&o, "seed")?,
        stop,
        tools,
        tool_choice,
        parallel_tool_calls: parallel,
        chat_template_kwargs: kwargs,
        ..api::Body::default()
    };
    Ok(Translated { body, stream })
}
