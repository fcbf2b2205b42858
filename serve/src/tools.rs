//! Tool calls (docs/serving.md, "Tool calls"): the request's `tools`, `tool_choice` and
//! `parallel_tool_calls` checked; the call format chosen from the chat template; the
//! conversation prepared for it; the llguidance grammar that constrains the output; and
//! the parser that turns the output back into OpenAI's `tool_calls`.
//!
//! Every format writes a call section as `open call (sep call)* close`, each call being
//! `{"name": "NAME", "KEY": ARGS}` with ARGS the function's arguments as JSON (fixed
//! whitespace, following its `parameters` schema):
//!
//! | format | chosen when the template | open | sep | close | KEY |
//! | --- | --- | --- | --- | --- | --- |
//! | Hermes (Qwen2.5, Hermes) | contains `<tool_call>` | `<tool_call>\n` | `\n</tool_call>\n<tool_call>\n` | `\n</tool_call>` | arguments |
//! | Mistral | contains `[TOOL_CALLS]` | `[TOOL_CALLS][` | `, ` | `]` | arguments |
//! | Llama 3.x | contains `<\|python_tag\|>` or `ipython` | (none) | (one call only) | (none) | parameters |
//! | generic | renders no trace of a probe tool, or matches none of the above | `{"tool_calls": [` | `, ` | `]}` | arguments |
//!
//! A native template must also render a probe tool's name when given `tools`; one that
//! does not gets the generic format, where the tools are described in a system message
//! and the whole output is one JSON object, `{"tool_calls": [...]}` or (under `auto`)
//! `{"response": "..."}`.
//!
//! `auto` on a native format is a lazy grammar: free text (which cannot contain the
//! trigger) until the model writes the trigger (`<tool_call>`, `[TOOL_CALLS]`, or
//! `{"name": "` for Llama), then the rest of the call section, constrained. `required` and
//! a named function constrain the whole output to the call section (the named function
//! only). The grammar is one llguidance matcher from the first token, so the seeded
//! determinism promise holds: one uniform per sampled token, the mask at step 3a.

use serde_json::{json, Map, Value};
use tl_core::{ChatTemplate, Message};
use tl_engine::{Grammar, GrammarSpec};

use crate::error::ApiError;

mod answer;
mod parse;
pub use answer::{Active, Sent};
pub use parse::{parse_output, Parsed, ParsedCall};

/// One function of `tools`.
#[derive(Clone, Debug)]
pub struct Tool {
    /// `function.name`.
    pub name: String,
    /// `function.parameters` (a JSON schema of an object); an absent one means no arguments.
    pub parameters: Value,
}

/// `tool_choice`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model answers in text; tools are rendered but no call is parsed.
    None,
    /// The model chooses: text, or calls.
    Auto,
    /// At least one call.
    Required,
    /// A call of this function.
    Named(String),
}

/// A request's checked tool fields.
#[derive(Clone, Debug)]
pub struct Tools {
    /// The functions, in request order.
    pub tools: Vec<Tool>,
    /// The tool objects as the client sent them (what the template's `tools` holds).
    pub raw: Vec<Value>,
    /// `tool_choice` (default `auto`).
    pub choice: ToolChoice,
    /// `parallel_tool_calls` (default true): more than one call per answer.
    pub parallel: bool,
}

/// The call format of a template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `<tool_call>\n{"name": .., "arguments": ..}\n</tool_call>` (Qwen2.5, Hermes).
    Hermes,
    /// `{"name": .., "parameters": ..}` (Llama 3.x).
    Llama3,
    /// `[TOOL_CALLS][{"name": .., "arguments": ..}]` (Mistral).
    Mistral,
    /// The documented generic JSON object, for templates without tool support.
    Generic,
}

/// The strings of a format's call section.
struct Shape {
    open: &'static str,
    sep: Option<&'static str>,
    close: &'static str,
    key: &'static str,
    /// What starts a call section in free text (`auto`): a prefix of `open + CALL`.
    trigger: &'static str,
}

const CALL: &str = "{\"name\": \"";

