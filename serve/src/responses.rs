//! OpenAI's Responses API: `POST /v1/responses` and `GET /v1/responses/{id}`
//! (docs/serving.md, "OpenAI Responses API").
//!
//! A Responses body is translated into the chat body it means (responses/request.rs) and
//! planned by chat.rs's own [`chat::prepare`], so the engine gets the very request the
//! equivalent chat completion gives it: same prompt tokens, sampling, seed and grammar,
//! hence the same tokens. Only the answer's shape differs: output items (`reasoning` from
//! the reasoning split, `message` with `output_text`, `function_call` from the tool call
//! parser), `status` / `incomplete_details`, Responses' usage and its SSE events
//! (responses/stream.rs, which builds the JSON answer too, so the two cannot disagree).
//!
//! Finished answers are kept (unless `store: false`) in a bounded [`Store`] for
//! `previous_response_id`: the follow-up's turns are the chain's input items and outputs,
//! then its own input.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use tokio::time::Instant;

use crate::api::{self, ApiError};
use crate::chat;
use crate::generate;
use crate::http::{self, St};
use crate::state::AppState;
use crate::tools;

mod request;
mod stream;

pub use request::{translate, Translated};

/// How many finished responses the store keeps (the least recently used goes first).
pub const STORE_CAPACITY: usize = 256;

/// One stored response: the conversation as input items (its output included) and the
/// answer as sent.
struct Stored {
    items: Arc<Vec<Value>>,
    response: Value,
}

/// Finished responses by id, at most [`STORE_CAPACITY`], least recently used evicted.
/// In memory only: a restart forgets them (a follow-up then gets a 404).
#[derive(Default)]
pub struct Store {
    inner: Mutex<(HashMap<String, Stored>, VecDeque<String>)>,
}

impl Store {
    fn lock(&self) -> std::sync::MutexGuard<'_, (HashMap<String, Stored>, VecDeque<String>)> {
        // A panic while holding the lock leaves consistent data (each edit is one call).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn touch(order: &mut VecDeque<String>, id: &str) {
        if let Some(at) = order.iter().position(|k| k == id) {
            order.remove(at);
        }
        order.push_back(id.to_string());
    }

    fn put(&self, id: String, items: Vec<Value>, response: Value) {
        let mut g = self.lock();
        let (map, order) = &mut *g;
        Self::touch(order, &id);
        map.insert(id, Stored { items: Arc::new(items), response });
        while map.len() > STORE_CAPACITY {
            let Some(old) = order.pop_front() else { break };
            map.remove(&old);
        }
    }

    fn items(&self, id: &str) -> Option<Arc<Vec<Value>>> {
        let mut g = self.lock();
        let (map, order) = &mut *g;
        let items = map.get(id).map(|s| Arc::clone(&s.items))?;
        Self::touch(order, id);
        Some(items)
    }

    fn response(&self, id: &str) -> Option<Value> {
        self.lock().0.get(id).map(|s| s.response.clone())
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError {
        param: Some("previous_response_id".into()),
        ..ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "previous_response_not_found",
            format!("Previous response with id '{id}' not found (tl keeps the last {STORE_CAPACITY}, in memory)"),
        )
    }
}

/// POST /v1/responses.
pub(crate) async fn create(State(st): St, headers: HeaderMap, body: Body) -> Response {
    let r = inner(&st, &headers, body).await;
    http::counted(&st, "/v1/responses", r)
}

/// GET /v1/responses/{id}: a stored answer.
pub(crate) async fn get(State(st): St, Path(id): Path<String>) -> Response {
    match st.responses.response(&id) {
        Some(v) => axum::Json(v).into_response(),
        None => ApiError { param: None, ..not_found(&id) }.into_response(),
    }
}

/// Another method on a Responses route: OpenAI's error shape with a 405, not an empty
/// body (DELETE and cancel are not served: answers finish before they are stored).
pub(crate) async fn elsewhere(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let allowed = if uri.path() == "/v1/responses" { "POST" } else { "GET" };
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        "method_not_allowed",
        format!("{method} is not allowed on {}: use {allowed}", uri.path()),
    )
    .into_response()
}

/// One answer's fixed parts.
pub(crate) struct Answer {
    st: Arc<AppState>,
    id: String,
    created: u64,
    tools: Option<tools::Active>,
    think: Option<bool>,
    t: Translated,
}

