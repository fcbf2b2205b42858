//! A Responses body translated into the chat body chat.rs plans from: `instructions` as
//! the system turn, the input items (after those of the `previous_response_id` chain) as
//! turns, function tools as chat's tools, `text.format` as `response_format`, so a
//! Responses request and its chat equivalent feed the engine the same request
//! (docs/serving.md, "OpenAI Responses API").
//!
//! The body is read by hand from the JSON (not through a derive) so every refusal names
//! the field at fault, `input[2].call_id` and so on. Unknown fields are ignored, as the
//! chat route does.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use crate::api::{self, ApiError, ChatMessage, Content};
use crate::fields::{kind, opt, opt_bool, opt_f64, opt_i64};

/// A checked Responses body: the chat body it means, and the Responses-only fields.
#[derive(Debug)]
pub struct Translated {
    /// The equivalent chat body (`n` 1; no logprobs).
    pub body: api::Body,
    /// `stream`.
    pub stream: bool,
    /// `store` (default true): keep the answer for `previous_response_id`.
    pub store: bool,
    /// `previous_response_id`.
    pub previous: Option<String>,
    /// The conversation as input items: the chain's, then this request's (what a
    /// follow-up's `previous_response_id` continues from, with this answer's output).
    pub items: Vec<Value>,
    /// Echoed in the answer: `instructions`, `tools`, `tool_choice`, `text`, sampling.
    pub echo: Map<String, Value>,
}

fn bad(param: &str, msg: impl Into<String>) -> ApiError {
    ApiError::bad(param, msg)
}

/// A message's or a call output's content: a string, or a list of text parts
/// (`input_text`, `output_text`; `text` too), concatenated as chat concatenates its parts.
fn text_parts(v: &Value, at: &str) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut out = String::new();
            for (j, p) in parts.iter().enumerate() {
                let ty = p.get("type").and_then(Value::as_str);
                match (ty, p.get("text").and_then(Value::as_str)) {
                    (Some("input_text" | "output_text" | "text"), Some(t)) => out.push_str(t),
                    // A refusal the model gave is shown as what it said.
                    (Some("refusal"), _) => out.push_str(p.get("refusal").and_then(Value::as_str).unwrap_or_default()),
                    (Some(t @ ("input_image" | "input_file" | "input_audio")), _) => {
                        return Err(bad(at, format!("{at}[{j}]: {t} is not supported (tl serves text models)")))
                    }
                    _ => {
                        return Err(bad(
                            at,
                            format!(
                            "{at}[{j}] must be a {{\"type\": \"input_text\" | \"output_text\", \"text\": ...}} part"
                        ),
                        ))
                    }
                }
            }
            Ok(out)
        }
        v => Err(bad(at, format!("{at} must be a string or a list of content parts, not {}", kind(v)))),
    }
}

/// Input items as chat turns. A message item is one turn (`developer` is the system
/// role); `function_call` items join the assistant turn before them (or start one) as its
/// `tool_calls`, so a text-and-calls answer is one turn as chat has it; a
/// `function_call_output` is a `tool` turn named after its call; `reasoning` items are
/// not shown to the model again (as chat templates drop past thinking).
fn items(
    list: &[Value],
    at0: &str,
    out: &mut Vec<ChatMessage>,
    names: &mut HashMap<String, String>,
) -> Result<(), ApiError> {
    for (i, it) in list.iter().enumerate() {
        let at = format!("{at0}[{i}]");
        let Some(o) = it.as_object() else { return Err(bad(&at, format!("{at} must be an object, not {}", kind(it)))) };
        let field = |k: &str| opt(o, k);
        let ty = match field("type") {
            None => "message",
            Some(Value::String(t)) => t.as_str(),
            Some(v) => return Err(bad(&at, format!("{at}.type must be a string, not {}", kind(v)))),
        };
        match ty {
            "message" => {
                let role = match field("role").and_then(Value::as_str) {
                    Some("developer") => "system",
                    Some(r @ ("user" | "assistant" | "system")) => r,
                    _ => {
                        return Err(bad(
                            &at,
                            format!("{at}.role must be \"user\", \"assistant\", \"system\" or \"developer\""),
                        ))
                    }
                };
                let Some(c) = field("content") else { return Err(bad(&at, format!("{at}.content is required"))) };
                out.push(ChatMessage::text(role, text_parts(c, &format!("{at}.content"))?));
            }
            "function_call" => {
                let (Some(Value::String(id)), Some(Value::String(name))) = (field("call_id"), field("name")) else {
                    return Err(bad(&at, format!("{at} needs a call_id and a name (strings)")));
                };
                let args = match field("arguments") {
                    None => "{}".to_string(),
                    Some(Value::String(a)) => a.clone(),
                    Some(v) => return Err(bad(&at, format!("{at}.arguments must be a string, not {}", kind(v)))),
                };
                names.insert(id.clone(), name.clone());
                let call = json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}});
                match out.last_mut() {
                    Some(m) if m.role == "assistant" => match &mut m.tool_calls {
                        Some(Value::Array(calls)) => calls.push(call),
                        _ => m.tool_calls = Some(json!([call])),
                    },
                    _ => {
                        let mut m = ChatMessage::text("assistant", String::new());
                        m.tool_calls = Some(json!([call]));
                        out.push(m);
                    }
                }
            }
            "function_call_output" => {
                let Some(Value::String(id)) = field("call_id") else {
                    return Err(bad(&at, format!("{at}.call_id is required (a string)")));
                };
                let Some(v) = field("output") else { return Err(bad(&at, format!("{at}.output is required"))) };
                let content = text_parts(v, &format!("{at}.output"))?;
                out.push(ChatMessage {
                    role: "tool".into(),
                    content: Some(Content::Text(content)),
                    tool_calls: None,
                    tool_call_id: Some(Value::String(id.clone())),
                    name: names.get(id).map(|n| Value::String(n.clone())),
                });
            }
            "reasoning" => {}
            t => {
                return Err(bad(
                    &at,
                    format!(
                        "{at}.type {t:?} is not supported (message, function_call, function_call_output and \
                         reasoning items are)"
                    ),
                ))
            }
        }
    }
    Ok(())
}