impl Format {
    fn shape(self) -> Shape {
        match self {
            Format::Hermes => Shape {
                open: "<tool_call>\n",
                sep: Some("\n</tool_call>\n<tool_call>\n"),
                close: "\n</tool_call>",
                key: "arguments",
                trigger: "<tool_call>",
            },
            Format::Mistral => {
                Shape { open: "[TOOL_CALLS][", sep: Some(", "), close: "]", key: "arguments", trigger: "[TOOL_CALLS]" }
            }
            // Llama 3.1's and 3.2's templates refuse more than one call per turn.
            Format::Llama3 => Shape { open: "", sep: None, close: "", key: "parameters", trigger: CALL },
            Format::Generic => {
                Shape { open: "{\"tool_calls\": [", sep: Some(", "), close: "]}", key: "arguments", trigger: "" }
            }
        }
    }

    /// The format of `t` (the rule of the module docs).
    pub fn of(t: &ChatTemplate) -> Format {
        let src = t.source();
        let native = if src.contains("<tool_call>") {
            Format::Hermes
        } else if src.contains("[TOOL_CALLS]") {
            Format::Mistral
        } else if src.contains("<|python_tag|>") || src.contains("ipython") {
            Format::Llama3
        } else {
            return Format::Generic;
        };
        let probe = json!([{"type": "function", "function": {"name": "tl_probe_tool_x", "description": "d",
                   "parameters": {"type": "object", "properties": {}}}}]);
        let probe = probe.as_array().map(Vec::as_slice);
        match t.render_with_tools(&[Message::new("user", "q")], probe, true) {
            Ok(text) if text.contains("tl_probe_tool_x") => native,
            _ => Format::Generic,
        }
    }
}

fn bad(param: &str, msg: impl Into<String>) -> ApiError {
    ApiError::bad(param, msg)
}

/// OpenAI's rule for function names: `[a-zA-Z0-9_-]`, 1 to 64 characters.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Most functions one request may declare.
pub const MAX_TOOLS: usize = 128;

/// Check `tools`, `tool_choice` and `parallel_tool_calls`. `None` when the request has
/// no tools (then `tool_choice` may only be absent, `"none"` or `"auto"`).
pub fn parse(
    tools: Option<&Value>,
    choice: Option<&Value>,
    parallel: Option<&Value>,
) -> Result<Option<Tools>, ApiError> {
    let parallel = match parallel {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(bad("parallel_tool_calls", "parallel_tool_calls must be a boolean")),
    };
    let empty = Vec::new();
    let list = match tools {
        None | Some(Value::Null) => &empty,
        Some(Value::Array(a)) => a,
        Some(_) => return Err(bad("tools", "tools must be a list of {\"type\": \"function\", \"function\": {...}}")),
    };
    if list.len() > MAX_TOOLS {
        return Err(bad("tools", format!("{} tools: at most {MAX_TOOLS}", list.len())));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let p = format!("tools[{i}]");
        if t.get("type").and_then(Value::as_str) != Some("function") {
            return Err(bad(&p, format!("{p}.type must be \"function\"")));
        }
        let Some(f) = t.get("function").and_then(Value::as_object) else {
            return Err(bad(&p, format!("{p}.function must be an object")));
        };
        let name = match f.get("name") {
            Some(Value::String(n)) if valid_name(n) => n.clone(),
            Some(Value::String(n)) => {
                return Err(bad(
                    &p,
                    format!("{p}.function.name {n:?} must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -"),
                ))
            }
            _ => return Err(bad(&p, format!("{p}.function.name is required (a string)"))),
        };
        if out.iter().any(|o: &Tool| o.name == name) {
            return Err(bad(&p, format!("{p}: the function name {name:?} appears twice")));
        }
        if !matches!(f.get("description"), None | Some(Value::Null) | Some(Value::String(_))) {
            return Err(bad(&p, format!("{p}.function.description must be a string")));
        }
        if !matches!(f.get("strict"), None | Some(Value::Null) | Some(Value::Bool(_))) {
            return Err(bad(&p, format!("{p}.function.strict must be a boolean")));
        }
        let parameters = match f.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object", "properties": {}, "additionalProperties": false}),
            Some(s @ Value::Object(_)) => s.clone(),
            Some(_) => return Err(bad(&p, format!("{p}.function.parameters must be a JSON schema (an object)"))),
        };
        out.push(Tool { name, parameters });
    }
    let choice = match choice {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            _ => {
                return Err(bad(
                    "tool_choice",
                    format!("tool_choice {s:?} is not \"none\", \"auto\", \"required\" or a function"),
                ))
            }
        },
        Some(Value::Object(o)) => {
            let name = o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str);
            match (o.get("type").and_then(Value::as_str), name) {
                (Some("function"), Some(n)) => ToolChoice::Named(n.to_string()),
                _ => {
                    return Err(bad(
                        "tool_choice",
                        "tool_choice must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                    ))
                }
            }
        }
        Some(_) => return Err(bad("tool_choice", "tool_choice must be a string or an object")),
    };
    if out.is_empty() {
        return match choice {
            ToolChoice::None | ToolChoice::Auto => Ok(None),
            _ => Err(bad("tool_choice", "tool_choice needs tools")),
        };
    }
    if let ToolChoice::Named(n) = &choice {
        if !out.iter().any(|t| &t.name == n) {
            return Err(bad("tool_choice", format!("tool_choice names {n:?}, which is not among the tools")));
        }
    }
    Ok(Some(Tools { tools: out, raw: list.clone(), choice, parallel }))
}

