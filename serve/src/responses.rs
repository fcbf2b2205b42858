//! OpenAI's Responses API: `POST /v1/responses` and `GET /v1/responses/{id}`
//! (docs/serving.md, "OpenAI Responses API").
//!
//! A Responses body is translated into the chat body it means (responses/request.rs) and
//! planned as a chat is (render.rs), so the engine gets the very request the
//! equivalent chat completion gives it: same prompt tokens, sampling, seed and grammar,
//! hence the same tokens. Only the answer's shape differs: output items (`reasoning` from
//! the reasoning split, `message` with `output_text`, `function_call` from the tool call
//! parser), `status` / `incomplete_details`, Responses' usage and its SSE events
//! (responses/stream.rs, which builds the JSON answer too, so the two cannot disagree).
//!
//! Finished answers are kept (unless `store: false`) in a bounded [`Store`] for
//! `previous_response_id`: the follow-up's turns are the chain's input items and outputs,
//! then its own input.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::time::Instant;

use crate::api::ApiError;
use crate::http::{self, St};
use crate::render;
use crate::state::AppState;
use crate::submit;

mod answer;
mod request;
mod stream;

use crate::api::new_id;
use answer::Answer;

pub use crate::response_store::{Store, STORE_CAPACITY};
pub use request::{translate, Translated};

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
    let plan = render::chat(st, &t.body, bytes)?;
    let submit::Submitted { events: merged, fingerprint, .. } = submit::submit(st, &plan).await?;
    let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let a = Answer {
        st: Arc::clone(st),
        fingerprint,
        id: new_id("resp"),
        created,
        tools: plan.tools,
        think: plan.think,
        t,
    };
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