/// `tools`: Responses' flat function tools `{type: "function", name, description?,
/// parameters?, strict?}` as chat's `{type: "function", function: {...}}`. Hosted tools
/// (web search, file search, ...) are refused: tl runs no tools.
fn tools(v: &Value) -> Result<Value, ApiError> {
    let Value::Array(list) = v else { return Err(bad("tools", format!("tools must be a list, not {}", kind(v)))) };
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let at = format!("tools[{i}]");
        let Some(o) = t.as_object() else { return Err(bad(&at, format!("{at} must be an object"))) };
        match o.get("type").and_then(Value::as_str) {
            Some("function") => {}
            Some(t) => return Err(bad(&at, format!("{at}.type {t:?}: only function tools are supported"))),
            None => return Err(bad(&at, format!("{at}.type is required (\"function\")"))),
        }
        let Some(name) = o.get("name").and_then(Value::as_str) else {
            return Err(bad(&at, format!("{at}.name is required (a string)")));
        };
        let mut f = Map::new();
        f.insert("name".into(), json!(name));
        for (k, ok) in [("description", Value::is_string as fn(&Value) -> bool), ("parameters", Value::is_object)] {
            match opt(o, k) {
                None => {}
                Some(v) if ok(v) => {
                    f.insert(k.into(), v.clone());
                }
                Some(v) => return Err(bad(&at, format!("{at}.{k} has the wrong type ({})", kind(v)))),
            }
        }
        if let Some(s) = opt(o, "strict") {
            f.insert("strict".into(), s.clone());
        }
        out.push(json!({"type": "function", "function": f}));
    }
    Ok(Value::Array(out))
}

/// `tool_choice`: `"auto" | "none" | "required"` (chat's spelling too) or `{type:
/// "function", name}` as chat's `{type: "function", function: {name}}`.
fn tool_choice(v: &Value) -> Result<Value, ApiError> {
    let p = "tool_choice";
    match v {
        Value::String(s) if ["auto", "none", "required"].contains(&s.as_str()) => Ok(v.clone()),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            match o.get("name").and_then(Value::as_str) {
                Some(n) => Ok(json!({"type": "function", "function": {"name": n}})),
                None => Err(bad(p, "tool_choice of type \"function\" needs a name (a string)")),
            }
        }
        _ => Err(bad(
            p,
            "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}",
        )),
    }
}

/// `text.format` as chat's `response_format`: `text` is none, `json_object` the same,
/// `json_schema {name, schema, strict?, description?}` wrapped in chat's `json_schema`.
/// structured.rs checks the schema when the plan is built.
fn text_format(v: &Value) -> Result<Option<Value>, ApiError> {
    let p = "text";
    let Some(o) = v.as_object() else { return Err(bad(p, format!("text must be an object, not {}", kind(v)))) };
    let Some(f) = opt(o, "format") else { return Ok(None) };
    let Some(fo) = f.as_object() else { return Err(bad(p, "text.format must be an object")) };
    match fo.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let mut js = Map::new();
            for k in ["name", "schema", "strict", "description"] {
                if let Some(v) = opt(fo, k) {
                    js.insert(k.into(), v.clone());
                }
            }
            if !js.contains_key("name") {
                return Err(bad(p, "text.format of type json_schema needs a name"));
            }
            Ok(Some(json!({"type": "json_schema", "json_schema": js})))
        }
        _ => Err(bad(p, "text.format.type must be \"text\", \"json_object\" or \"json_schema\"")),
    }
}