async fn inner(st: &Arc<AppState>, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let deadline = Instant::now() + st.limits.request_timeout;
    let bytes = http::read_bytes(st, headers, body).await?;
    // The chain first (a cheap parse), so the body is translated once with its history.
    let previous = previous_id(&bytes);
    let history = match &previous {
        Some(id) => st.responses.items(id).ok_or_else(|| not_found(id))?,
        None => Arc::new(Vec::new()),
    };
    let t = translate(&bytes, &history)?;
    http::check_model(st, &t.body.model)?;
    let p = chat::prepare(st, &t.body, bytes)?;
    let merged = generate::merge(st.engine.submit_all(p.plan.reqs)?);
    let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let a = Answer { st: Arc::clone(st), id: new_id("resp"), created, tools: p.tools, think: p.think, t };
    if a.t.stream {
        return Ok(stream::sse(a, merged, deadline));
    }
    let v = stream::collect(a, merged, deadline).await?;
    Ok((StatusCode::OK, axum::Json(v)).into_response())
}

/// `previous_response_id` when the body has one as a string (a body that is not JSON, or
/// has it mistyped, is refused by [`translate`]).
fn previous_id(bytes: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(bytes).ok()?;
    v.get("previous_response_id")?.as_str().map(String::from)
}

/// A fresh id with OpenAI's prefix (`resp`, `msg`, `fc`, `rs`).
pub(crate) fn new_id(prefix: &str) -> String {
    format!("{prefix}_{:016x}{:016x}", api::random_seed(), api::random_seed())
}

impl Answer {
    /// The response object around `output`. `finish`: `None` while it runs (status
    /// `in_progress`); `Some(cut)` once done, `cut` when `max_output_tokens` ended it.
    fn response(&self, output: &[Value], finish: Option<bool>, usage: Option<&tl_engine::Usage>) -> Value {
        let status = match finish {
            None => "in_progress",
            Some(true) => "incomplete",
            Some(false) => "completed",
        };
        let mut r = Map::new();
        r.insert("id".into(), json!(self.id));
        r.insert("object".into(), json!("response"));
        r.insert("created_at".into(), json!(self.created));
        r.insert("status".into(), json!(status));
        r.insert("model".into(), json!(self.st.model_id));
        r.insert("output".into(), json!(output));
        r.insert("error".into(), Value::Null);
        let incomplete = if finish == Some(true) { json!({"reason": "max_output_tokens"}) } else { Value::Null };
        r.insert("incomplete_details".into(), incomplete);
        for k in ["instructions", "max_output_tokens", "temperature", "top_p", "metadata"] {
            r.insert(k.into(), self.t.echo.get(k).cloned().unwrap_or(Value::Null));
        }
        r.insert("tools".into(), self.t.echo.get("tools").cloned().unwrap_or(json!([])));
        r.insert("tool_choice".into(), self.t.echo.get("tool_choice").cloned().unwrap_or(json!("auto")));
        r.insert("parallel_tool_calls".into(), self.t.echo.get("parallel_tool_calls").cloned().unwrap_or(json!(true)));
        r.insert("text".into(), self.t.echo.get("text").cloned().unwrap_or(json!({"format": {"type": "text"}})));
        r.insert("previous_response_id".into(), json!(self.t.previous));
        r.insert("store".into(), json!(self.t.store));
        r.insert("usage".into(), usage.map_or(Value::Null, Self::usage));
        // tl's extension (not OpenAI's): what `verify --replay` checks.
        r.insert("system_fingerprint".into(), json!(self.st.fingerprint));
        Value::Object(r)
    }

    /// `usage`: OpenAI counts cached prompt tokens inside `input_tokens`. Reasoning tokens
    /// are not counted apart (the engine counts tokens, the split reads text).
    fn usage(u: &tl_engine::Usage) -> Value {
        json!({
            "input_tokens": u.prompt_tokens,
            "input_tokens_details": {"cached_tokens": u.cached_tokens.min(u.prompt_tokens), "cache_write_tokens": 0},
            "output_tokens": u.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.prompt_tokens + u.completion_tokens,
        })
    }

    /// Keep a finished answer for `previous_response_id` (unless `store: false`): the
    /// conversation so far, then the output items as the input items that mean them.
    fn keep(&mut self, output: &[Value], response: &Value) {
        if !self.t.store {
            return;
        }
        let mut items = std::mem::take(&mut self.t.items);
        items.extend(output.iter().filter(|o| o["type"] != "reasoning").cloned());
        self.st.responses.put(self.id.clone(), items, response.clone());
    }
}