/// FNV-1a, 64 bits, from `basis`: a stable hash (the same in every build and process).
fn fnv(basis: u64, parts: &[&[u8]]) -> u64 {
    let mut h = basis;
    for p in parts {
        for &b in p.iter().chain(&[0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

/// A call's id: `call_` and 24 hex digits of FNV-1a over the server's fingerprint, the
/// request body's bytes, the seed, the choice and the call's index. The same request
/// (with a seed) gets the same ids; any other byte gives others.
pub fn call_id(fingerprint: &str, body: &[u8], seed: u64, choice: usize, index: usize) -> String {
    let (s, c, i) = (seed.to_le_bytes(), (choice as u64).to_le_bytes(), (index as u64).to_le_bytes());
    let parts: [&[u8]; 5] = [fingerprint.as_bytes(), body, &s, &c, &i];
    let a = fnv(0xcbf2_9ce4_8422_2325, &parts);
    let b = fnv(0x6c62_272e_07bb_0142, &parts);
    format!("call_{a:016x}{:08x}", b >> 32)
}

/// Mistral's templates need ids of 9 alphanumerics: such an id is kept, any other becomes
/// 9 base-62 digits of its hash (the same for the call and the result that names it).
fn mistral_id(id: &str) -> String {
    if id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return id.to_string();
    }
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut h = fnv(0xcbf2_9ce4_8422_2325, &[id.as_bytes()]);
    (0..9)
        .map(|_| {
            let d = DIGITS[(h % 62) as usize] as char;
            h /= 62;
            d
        })
        .collect()
}

/// The JSON of a call as the format writes it (compact, `", "` and `": "`).
fn call_text(key: &str, name: &str, args: &Value) -> String {
    format!("{CALL}{name}\", \"{key}\": {}}}", py_json(args))
}

/// `args` with llguidance's fixed separators (`", "`, `": "`), as the grammar writes JSON.
fn py_json(v: &Value) -> String {
    match v {
        Value::Array(a) => format!("[{}]", a.iter().map(py_json).collect::<Vec<_>>().join(", ")),
        Value::Object(o) => {
            let items: Vec<String> =
                o.iter().map(|(k, v)| format!("{}: {}", Value::String(k.clone()), py_json(v))).collect();
            format!("{{{}}}", items.join(", "))
        }
        _ => v.to_string(),
    }
}

/// The system text of the generic format.
fn generic_prompt(t: &Tools) -> String {
    let mut s = String::from("You can call these tools (each a JSON schema of its arguments):\n");
    for raw in &t.raw {
        s.push_str(&raw.to_string());
        s.push('\n');
    }
    s.push_str(
        "To call tools, answer with exactly one JSON object: {\"tool_calls\": [{\"name\": <tool name>, \"arguments\": <arguments object>}]}",
    );
    if t.choice == ToolChoice::Auto {
        s.push_str(
            ". To answer without a tool (also once the tool responses you need are there), answer with \
             {\"response\": <your answer as a string>}",
        );
    }
    s.push('.');
    s
}

/// The conversation as `format` renders it. Native formats keep `tool_calls` and `tool`
/// turns (Mistral's ids mapped to its 9 characters); the generic format writes a call turn
/// as the JSON the model would have written, a `tool` turn as a user turn holding
/// `{"tool_response": {"name", "content"}}`, and (unless `tool_choice` is `none`) the
/// tools into the system message.
pub fn prepare(format: Format, tools: Option<&Tools>, mut msgs: Vec<Message>) -> Vec<Message> {
    match format {
        Format::Mistral => {
            for m in &mut msgs {
                for c in &mut m.tool_calls {
                    c.id = mistral_id(&c.id);
                }
                if let Some(id) = &m.tool_call_id {
                    m.tool_call_id = Some(mistral_id(id));
                }
            }
        }
        Format::Generic => {
            let shape = format.shape();
            for m in &mut msgs {
                if !m.tool_calls.is_empty() {
                    let calls: Vec<String> =
                        m.tool_calls.iter().map(|c| call_text(shape.key, &c.name, &c.arguments)).collect();
                    m.content = format!("{}{}{}", shape.open, calls.join(", "), shape.close);
                    m.tool_calls.clear();
                } else if m.role == "tool" {
                    let mut r = Map::new();
                    if let Some(n) = &m.name {
                        r.insert("name".into(), json!(n));
                    }
                    r.insert("content".into(), json!(m.content));
                    *m = Message::new("user", py_json(&json!({"tool_response": r})));
                }
            }
            if let Some(t) = tools.filter(|t| t.choice != ToolChoice::None) {
                let text = generic_prompt(t);
                match msgs.first_mut() {
                    Some(first) if first.role == "system" => first.content = format!("{}\n\n{text}", first.content),
                    _ => msgs.insert(0, Message::new("system", text)),
                }
            }
        }
        Format::Hermes | Format::Llama3 => {}
    }
    msgs
}

/// A Lark string literal.
fn lit(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// The schema with fixed whitespace (as response_format's), so the arguments are written
/// exactly as the parser and the history expect.
fn fixed(schema: &Value) -> Value {
    let mut s = schema.clone();
    if let Some(o) = s.as_object_mut() {
        o.entry("x-guidance")
            .or_insert_with(|| json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}));
    }
    s
}

/// The grammar of the output, or `None` when nothing is constrained (`tool_choice: none`).
pub fn grammar(format: Format, t: &Tools) -> Option<Grammar> {
    let shape = format.shape();
    let names: Vec<&Tool> = match &t.choice {
        ToolChoice::None => return None,
        ToolChoice::Named(n) => t.tools.iter().filter(|x| &x.name == n).collect(),
        ToolChoice::Auto | ToolChoice::Required => t.tools.iter().collect(),
    };
    let mut g = String::new();
    // The call section after its first `trigger.len()` bytes.
    let head = format!("{}{CALL}", shape.open);
    let rest_of_head = &head[shape.trigger.len()..];
    let sep = shape.sep.filter(|_| t.parallel);
    let more = match sep {
        Some(s) => format!(" ({} tail)*", lit(&format!("}}{s}{CALL}"))),
        None => String::new(),
    };
    let after = format!("{} tail{more} {}", lit(rest_of_head), lit(&format!("}}{}", shape.close)));
    let lazy = t.choice == ToolChoice::Auto && format != Format::Generic;
    if lazy {
        // Free text that cannot contain the trigger, or such text and the trigger.
        let not = format!("~/(?s:.*){}(?s:.*)/", regex_escape(shape.trigger));
        g.push_str(&format!("start: TEXT? | OPEN after\nafter: {after}\n"));
        g.push_str(&format!("TEXT: /(?s:.+)/ & {not}\n"));
        g.push_str(&format!("OPEN: (/(?s:.*)/ & {not}) {}\n", lit(shape.trigger)));
    } else {
        let reply = if t.choice == ToolChoice::Auto { " | reply" } else { "" };
        let lead = if shape.trigger.is_empty() { String::new() } else { lit(shape.trigger) + " " };
        g.push_str(&format!("start: {lead}after{reply}\nafter: {after}\n"));
        if !reply.is_empty() {
            let schema = json!({"type": "object", "properties": {"response": {"type": "string"}},
                "required": ["response"], "additionalProperties": false});
            g.push_str(&format!("reply: %json {}\n", fixed(&schema)));
        }
    }
    let tails: Vec<String> = (0..names.len()).map(|i| format!("tail_{i}")).collect();
    g.push_str(&format!("tail: {}\n", tails.join(" | ")));
    for (i, tool) in names.iter().enumerate() {
        g.push_str(&format!("tail_{i}: {} args_{i}\n", lit(&format!("{}\", \"{}\": ", tool.name, shape.key))));
        g.push_str(&format!("args_{i}: %json {}\n", fixed(&tool.parameters)));
    }
    Some(Grammar { spec: GrammarSpec::Lark(g), field: "tools" })
}

/// `s` as a literal inside a `/.../` regex.
fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~/".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
