//! Chat templates, rendered as Hugging Face's `apply_chat_template` renders them.
//!
//! transformers compiles the template with jinja2 (`trim_blocks` and `lstrip_blocks` on,
//! the loop-controls extension, a `raise_exception` function and a `tojson` filter that
//! is Python's `json.dumps` without ASCII escaping) and renders it with `messages`,
//! `add_generation_prompt` and the special tokens (`bos_token`, `eos_token`, ...). This
//! module does the same with `minijinja`; Python string methods (`.strip()`,
//! `.startswith()`, ...) come from minijinja-contrib's pycompat.
//!
//! A template comes with a model file and runs on every chat request, so it is
//! sandboxed: minijinja has no loader here (no file or network access; `include` and
//! `import` find only the template itself), every render has [`FUEL`] instructions (a
//! loop that runs longer fails), runtime recursion stops at [`RECURSION_LIMIT`] levels,
//! and the output stops at [`MAX_OUTPUT_BYTES`]. A value printed or passed to `tojson`
//! must be finite: at most 64 levels deep and 2^20 values. A template that could store a
//! namespace inside a namespace is refused when it is loaded ([`cycles`]): such a cycle
//! makes minijinja recurse until the stack overflows. minijinja itself caps `range()` at
//! 100 000 items and a repeated string (`"a" * n`) at 100 MB.

mod cycles;

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Value as JValue};
use serde::Serialize;
use serde_json::Value;
use thiserror::Error;

use crate::config::ModelConfig;
use crate::gguf::Gguf;

/// Instructions one render may execute (minijinja's fuel). Real templates use a few
/// hundred per message; a 1 MiB request of tiny messages stays well inside.
pub const FUEL: u64 = 20_000_000;
/// Runtime recursion levels (macro calls count several): deep enough for every real
/// template, shallow enough for a 2 MiB async worker stack.
pub const RECURSION_LIMIT: usize = 100;
/// Largest rendered prompt in bytes.
pub const MAX_OUTPUT_BYTES: usize = 16 << 20;
/// Largest `indent` of the `tojson` filter.
const MAX_INDENT: usize = 64;

/// An `io::Write` that refuses bytes past [`MAX_OUTPUT_BYTES`].
struct Bounded {
    out: Vec<u8>,
    over: bool,
}

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.out.len() + buf.len() > MAX_OUTPUT_BYTES {
            self.over = true;
            return Err(std::io::Error::other("output limit"));
        }
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A template that could not be found, compiled or rendered.
#[derive(Debug, Error)]
pub enum ChatError {
    /// A file could not be read.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// A file holds something other than what a chat template needs.
    #[error("{}: {reason}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The template does not compile or failed while rendering (`raise_exception` included).
    #[error("chat template: {0}")]
    Template(String),
}

/// One turn of a conversation, as transformers' `apply_chat_template` receives it: a
/// message carries `tool_calls` only when it has some, `tool_call_id` and `name` only when
/// set (templates test `'tool_calls' in message` or `message.tool_calls is defined`), and
/// an assistant turn that only calls tools has `content: none` (what OpenAI clients send).
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// `"system"`, `"user"`, `"assistant"` or `"tool"`.
    pub role: String,
    /// The text of the turn.
    pub content: String,
    /// An assistant turn's calls, in order.
    pub tool_calls: Vec<ToolCall>,
    /// A `tool` turn: the id of the call it answers.
    pub tool_call_id: Option<String>,
    /// A `tool` turn: the function's name.
    pub name: Option<String>,
}

/// One function call of an assistant turn, rendered as transformers' templates read it:
/// `{"id", "type": "function", "function": {"name", "arguments"}}` with `arguments` a
/// JSON value (an object), not OpenAI's JSON string.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// The call's id.
    pub id: String,
    /// The function.
    pub name: String,
    /// Its arguments.
    pub arguments: Value,
}

impl Message {
    /// A message of `role` saying `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message { role: role.into(), content: content.into(), tool_calls: Vec::new(), tool_call_id: None, name: None }
    }
}

impl Serialize for ToolCall {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("id", &self.id)?;
        m.serialize_entry("type", "function")?;
        m.serialize_entry("function", &serde_json::json!({"name": self.name, "arguments": self.arguments}))?;
        m.end()
    }
}

impl Serialize for Message {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("role", &self.role)?;
        if self.content.is_empty() && !self.tool_calls.is_empty() {
            m.serialize_entry("content", &())?;
        } else {
            m.serialize_entry("content", &self.content)?;
        }
        if !self.tool_calls.is_empty() {
            m.serialize_entry("tool_calls", &self.tool_calls)?;
        }
        if let Some(id) = &self.tool_call_id {
            m.serialize_entry("tool_call_id", id)?;
        }
        if let Some(n) = &self.name {
            m.serialize_entry("name", n)?;
        }
        m.end()
    }
}

