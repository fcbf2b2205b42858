//! A request body's prompt tokens, as `serve` makes them: chat turns through the model's
//! chat template, completion prompts as text (special tokens parsed) or ids. Shared by the
//! handlers and `verify`, so both feed the engine the same tokens for the same body.

use serde_json::Value;
use tl_core::{ChatTemplate, Message, ModelConfig, Tokenizer};

use crate::api::{self, ApiError, Body};

/// A template for models that ship none (the tiny test models): ChatML, as SmolLM2 uses.
pub const FALLBACK_TEMPLATE: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n\
     {% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// The model's chat template, or ChatML ([`FALLBACK_TEMPLATE`]) when it has none.
pub fn template_of(cfg: &ModelConfig) -> Result<ChatTemplate, String> {
    match ChatTemplate::load(cfg).map_err(|e| e.to_string())? {
        Some(t) => Ok(t),
        None => ChatTemplate::new(FALLBACK_TEMPLATE, vec![]).map_err(|e| e.to_string()),
    }
}

fn tok_err(param: &str) -> impl Fn(tl_core::TokenizerError) -> ApiError + '_ {
    move |e| ApiError::bad(param, e.to_string())
}

/// The body's `messages`, refused when absent or empty.
pub fn messages(b: &Body) -> Result<&[api::ChatMessage], ApiError> {
    let msgs = b.messages.as_deref().unwrap_or_default();
    if msgs.is_empty() {
        return Err(ApiError::bad("messages", "messages must be a non-empty list"));
    }
    Ok(msgs)
}

/// `msgs` as the template's turns (content, tool calls, tool results).
pub fn turns(msgs: &[api::ChatMessage]) -> Result<Vec<Message>, ApiError> {
    msgs.iter().enumerate().map(|(i, m)| api::message(i, m)).collect()
}

/// `turns` rendered with `template` (with the generation prompt; `tools` for a template
/// that renders them itself) and tokenized.
pub fn render(
    tok: &Tokenizer,
    template: &ChatTemplate,
    turns: &[Message],
    tools: Option<&[Value]>,
) -> Result<Vec<u32>, ApiError> {
    render_with(tok, template, turns, tools, &[])
}

/// [`render`] with extra template variables ([`template_kwargs`]).
pub fn render_with(
    tok: &Tokenizer,
    template: &ChatTemplate,
    turns: &[Message],
    tools: Option<&[Value]>,
    kwargs: &[(String, Value)],
) -> Result<Vec<u32>, ApiError> {
    let text = template
        .render_with_kwargs(turns, tools, true, kwargs)
        .map_err(|e| ApiError::bad("messages", e.to_string()))?;
    // The template writes any BOS itself.
    tok.encode(&text).map_err(tok_err("messages"))
}

/// The body's extra template variables: `chat_template_kwargs` (an object) and
/// `reasoning_effort` (`low`, `medium` or `high`; it wins over a kwarg of its name).
pub fn template_kwargs(b: &Body) -> Result<Vec<(String, Value)>, ApiError> {
    let mut out: Vec<(String, Value)> = match &b.chat_template_kwargs {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(m)) => m.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        Some(_) => return Err(ApiError::bad("chat_template_kwargs", "chat_template_kwargs must be an object")),
    };
    match &b.reasoning_effort {
        None | Some(Value::Null) => {}
        Some(Value::String(e)) if ["low", "medium", "high"].contains(&e.as_str()) => {
            out.push(("reasoning_effort".into(), Value::String(e.clone())));
        }
        Some(_) => return Err(ApiError::bad("reasoning_effort", "reasoning_effort must be low, medium or high")),
    }
    Ok(out)
}

/// A chat body without tools: its `messages` rendered and tokenized as the handler does
/// (a request with tools adds them there: tools.rs).
pub fn chat(tok: &Tokenizer, template: &ChatTemplate, b: &Body) -> Result<Vec<u32>, ApiError> {
    render_with(tok, template, &turns(messages(b)?)?, None, &template_kwargs(b)?)
}

/// `prompt`: a string, a list of one string, or token ids; an empty one is `bos`.
pub fn completion(tok: &Tokenizer, bos: Option<u32>, b: &Body) -> Result<Vec<u32>, ApiError> {
    let bad = || ApiError::bad("prompt", "prompt must be a string, a list of one string, or a list of token ids");
    let mut prompt = match &b.prompt {
        Some(Value::String(s)) => tok.encode_with_special(s).map_err(tok_err("prompt"))?,
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {
            tok.encode_with_special(a[0].as_str().unwrap_or_default()).map_err(tok_err("prompt"))?
        }
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_u64().and_then(|t| u32::try_from(t).ok()).ok_or_else(bad))
            .collect::<Result<_, _>>()?,
        _ => return Err(bad()),
    };
    if prompt.is_empty() {
        // An empty prompt starts from BOS, as the command-line tools do.
        prompt.extend(bos);
    }
    Ok(prompt)
}
