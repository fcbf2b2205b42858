//! Anthropic's Messages API: `POST /v1/messages` and `POST /v1/messages/count_tokens`
//! (docs/serving.md, "Anthropic Messages API").
//!
//! A Messages body is translated into the chat body it means (messages/request.rs) and
//! planned as a chat is (render.rs), so the engine gets the very request the
//! equivalent chat completion gives it: same prompt tokens, sampling, seed and grammar,
//! hence the same tokens. Only the answer's shape differs: content blocks (`thinking` from
//! the reasoning split, `text`, `tool_use` from the tool call parser), Anthropic's
//! `stop_reason`s and usage, its SSE event sequence (messages/stream.rs) and its error
//! body `{"type": "error", "error": {"type", "message"}}`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tl_engine::{Event, FinishReason, Usage};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::answer::Choice;
use crate::api::{self, ApiError};
use crate::http::{self, St};
use crate::reasoning::Split;
use crate::render;
use crate::state::AppState;
use crate::submit;
use crate::tools;

mod request;
mod stream;

pub use request::{translate, Translated, MAX_STOP};

/// Anthropic's error type for an HTTP status.
pub fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        408 | 504 => "timeout_error",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
}

/// Anthropic's error body for `e`.
pub fn error_body(e: &ApiError) -> Value {
    json!({"type": "error", "error": {"type": error_type(e.status), "message": e.message}})
}

/// `e` as Anthropic's error answer (its status, `Retry-After` kept).
pub(crate) fn error_response(e: ApiError) -> Response {
    let mut r = (e.status, axum::Json(error_body(&e))).into_response();
    if let Some(s) = e.retry_after {
        r.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from(s));
    }
    r
}

/// Another method on a Messages route, or an unknown path under `/v1/messages/`:
/// Anthropic's error shape (405 or 404) rather than OpenAI's.
pub(crate) async fn elsewhere(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let known = ["/v1/messages", "/v1/messages/count_tokens"].contains(&uri.path());
    let e = if known {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method_not_allowed",
            format!("{method} is not allowed on {}: use POST", uri.path()),
        )
    } else {
        ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", "not_found", "no such endpoint")
    };
    error_response(e)
}

/// POST /v1/messages.
pub(crate) async fn messages(State(st): St, headers: HeaderMap, body: Body) -> Response {
    let r = inner(&st, &headers, body).await.unwrap_or_else(error_response);
    http::counted(&st, "/v1/messages", Ok(r))
}

/// POST /v1/messages/count_tokens: `{"input_tokens": N}`, the prompt tokens the same body
/// sent to /v1/messages would have (tools included).
pub(crate) async fn count_tokens(State(st): St, headers: HeaderMap, body: Body) -> Response {
    let r = async {
        let bytes = http::read_bytes(&st, &headers, body).await?;
        let t = translate(&bytes, true)?;
        http::check_model(&st, &t.body.model)?;
        let (prompt, _) = render::render(&st, &t.body)?;
        Ok::<_, ApiError>(axum::Json(json!({"input_tokens": prompt.len()})).into_response())
    }
    .await;
    http::counted(&st, "/v1/messages/count_tokens", Ok(r.unwrap_or_else(error_response)))
}

/// One answer's fixed parts.
pub(crate) struct Answer {
    st: Arc<AppState>,
    /// `system_fingerprint` (the adapter's when the request ran under one).
    fingerprint: String,
    id: String,
    tools: Option<tools::Active>,
    think: Option<bool>,
    stops: Vec<String>,
    prompt_len: usize,
}

async fn inner(st: &Arc<AppState>, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let deadline = Instant::now() + st.limits.request_timeout;
    let bytes = http::read_bytes(st, headers, body).await?;
    let t = translate(&bytes, false)?;
    http::check_model(st, &t.body.model)?;
    let stops = match &t.body.stop {
        Some(api::Stop::Many(v)) => v.clone(),
        Some(api::Stop::One(s)) => vec![s.clone()],
        None => Vec::new(),
    };
    let plan = render::chat(st, &t.body, bytes)?;
    let submit::Submitted { events: merged, fingerprint, .. } = submit::submit(st, &plan).await?;
    let id = format!("msg_{:016x}{:08x}", api::random_seed(), api::random_seed() >> 32);
    let prompt_len = plan.base.prompt.len();
    let a = Answer { st: Arc::clone(st), fingerprint, id, tools: plan.tools, think: plan.think, stops, prompt_len };
    if t.stream {
        return Ok(stream::sse(a, merged, deadline));
    }
    a.collect(merged, deadline).await
}

