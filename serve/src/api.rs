//! OpenAI request bodies and their checks, into the request plan (plan.rs) every surface
//! builds (OpenAI's error body is error.rs's [`ApiError`], re-exported here).
//!
//! Unknown fields are ignored, as OpenAI does. Every refusal names the field (`param`).

use serde::Deserialize;
use serde_json::Value;
use tl_core::SamplingParams;
use tl_engine::{Request, Speculation};

pub use crate::error::ApiError;
pub use crate::plan::Plan;

/// `stop`: a string or a list of strings.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum Stop {
    /// One string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// A chat message's content: a string or a list of text parts.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// `[{"type": "text", "text": ...}]`.
    Parts(Vec<Value>),
}

/// One chat message.
#[derive(Deserialize, Debug)]
pub struct ChatMessage {
    /// system, user, assistant, ...
    pub role: String,
    /// The text.
    #[serde(default)]
    pub content: Option<Content>,
    /// An assistant turn's calls: `[{id, type: "function", function: {name, arguments}}]`.
    #[serde(default)]
    pub tool_calls: Option<Value>,
    /// A `tool` turn: the call it answers.
    #[serde(default)]
    pub tool_call_id: Option<Value>,
    /// A `tool` turn: the function's name.
    #[serde(default)]
    pub name: Option<Value>,
}

impl ChatMessage {
    /// A plain turn: `role` saying `text`.
    pub fn text(role: &str, text: String) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: Some(Content::Text(text)),
            tool_calls: None,
            tool_call_id: None,
            name: None,
        }
    }
}

/// `stream_options`.
#[derive(Deserialize, Debug, Default)]
pub struct StreamOptions {
    /// A last chunk with the usage.
    #[serde(default)]
    pub include_usage: bool,
}

/// The fields of /v1/chat/completions and /v1/completions this server reads.
#[derive(Deserialize, Debug, Default)]
pub struct Body {
    /// Must name the served model.
    pub model: Option<String>,
    /// Chat turns (chat completions).
    pub messages: Option<Vec<ChatMessage>>,
    /// A string, a list of one string, or token ids (completions).
    pub prompt: Option<Value>,
    /// Most tokens to generate.
    pub max_tokens: Option<i64>,
    /// Chat's newer name for `max_tokens`.
    pub max_completion_tokens: Option<i64>,
    /// Sampling fields (sampling.md).
    pub temperature: Option<f64>,
    /// Nucleus mass.
    pub top_p: Option<f64>,
    /// Keep the k best; 0 or -1 = off.
    pub top_k: Option<i64>,
    /// Min-p.
    pub min_p: Option<f64>,
    /// OpenAI presence penalty.
    pub presence_penalty: Option<f64>,
    /// OpenAI frequency penalty.
    pub frequency_penalty: Option<f64>,
    /// Hugging Face repetition penalty.
    pub repetition_penalty: Option<f64>,
    /// The seed; absent = random.
    pub seed: Option<i64>,
    /// Stop strings.
    pub stop: Option<Stop>,
    /// Choices.
    pub n: Option<i64>,
    /// SSE.
    #[serde(default)]
    pub stream: bool,
    /// Streaming options.
    pub stream_options: Option<StreamOptions>,
    /// Chat: a bool; completions: how many top logprobs (0 to 5).
    pub logprobs: Option<Value>,
    /// Chat: top logprobs per token (0 to 20).
    pub top_logprobs: Option<i64>,
    /// `{"type": "text" | "json_object" | "json_schema", ...}` (structured.rs).
    pub response_format: Option<Value>,
    /// `{"<token id>": bias}`, bias in [-100, 100].
    pub logit_bias: Option<Value>,
    /// Chat: the functions the model may call (tools.rs).
    pub tools: Option<Value>,
    /// Chat: `"none"`, `"auto"`, `"required"` or `{"type": "function", "function": {"name"}}`.
    pub tool_choice: Option<Value>,
    /// Chat: more than one call per answer (default true).
    pub parallel_tool_calls: Option<Value>,
    /// vLLM's P/D hand-off fields (docs/scale-out.md).
    pub kv_transfer_params: Option<Value>,
    /// tl's speculative decoding for this request: `false` (off), `true` (n-gram, k 4)
    /// or `{"kind": "off" | "ngram" | "draft", "k"?: 1..=16}`; absent: the server's.
    pub speculate: Option<Value>,
    /// Chat: extra chat template variables (vLLM's and llama-server's), such as Qwen3's
    /// `{"enable_thinking": false}`.
    pub chat_template_kwargs: Option<Value>,
    /// Chat: `low`, `medium` or `high`, passed to the template as `reasoning_effort` (as
    /// vLLM does; templates that do not read it ignore it).
    pub reasoning_effort: Option<Value>,
    /// llama.cpp's per-request adapters: `[{"id": N, "scale": S}]` (lora.rs); `model`
    /// may name an adapter instead.
    pub lora: Option<Value>,
}

