//! `POST /v1/chat/completions`: a chat body planned by render.rs (messages through the
//! chat template, with tools when the request has them); generate.rs answers it.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use tokio::time::Instant;

use crate::api::{self, ApiError};
use crate::generate;
use crate::http::{self, St};
use crate::render;
use crate::state::AppState;

/// POST /v1/chat/completions.
pub(crate) async fn chat(State(st): St, headers: HeaderMap, body: Body) -> Response {
    let r = chat_inner(&st, &headers, body).await;
    http::counted(&st, "/v1/chat/completions", r)
}

async fn chat_inner(st: &Arc<AppState>, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let deadline = Instant::now() + st.limits.request_timeout;
    let bytes = http::read_bytes(st, headers, body).await?;
    let b: api::Body = http::parse_json(&bytes)?;
    http::check_model(st, &b.model)?;
    let plan = render::chat(st, &b, bytes)?;
    generate::generate(st, plan, true, deadline).await
}