/// `reasoning.effort` as the template's `enable_thinking` (Qwen3's switch; templates that
/// do not read it ignore it): `none` and `minimal` off, other efforts on, unset the
/// template's default.
fn reasoning(v: &Value) -> Result<Option<Value>, ApiError> {
    let p = "reasoning";
    let Some(o) = v.as_object() else { return Err(bad(p, format!("reasoning must be an object, not {}", kind(v)))) };
    match opt(o, "effort") {
        None => Ok(None),
        Some(Value::String(e)) => match e.as_str() {
            "none" | "minimal" => Ok(Some(json!({"enable_thinking": false}))),
            "low" | "medium" | "high" | "xhigh" => Ok(Some(json!({"enable_thinking": true}))),
            _ => Err(bad(p, format!("reasoning.effort {e:?} must be none, minimal, low, medium, high or xhigh"))),
        },
        Some(v) => Err(bad(p, format!("reasoning.effort must be a string, not {}", kind(v)))),
    }
}

/// Check a Responses body and translate it. `history`: the input items of the
/// `previous_response_id` chain with its outputs (empty without one); the caller looks
/// them up (responses.rs's store), so parsing stays pure (the fuzz target calls this).
pub fn translate(bytes: &[u8], history: &[Value]) -> Result<Translated, ApiError> {
    let v: Value = crate::http::parse_json(bytes)?;
    let Value::Object(o) = v else { return Err(bad("", "the body must be a JSON object")) };
    let model = match opt(&o, "model") {
        None => None,
        Some(Value::String(m)) => Some(m.clone()),
        Some(v) => return Err(bad("model", format!("model must be a string, not {}", kind(v)))),
    };
    let mut echo = Map::new();
    let mut messages = Vec::new();
    match opt(&o, "instructions") {
        None => {}
        Some(Value::String(s)) => {
            messages.push(ChatMessage::text("system", s.clone()));
            echo.insert("instructions".into(), json!(s));
        }
        Some(v) => return Err(bad("instructions", format!("instructions must be a string, not {}", kind(v)))),
    }
    let input: Vec<Value> = match opt(&o, "input") {
        Some(Value::String(s)) => vec![json!({"type": "message", "role": "user", "content": s})],
        Some(Value::Array(a)) if !a.is_empty() => a.clone(),
        _ => return Err(bad("input", "input must be a string or a non-empty list of items")),
    };
    let mut names = HashMap::new();
    items(history, "previous_response_id", &mut messages, &mut names)?;
    items(&input, "input", &mut messages, &mut names)?;
    let max_tokens = opt_i64(&o, "max_output_tokens")?;
    if let Some(m) = max_tokens.filter(|&m| m < 1) {
        return Err(bad("max_output_tokens", format!("max_output_tokens = {m}: must be at least 1")));
    }
    let stream = opt_bool(&o, "stream")?.unwrap_or(false);
    let store = opt_bool(&o, "store")?.unwrap_or(true);
    let previous = match opt(&o, "previous_response_id") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => {
            return Err(bad("previous_response_id", format!("previous_response_id must be a string, not {}", kind(v))))
        }
    };
    let tools = opt(&o, "tools").map(tools).transpose()?;
    let tool_choice = opt(&o, "tool_choice").map(tool_choice).transpose()?;
    let parallel = opt_bool(&o, "parallel_tool_calls")?;
    let response_format = opt(&o, "text").map(text_format).transpose()?.flatten();
    let kwargs = opt(&o, "reasoning").map(reasoning).transpose()?.flatten();
    match opt(&o, "metadata") {
        None | Some(Value::Object(_)) => {}
        Some(v) => return Err(bad("metadata", format!("metadata must be an object, not {}", kind(v)))),
    }
    for k in ["tools", "tool_choice", "text", "temperature", "top_p", "max_output_tokens", "metadata"] {
        if let Some(v) = opt(&o, k) {
            echo.insert(k.into(), v.clone());
        }
    }
    echo.insert("parallel_tool_calls".into(), json!(parallel.unwrap_or(true)));
    let body = api::Body {
        model,
        messages: Some(messages),
        max_tokens,
        temperature: opt_f64(&o, "temperature")?,
        top_p: opt_f64(&o, "top_p")?,
        // tl's extension: the Responses API has no seed; with one the answer is reproducible.
        seed: opt_i64(&o, "seed")?,
        tools,
        tool_choice,
        parallel_tool_calls: parallel.map(Value::Bool),
        response_format,
        chat_template_kwargs: kwargs,
        ..api::Body::default()
    };
    let mut all = history.to_vec();
    all.extend(input);
    Ok(Translated { body, stream, store, previous, items: all, echo })
}
