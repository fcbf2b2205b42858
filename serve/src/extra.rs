//! The smaller endpoints clients expect beside the OpenAI ones: `/tokenize` and
//! `/detokenize` in llama-server's and vLLM's shapes, and `GET /v1/models/{id}`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use tl_core::Message;

use crate::api::{self, ApiError, ChatMessage};
use crate::http::{check_model, counted, read_json, tok_err, St};
use crate::state::AppState;

/// A `/tokenize` body: llama-server's `content` (+ `add_special`, `with_pieces`) or vLLM's
/// `prompt` / `messages` (+ `add_special_tokens`, `add_generation_prompt`,
/// `return_token_strs`).
#[derive(Deserialize, Debug, Default)]
pub struct TokenizeBody {
    /// Must name the served model (vLLM).
    pub model: Option<String>,
    /// llama-server: the text.
    pub content: Option<String>,
    /// llama-server: add the tokenizer's special tokens (BOS); default false.
    pub add_special: Option<bool>,
    /// llama-server: return `{id, piece}` pairs.
    #[serde(default)]
    pub with_pieces: bool,
    /// vLLM: the text.
    pub prompt: Option<String>,
    /// vLLM: chat messages, rendered through the model's chat template.
    pub messages: Option<Vec<ChatMessage>>,
    /// vLLM: add the tokenizer's special tokens; default true for `prompt`.
    pub add_special_tokens: Option<bool>,
    /// vLLM: end the rendered chat with the assistant's opening; default true.
    pub add_generation_prompt: Option<bool>,
    /// vLLM: also return each token's text.
    #[serde(default)]
    pub return_token_strs: bool,
}

/// A `/detokenize` body: `tokens` (both servers).
#[derive(Deserialize, Debug, Default)]
pub struct DetokenizeBody {
    /// Must name the served model (vLLM).
    pub model: Option<String>,
    /// The ids.
    pub tokens: Option<Vec<Value>>,
}

fn encode(st: &AppState, text: &str, special: bool, param: &str) -> Result<Vec<u32>, ApiError> {
    if special {
        st.tok.encode_with_special(text).map_err(tok_err(param))
    } else {
        st.tok.encode(text).map_err(tok_err(param))
    }
}

/// POST /tokenize.
pub(crate) async fn tokenize(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let r = tokenize_inner(&st, &headers, body).await;
    counted(&st, "/tokenize", r)
}

async fn tokenize_inner(st: &AppState, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let b: TokenizeBody = read_json(st, headers, body).await?;
    check_model(st, &b.model)?;
    if let Some(content) = &b.content {
        // llama-server's shape.
        let ids = encode(st, content, b.add_special.unwrap_or(false), "content")?;
        let tokens: Vec<Value> = if b.with_pieces {
            ids.iter().map(|&id| json!({"id": id, "piece": st.token_text(id).0})).collect()
        } else {
            ids.iter().map(|&id| json!(id)).collect()
        };
        return Ok(axum::Json(json!({"tokens": tokens})).into_response());
    }
    let ids = match (&b.prompt, &b.messages) {
        (Some(p), None) => encode(st, p, b.add_special_tokens.unwrap_or(true), "prompt")?,
        (None, Some(msgs)) => {
            let turns: Vec<Message> = msgs
                .iter()
                .map(|m| api::content_text(&m.content).map(|c| Message::new(m.role.as_str(), c)))
                .collect::<Result<_, _>>()?;
            let text = st
                .template
                .render(&turns, b.add_generation_prompt.unwrap_or(true))
                .map_err(|e| ApiError::bad("messages", e.to_string()))?;
            // The template writes any BOS itself, as for a chat request.
            encode(st, &text, b.add_special_tokens.unwrap_or(false), "messages")?
        }
        _ => return Err(ApiError::bad("prompt", "give exactly one of content, prompt or messages")),
    };
    let mut out = json!({"count": ids.len(), "max_model_len": st.engine.info().max_context, "tokens": ids});
    if b.return_token_strs {
        out["token_strs"] = ids.iter().map(|&id| st.token_text(id).0).collect();
    }
    Ok(axum::Json(out).into_response())
}

/// POST /detokenize: `{"content"}` (llama-server) and `{"prompt"}` (vLLM), the same text.
pub(crate) async fn detokenize(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let r = detokenize_inner(&st, &headers, body).await;
    counted(&st, "/detokenize", r)
}

async fn detokenize_inner(st: &AppState, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let b: DetokenizeBody = read_json(st, headers, body).await?;
    check_model(st, &b.model)?;
    let vocab = st.engine.info().vocab_size;
    let ids: Vec<u32> = b
        .tokens
        .ok_or_else(|| ApiError::bad("tokens", "tokens must be a list of token ids"))?
        .iter()
        .map(|v| {
            // llama-server also accepts [id, piece] pairs, as /tokenize with_pieces gives.
            let id = v.as_u64().or_else(|| v.get("id").and_then(Value::as_u64));
            id.filter(|&i| (i as usize) < vocab)
                .map(|i| i as u32)
                .ok_or_else(|| ApiError::bad("tokens", format!("{v} is not a token id below {vocab}")))
        })
        .collect::<Result<_, _>>()?;
    let text = st.tok.decode(&ids).map_err(tok_err("tokens"))?;
    Ok(axum::Json(json!({"content": text, "prompt": text})).into_response())
}

/// GET /v1/models/{id}: the served model, or OpenAI's 404.
pub(crate) async fn model(State(st): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    let adapter = st.loras.models(&st.model_id, st.created).into_iter().find(|m| m["id"] == id.as_str());
    let r = if id == st.model_id {
        Ok(axum::Json(json!({"id": st.model_id, "object": "model", "created": st.created, "owned_by": "tl"}))
            .into_response())
    } else if let Some(m) = adapter {
        Ok(axum::Json(m).into_response())
    } else {
        Err(ApiError {
            param: Some("model".into()),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                "model_not_found",
                format!("The model '{id}' does not exist"),
            )
        })
    };
    counted(&st, "/v1/models/{id}", r)
}

/// GET /v1/models.
pub(crate) async fn models(State(st): St) -> Response {
    let mut data = vec![json!({"id": st.model_id, "object": "model", "created": st.created, "owned_by": "tl"})];
    data.extend(st.loras.models(&st.model_id, st.created));
    let body = json!({"object": "list", "data": data});
    counted(&st, "/v1/models", Ok(axum::Json(body).into_response()))
}