fn range(param: &str, v: Option<f64>, lo: f64, hi: f64, lo_open: bool, default: f64) -> Result<f64, ApiError> {
    let Some(x) = v else { return Ok(default) };
    let ok = x.is_finite() && (if lo_open { x > lo } else { x >= lo }) && x <= hi;
    if !ok {
        let l = if lo_open { "(" } else { "[" };
        return Err(ApiError::bad(param, format!("{param} = {x} is out of range: must be in {l}{lo}, {hi}]")));
    }
    Ok(x)
}

/// A fresh random seed for a request that gave none (the std hasher's per-process keys
/// and a counter: no extra dependency, and never the same twice in a process).
pub fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

impl Body {
    /// Check every field and build the plan for `prompt` (no tools: render.rs adds a
    /// chat's). `chat` picks the meaning of `logprobs`; `ctx` is the model's context;
    /// `default_max` the `max_tokens` when none is given.
    pub fn plan(&self, prompt: Vec<u32>, chat: bool, ctx: Option<usize>, default_max: usize) -> Result<Plan, ApiError> {
        let temperature = range("temperature", self.temperature, 0.0, 2.0, false, 1.0)?;
        let top_p = range("top_p", self.top_p, 0.0, 1.0, true, 1.0)?;
        let min_p = range("min_p", self.min_p, 0.0, 1.0, false, 0.0)?;
        let presence_penalty = range("presence_penalty", self.presence_penalty, -2.0, 2.0, false, 0.0)?;
        let frequency_penalty = range("frequency_penalty", self.frequency_penalty, -2.0, 2.0, false, 0.0)?;
        let repetition_penalty = range("repetition_penalty", self.repetition_penalty, 0.0, 10.0, true, 1.0)?;
        let top_k = match self.top_k {
            None | Some(-1) => 0,
            Some(k) if k >= 0 => k as usize,
            Some(k) => return Err(ApiError::bad("top_k", format!("top_k = {k}: must be >= 0 (or -1 for off)"))),
        };
        let n = match self.n {
            None => 1,
            Some(n) if (1..=16).contains(&n) => n as u32,
            Some(n) => return Err(ApiError::bad("n", format!("n = {n}: must be in [1, 16]"))),
        };
        let (max_field, max) = match (self.max_completion_tokens, self.max_tokens) {
            (Some(m), _) => ("max_completion_tokens", Some(m)),
            (None, m) => ("max_tokens", m),
        };
        let max_tokens = match max {
            None => default_max.max(1),
            Some(m) if m >= 1 => m as usize,
            Some(m) => return Err(ApiError::bad(max_field, format!("{max_field} = {m}: must be at least 1"))),
        };
        if let Some(ctx) = ctx {
            if prompt.len() + max_tokens > ctx {
                return Err(ApiError {
                    code: Some("context_length_exceeded"),
                    ..ApiError::bad(
                        max_field,
                        format!(
                            "this model's context is {ctx} tokens; the prompt has {} and {max_field} asks for {max_tokens}",
                            prompt.len()
                        ),
                    )
                });
            }
        }
        let stop = match &self.stop {
            None => vec![],
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) if v.len() <= 4 => v.clone(),
            Some(Stop::Many(v)) => return Err(ApiError::bad("stop", format!("{} stop strings: at most 4", v.len()))),
        };
        let logprobs = if chat {
            let on = match &self.logprobs {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(ApiError::bad("logprobs", "logprobs must be a boolean")),
            };
            let top = match self.top_logprobs {
                None => 0,
                Some(k) if (0..=20).contains(&k) => k as usize,
                Some(k) => {
                    return Err(ApiError::bad("top_logprobs", format!("top_logprobs = {k}: must be in [0, 20]")))
                }
            };
            if top > 0 && !on {
                return Err(ApiError::bad("top_logprobs", "top_logprobs needs logprobs: true"));
            }
            on.then_some(top)
        } else {
            match &self.logprobs {
                None | Some(Value::Null) => None,
                Some(v) => match v.as_i64() {
                    Some(k) if (0..=5).contains(&k) => Some(k as usize),
                    _ => return Err(ApiError::bad("logprobs", "logprobs must be an integer in [0, 5]")),
                },
            }
        };
        let params = SamplingParams {
            temperature,
            top_k,
            top_p,
            min_p,
            repetition_penalty,
            presence_penalty,
            frequency_penalty,
        };
        let grammar = crate::structured::response_format(self.response_format.as_ref())?;
        let logit_bias = crate::structured::logit_bias(self.logit_bias.as_ref())?;
        let speculate = speculate(self.speculate.as_ref())?;
        // OpenAI's seed is a signed 64-bit integer; its bits are the stream's seed.
        let seed = self.seed.map_or_else(random_seed, |s| s as u64);
        let base = Request {
            prompt,
            params,
            seed,
            choice: 0,
            max_tokens,
            stop,
            logprobs,
            grammar,
            logit_bias,
            speculate,
            adapter: None,
        };
        Ok(Plan {
            base,
            n,
            stream: self.stream,
            include_usage: self.stream_options.as_ref().is_some_and(|o| o.include_usage),
            kv_transfer: self.kv_transfer_params.clone(),
            tools: None,
            think: None,
            lora: crate::lora::LoraAsk { model: self.model.clone(), lora: self.lora.clone() },
        })
    }
}