/// A compiled chat template and the special tokens it is rendered with.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    tokens: Vec<(String, String)>, // ("bos_token", "<s>"), ...
}

fn template_error(e: Error) -> ChatError {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg.push_str(&format!(": {s}"));
        src = s.source();
    }
    ChatError::Template(msg)
}

/// Deepest value the template may print or `tojson` (real chat values are a few levels).
const MAX_DEPTH: usize = 64;
/// Most values one print or `tojson` may visit.
const MAX_NODES: usize = 1 << 20;

/// Refuse a value too deep or too large to write: minijinja lets a template store a
/// namespace in itself (`{% set ns.x = ns %}`), and writing such a cycle would recurse
/// until the stack overflows. Visits at most [`MAX_NODES`] values.
fn check_writable(v: &JValue, depth: usize, nodes: &mut usize) -> Result<(), Error> {
    *nodes += 1;
    if depth > MAX_DEPTH || *nodes > MAX_NODES {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("a value nested deeper than {MAX_DEPTH} levels or holding over {MAX_NODES} values (a namespace that holds itself?)"),
        ));
    }
    match v.kind() {
        ValueKind::Seq => {
            for item in v.try_iter()? {
                check_writable(&item, depth + 1, nodes)?;
            }
        }
        ValueKind::Map => {
            for k in v.try_iter()? {
                check_writable(&v.get_item(&k)?, depth + 1, nodes)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Python's `json.dumps(v, ensure_ascii=False, indent=indent)`, which transformers'
/// `tojson` filter is: `", "` and `": "` separators without indent, `","` with it.
fn py_json(v: &JValue, indent: Option<usize>, depth: usize, out: &mut String) -> Result<(), Error> {
    let newline = |out: &mut String, d: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * d));
        }
    };
    let sep = if indent.is_some() { "," } else { ", " };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            let s = v.to_string();
            // Python writes integral floats with ".0"; minijinja already does for floats.
            out.push_str(&s);
        }
        ValueKind::String => {
            out.push_str(&serde_json::Value::String(v.as_str().unwrap_or_default().into()).to_string())
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<JValue> = v.try_iter()?.collect();
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, depth + 1);
                py_json(item, indent, depth + 1, out)?;
            }
            if !items.is_empty() {
                newline(out, depth);
            }
            out.push(']');
        }
        ValueKind::Map => {
            let keys: Vec<JValue> = v.try_iter()?.collect();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, depth + 1);
                let key = k.as_str().map(str::to_string).unwrap_or_else(|| k.to_string());
                out.push_str(&serde_json::Value::String(key).to_string());
                out.push_str(": ");
                py_json(&v.get_item(k)?, indent, depth + 1, out)?;
            }
            if !keys.is_empty() {
                newline(out, depth);
            }
            out.push('}');
        }
        _ => return Err(Error::new(ErrorKind::InvalidOperation, format!("tojson: cannot serialize {v}"))),
    }
    Ok(())
}