impl Answer {
    /// The fields around `content`.
    fn message(&self, content: Value, stop: (Option<&str>, Option<String>), usage: Value) -> Value {
        json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.st.model_id,
            "content": content, "stop_reason": stop.0, "stop_sequence": stop.1, "usage": usage,
            // tl's extension (not Anthropic's): what `verify --replay` checks.
            "system_fingerprint": self.fingerprint,
        })
    }

    /// The split, when the answer's thinking is returned apart.
    fn choice(&self) -> Choice {
        Choice { split: self.think.map(Split::new), ..Choice::default() }
    }

    /// Why the answer ended: `max_tokens`; `tool_use` when it ended as calls; else
    /// `stop_sequence` (and which) when one of the request's appears in the output (the
    /// engine stops at the first; its text is not released), or `end_turn` (an
    /// end-of-sequence token, or a grammar that was complete).
    fn stop_reason(&self, finish: FinishReason, ids: &[u32], called: bool) -> (Option<&'static str>, Option<String>) {
        if finish == FinishReason::Length {
            return (Some("max_tokens"), None);
        }
        if called {
            return (Some("tool_use"), None);
        }
        // The engine's matching: over the output's bytes, the earliest occurrence.
        let bytes: Vec<u8> = ids.iter().flat_map(|&i| self.st.tok.decode_bytes(&[i]).unwrap_or_default()).collect();
        let text = String::from_utf8_lossy(&bytes);
        let hit = self
            .stops
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| text.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|&(at, _)| at);
        match hit {
            Some((_, s)) => (Some("stop_sequence"), Some(s.clone())),
            None => (Some("end_turn"), None),
        }
    }

    /// `usage`: Anthropic counts prompt tokens read from the cache apart (input_tokens +
    /// cache_read_input_tokens = the prompt).
    fn usage(u: &Usage) -> Value {
        let cached = u.cached_tokens.min(u.prompt_tokens);
        json!({
            "input_tokens": u.prompt_tokens - cached, "output_tokens": u.completion_tokens,
            "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0,
        })
    }

    /// A call's id in Anthropic's spelling (`toolu_` and the same 24 hex digits).
    fn tool_id(id: &str) -> String {
        format!("toolu_{}", id.strip_prefix("call_").unwrap_or(id))
    }

    /// The whole answer as one message.
    async fn collect(
        self,
        mut merged: mpsc::UnboundedReceiver<(usize, Event)>,
        deadline: Instant,
    ) -> Result<Response, ApiError> {
        let mut c = self.choice();
        let mut ids = Vec::new();
        let finish = loop {
            // Past the deadline `merged` is dropped on return, which cancels the sequence
            // (checked by hand as well: `timeout_at` polls a ready receiver first).
            if Instant::now() >= deadline {
                return Err(http::timed_out(&self.st));
            }
            let Ok(ev) = tokio::time::timeout_at(deadline, merged.recv()).await else {
                return Err(http::timed_out(&self.st));
            };
            match ev.map(|(_, e)| e) {
                Some(Event::Token { token, text }) => {
                    c.push_text(&text);
                    ids.push(token.id);
                }
                Some(Event::Done { finish, text, usage, .. }) => {
                    c.end_text(&text);
                    c.usage = usage;
                    break finish;
                }
                Some(Event::Error(e)) => return Err(e.into()),
                None => {
                    return Err(ApiError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "server_error",
                        "internal_error",
                        "engine gone",
                    ))
                }
            }
        };
        let mut content = Vec::new();
        if !c.reasoning.is_empty() {
            // No signature: tl's thinking is not signed (the field is there, empty, for
            // clients that read it).
            content.push(json!({"type": "thinking", "thinking": c.reasoning, "signature": ""}));
        }
        let (text, calls) = match &self.tools {
            Some(t) => {
                let (m, _) = t.answer(&self.fingerprint, 0, &c.text, Some(finish));
                (m["content"].as_str().unwrap_or_default().to_string(), m["tool_calls"].as_array().cloned())
            }
            None => (std::mem::take(&mut c.text), None),
        };
        if !text.is_empty() {
            content.push(json!({"type": "text", "text": text}));
        }
        let calls = calls.unwrap_or_default();
        for call in &calls {
            let args = call["function"]["arguments"].as_str().unwrap_or_default();
            let input: Value = serde_json::from_str(args).map_err(|e| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    "internal_error",
                    format!("a parsed tool call's arguments are not JSON ({e}): {args}"),
                )
            })?;
            let id = Self::tool_id(call["id"].as_str().unwrap_or_default());
            content.push(json!({"type": "tool_use", "id": id, "name": call["function"]["name"], "input": input}));
        }
        let stop = self.stop_reason(finish, &ids, !calls.is_empty());
        let body = self.message(Value::Array(content), stop, Self::usage(&c.usage));
        Ok((StatusCode::OK, axum::Json(body)).into_response())
    }
}