/// The `speculate` field: `null`/absent (the server's setting), a boolean, or
/// `{"kind": "off" | "ngram" | "draft" | "mtp", "k"?: integer}`.
pub fn speculate(v: Option<&Value>) -> Result<Option<Speculation>, ApiError> {
    let bad = |m: String| Err(ApiError::bad("speculate", m));
    let spec = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Bool(false)) => Speculation::Off,
        Some(Value::Bool(true)) => Speculation::Ngram { k: 4 },
        Some(Value::Object(o)) => {
            if let Some(key) = o.keys().find(|k| *k != "kind" && *k != "k") {
                return bad(format!("speculate: unknown field {key:?} (expected kind, k)"));
            }
            let k = match o.get("k") {
                None | Some(Value::Null) => 4,
                Some(v) => match v.as_u64() {
                    Some(k) => k as usize,
                    None => return bad("speculate.k must be a positive integer".into()),
                },
            };
            match o.get("kind").and_then(Value::as_str) {
                Some("off") => Speculation::Off,
                Some("ngram") => Speculation::Ngram { k },
                Some("draft") => Speculation::Draft { k },
                Some("mtp") => Speculation::Mtp { k },
                _ => return bad("speculate.kind must be \"off\", \"ngram\", \"draft\" or \"mtp\"".into()),
            }
        }
        Some(_) => return bad("speculate must be a boolean or {\"kind\", \"k\"}".into()),
    };
    match spec.check() {
        Ok(()) => Ok(Some(spec)),
        Err(e) => bad(format!("speculate: {e}")),
    }
}

/// The text of a message's content.
pub fn content_text(c: &Option<Content>) -> Result<String, ApiError> {
    match c {
        None => Ok(String::new()),
        Some(Content::Text(s)) => Ok(s.clone()),
        Some(Content::Parts(parts)) => {
            let mut out = String::new();
            for p in parts {
                match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => out.push_str(t),
                    _ => return Err(ApiError::bad("messages", "only text content parts are supported")),
                }
            }
            Ok(out)
        }
    }
}

/// One message of the request as a template turn: its text, and an assistant turn's
/// `tool_calls` (their `arguments`, OpenAI's JSON string, parsed into a value, as
/// transformers' templates expect) or a tool turn's `tool_call_id` and `name`. Errors name
/// `messages[i]...`.
pub fn message(i: usize, m: &ChatMessage) -> Result<tl_core::Message, ApiError> {
    let at = |field: &str| format!("messages[{i}]{field}");
    let mut msg = tl_core::Message::new(m.role.as_str(), content_text(&m.content)?);
    let text = |v: &Option<Value>, field: &str| match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::bad("messages", format!("{} must be a string", at(field)))),
    };
    msg.tool_call_id = text(&m.tool_call_id, ".tool_call_id")?;
    msg.name = text(&m.name, ".name")?;
    let calls = match &m.tool_calls {
        None | Some(Value::Null) => return Ok(msg),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(ApiError::bad("messages", format!("{} must be a list", at(".tool_calls")))),
    };
    for (j, c) in calls.iter().enumerate() {
        let f = c.get("function");
        let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
        let id = c.get("id").and_then(Value::as_str);
        let (Some(name), Some(id)) = (name, id) else {
            return Err(ApiError::bad(
                "messages",
                format!("{} needs an id and function.name (strings)", at(&format!(".tool_calls[{j}]"))),
            ));
        };
        let arguments = match f.and_then(|f| f.get("arguments")) {
            Some(Value::String(s)) => serde_json::from_str(s).map_err(|e| {
                ApiError::bad(
                    "messages",
                    format!("{} is not JSON: {e}", at(&format!(".tool_calls[{j}].function.arguments"))),
                )
            })?,
            Some(v @ Value::Object(_)) => v.clone(),
            None | Some(Value::Null) => Value::Object(Default::default()),
            Some(_) => {
                return Err(ApiError::bad(
                    "messages",
                    format!("{} must be a JSON string", at(&format!(".tool_calls[{j}].function.arguments"))),
                ))
            }
        };
        msg.tool_calls.push(tl_core::ToolCall { id: id.to_string(), name: name.to_string(), arguments });
    }
    Ok(msg)
}

/// A fresh id with OpenAI's prefix (`resp`, `msg`, `fc`, `rs`; `rerank`).
pub(crate) fn new_id(prefix: &str) -> String {
    format!("{prefix}_{:016x}{:016x}", random_seed(), random_seed())
}