/// transformers' `{% generation %}...{% endgeneration %}` marks the assistant's tokens
/// for training masks and renders its body unchanged; minijinja has no such tag, so it
/// becomes `{% if true %}...{% endif %}`, keeping the tags' whitespace control.
fn generation_tags(source: &str) -> Cow<'_, str> {
    if !source.contains("generation") {
        return Cow::Borrowed(source);
    }
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(i) = rest.find("{%") {
        out.push_str(&rest[..i]);
        let tag = &rest[i..];
        let inner = tag[2..].strip_prefix(['-', '+']).unwrap_or(&tag[2..]);
        let word_at = tag.len() - inner.trim_start().len();
        let after = |w: &str| tag[word_at..].strip_prefix(w).map(|t| t.trim_start());
        let closes = |t: &str| t.strip_prefix(['-', '+']).unwrap_or(t).starts_with("%}");
        let found = [("endgeneration", "endif"), ("generation", "if true")]
            .into_iter()
            .find(|(w, _)| after(w).is_some_and(closes));
        match found {
            Some((word, with)) => {
                out.push_str(&tag[..word_at]);
                out.push_str(with);
                rest = &tag[word_at + word.len()..];
            }
            None => {
                out.push_str("{%");
                rest = &tag[2..];
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

impl ChatTemplate {
    /// Compile `source` with the special tokens it may refer to (`bos_token`, ...).
    pub fn new(source: &str, tokens: Vec<(String, String)>) -> Result<ChatTemplate, ChatError> {
        let mut env = Environment::new();
        env.set_fuel(Some(FUEL));
        env.set_recursion_limit(RECURSION_LIMIT);
        env.set_formatter(|out, state, value| {
            if matches!(value.kind(), ValueKind::Seq | ValueKind::Map) {
                check_writable(value, 0, &mut 0)?;
            }
            minijinja::escape_formatter(out, state, value)
        });
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(|state, value, method, args| {
            // pycompat's str.count loops forever on an empty needle (fuzz finding): do it here.
            if method == "count" && value.kind() == ValueKind::String {
                let (what,): (&str,) = minijinja::value::from_args(args)?;
                let s = value.as_str().unwrap_or_default();
                let n = if what.is_empty() { s.chars().count() + 1 } else { s.matches(what).count() };
                return Ok(JValue::from(n));
            }
            minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
        });
        env.add_function("raise_exception", |msg: String| -> Result<JValue, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        // transformers' `strftime_now(format)`: the local time now (some models' templates
        // print today's date). An unknown `%` code is an error, not chrono's panic.
        env.add_function("strftime_now", |format: &str| -> Result<String, Error> {
            let items: Vec<_> = chrono::format::StrftimeItems::new(format).collect();
            if items.iter().any(|i| matches!(i, chrono::format::Item::Error)) {
                return Err(Error::new(ErrorKind::InvalidOperation, format!("strftime_now: bad format {format:?}")));
            }
            Ok(chrono::Local::now().format_with_items(items.into_iter()).to_string())
        });
        // jinja2: `none is iterable` is false (minijinja says true); undefined iterates as empty.
        env.add_test("iterable", |v: JValue| {
            matches!(
                v.kind(),
                ValueKind::Undefined
                    | ValueKind::String
                    | ValueKind::Bytes
                    | ValueKind::Seq
                    | ValueKind::Map
                    | ValueKind::Iterable
            )
        });
        env.add_filter("tojson", |v: JValue, kwargs: Kwargs| -> Result<String, Error> {
            let indent: Option<usize> = kwargs.get("indent")?;
            kwargs.assert_all_used()?;
            if indent.is_some_and(|n| n > MAX_INDENT) {
                return Err(Error::new(ErrorKind::InvalidOperation, format!("tojson: indent above {MAX_INDENT}")));
            }
            check_writable(&v, 0, &mut 0)?;
            let mut out = String::new();
            py_json(&v, indent, 0, &mut out)?;
            Ok(out)
        });
        let original = source.to_string();
        let source = generation_tags(source);
        env.add_template_owned("chat", source.to_string()).map_err(template_error)?;
        cycles::check(&source).map_err(ChatError::Template)?;
        Ok(ChatTemplate { env, source: original, tokens })
    }

    /// The template of a model, with its special tokens: the GGUF file's
    /// `tokenizer.chat_template` when the config came from one, else the directory's
    /// `chat_template.jinja` or tokenizer_config.json's `chat_template`. `None` when the
    /// model has no template.
    pub fn load(cfg: &ModelConfig) -> Result<Option<ChatTemplate>, ChatError> {
        if let Some(file) = &cfg.gguf {
            let g = Gguf::open(file).map_err(|e| ChatError::Format { path: file.clone(), reason: e.to_string() })?;
            return Self::from_gguf(&g);
        }
        match &cfg.dir {
            Some(dir) => Self::from_dir(dir),
            None => Ok(None),
        }
    }

    /// The template in a GGUF file's metadata, or else the default template of the file's
    /// family ([`crate::GgufArch::default_chat_template`]), if it has one.
    pub fn from_gguf(g: &Gguf) -> Result<Option<ChatTemplate>, ChatError> {
        let path = crate::weights::WeightStore::path(g).to_path_buf();
        let fail = |e: crate::weights::WeightError| ChatError::Format { path: path.clone(), reason: e.to_string() };
        let source = match g.string("tokenizer.chat_template").map_err(fail)? {
            Some(s) => s,
            None => match crate::registry::gguf_arch_of(g).and_then(|a| a.default_chat_template(g)) {
                Some(s) => s,
                None => return Ok(None),
            },
        };
        let names = g.strings("tokenizer.ggml.tokens").map_err(fail)?.unwrap_or_default();
        let mut tokens = Vec::new();
        for (var, key) in [
            ("bos_token", "tokenizer.ggml.bos_token_id"),
            ("eos_token", "tokenizer.ggml.eos_token_id"),
            ("unk_token", "tokenizer.ggml.unknown_token_id"),
            ("pad_token", "tokenizer.ggml.padding_token_id"),
        ] {
            if let Some(tok) = g.uint(key).map_err(fail)?.and_then(|id| names.get(id as usize)) {
                tokens.push((var.to_string(), tok.to_string()));
            }
        }
        Self::new(source, tokens).map(Some)
    }

    /// The template of a Hugging Face model directory.
    pub fn from_dir(dir: &Path) -> Result<Option<ChatTemplate>, ChatError> {
        let cfg_path = dir.join("tokenizer_config.json");
        let cfg: Value = match std::fs::read_to_string(&cfg_path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| ChatError::Format { path: cfg_path.clone(), reason: format!("bad JSON: {e}") })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Value::Null,
            Err(error) => return Err(ChatError::Io { path: cfg_path, error }),
        };
        let mut tokens = Vec::new();
        for var in ["bos_token", "eos_token", "unk_token", "pad_token"] {
            // Either a plain string or an AddedToken object {"content": ...}.
            let tok = match cfg.get(var) {
                Some(Value::String(s)) => Some(s.clone()),
                Some(obj) => obj.get("content").and_then(Value::as_str).map(str::to_string),
                None => None,
            };
            if let Some(t) = tok {
                tokens.push((var.to_string(), t));
            }
        }
        let jinja = dir.join("chat_template.jinja");
        if jinja.is_file() {
            let source = std::fs::read_to_string(&jinja).map_err(|error| ChatError::Io { path: jinja, error })?;
            return Self::new(&source, tokens).map(Some);
        }
        let source = match cfg.get("chat_template") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::String(s)) => s.clone(),
            // A list of named templates: the one named "default" is apply_chat_template's.
            Some(Value::Array(list)) => match list
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                .and_then(|t| t.get("template"))
                .and_then(Value::as_str)
            {
                Some(s) => s.to_string(),
                None => {
                    return Err(ChatError::Format {
                        path: cfg_path,
                        reason: "chat_template is a list without a template named \"default\"".into(),
                    })
                }
            },
            Some(_) => {
                return Err(ChatError::Format { path: cfg_path, reason: "chat_template is not a string".into() })
            }
        };
        Self::new(&source, tokens).map(Some)
    }

    /// The template's source text, as loaded.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The special token the template is rendered with as `var` (`"eos_token"`, ...).
    pub fn token(&self, var: &str) -> Option<&str> {
        self.tokens.iter().find(|(k, _)| k == var).map(|(_, v)| v.as_str())
    }

    /// Render a conversation; with `add_generation_prompt` the text ends where the
    /// assistant's answer starts.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String, ChatError> {
        self.render_with_tools(messages, None, add_generation_prompt)
    }

    /// Render a conversation with `tools` (OpenAI's tool objects,
    /// `{"type": "function", "function": {...}}`), as `apply_chat_template(messages,
    /// tools=...)` does; `None` renders `tools` as none.
    pub fn render_with_tools(
        &self,
        messages: &[Message],
        tools: Option<&[Value]>,
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        self.render_with_kwargs(messages, tools, add_generation_prompt, &[])
    }

    /// [`ChatTemplate::render_with_tools`] with extra template variables, as
    /// `apply_chat_template(..., **kwargs)` passes them (a thinking switch such as `enable_thinking`).
    /// They cannot replace `messages`, `tools`, `add_generation_prompt` or the template's
    /// special tokens.
    pub fn render_with_kwargs(
        &self,
        messages: &[Message],
        tools: Option<&[Value]>,
        add_generation_prompt: bool,
        kwargs: &[(String, Value)],
    ) -> Result<String, ChatError> {
        let tmpl = self.env.get_template("chat").map_err(template_error)?;
        // First, so the fixed variables below win over a kwarg of the same name.
        let mut ctx: Vec<(String, JValue)> =
            kwargs.iter().map(|(k, v)| (k.clone(), JValue::from_serialize(v))).collect();
        ctx.extend([
            ("messages".into(), JValue::from_serialize(messages)),
            ("add_generation_prompt".into(), JValue::from(add_generation_prompt)),
            // transformers passes these as None when not given: `tools is none` holds.
            ("tools".into(), tools.map_or_else(|| JValue::from(()), JValue::from_serialize)),
            ("documents".into(), JValue::from(())),
        ]);
        for (k, v) in &self.tokens {
            ctx.push((k.clone(), JValue::from(v.as_str())));
        }
        let ctx: JValue = ctx.into_iter().collect();
        let mut out = Bounded { out: Vec::new(), over: false };
        match tmpl.render_captured_to(ctx, &mut out) {
            Ok(_) => {}
            Err(_) if out.over => {
                return Err(ChatError::Template(format!("the rendered prompt exceeds {MAX_OUTPUT_BYTES} bytes")))
            }
            Err(e) => return Err(template_error(e)),
        }
        String::from_utf8(out.out).map_err(|e| ChatError::Template(format!("the output is not UTF-8: {e}")))
    }
}
