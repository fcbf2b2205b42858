//! `POST /v1/completions`: a prompt (text or token ids) into the request plan;
//! generate.rs answers it.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use tokio::time::Instant;

use crate::api::{self, ApiError};
use crate::generate;
use crate::http::{self, St};
use crate::prompt;
use crate::render;
use crate::state::AppState;

/// POST /v1/completions.
pub(crate) async fn completions(State(st): St, headers: HeaderMap, body: Body) -> Response {
    let r = completions_inner(&st, &headers, body).await;
    http::counted(&st, "/v1/completions", r)
}

async fn completions_inner(st: &Arc<AppState>, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let deadline = Instant::now() + st.limits.request_timeout;
    let b: api::Body = http::read_json(st, headers, body).await?;
    http::check_model(st, &b.model)?;
    let prompt = prompt::completion(&st.tok, st.bos, &b)?;
    let max = render::default_max(st, false, prompt.len());
    let plan = b.plan(prompt, false, st.engine.info().max_context, max)?;
    generate::generate(st, plan, false, deadline).await
}
