//! What every endpoint shares: reading a body within the size and time limits,
//! OpenAI's refusals for a wrong model and a late answer, and the request counter.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::api::ApiError;
use crate::metrics::Status;
use crate::state::AppState;

/// The state extractor every handler takes.
pub(crate) type St = State<Arc<AppState>>;

/// Count the answer in the metrics.
pub(crate) fn counted(st: &AppState, endpoint: &str, r: Result<Response, ApiError>) -> Response {
    let r = r.unwrap_or_else(IntoResponse::into_response);
    let code = r.status().as_u16();
    st.metrics.requests.get_or_create(&Status { endpoint: endpoint.into(), code }).inc();
    r
}

/// The body as JSON of type `T`, within the size and time limits.
pub(crate) async fn read_json<T: serde::de::DeserializeOwned>(
    st: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    parse_json(&read_bytes(st, headers, body).await?)
}

/// The bytes as JSON of type `T`; 400 `invalid_json` when they are not.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| ApiError {
        code: Some("invalid_json"),
        param: None,
        ..ApiError::bad("", format!("the body is not a valid request: {e}"))
    })
}

/// The body's bytes, within the size and time limits.
pub(crate) async fn read_bytes(st: &AppState, headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    let too_big = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            "request_too_large",
            format!("the request body exceeds {} bytes", st.max_body),
        )
    };
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    if declared.is_some_and(|n: usize| n > st.max_body) {
        return Err(too_big());
    }
    let bytes = match tokio::time::timeout(st.limits.body_timeout, axum::body::to_bytes(body, st.max_body)).await {
        Ok(r) => r.map_err(|_| too_big())?,
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "invalid_request_error",
                "request_timeout",
                format!("the request body did not arrive within {} s", st.limits.body_timeout.as_secs_f64()),
            ))
        }
    };
    Ok(bytes)
}

/// Refuse a `model` this server does not serve (404, as OpenAI).
pub(crate) fn check_model(st: &AppState, model: &Option<String>) -> Result<(), ApiError> {
    match model {
        Some(m) if *m != st.model_id && !st.loras.has(m) => Err(ApiError {
            param: Some("model".into()),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                "model_not_found",
                format!("the model {m:?} does not exist; this server serves {:?}", st.model_id),
            )
        }),
        _ => Ok(()),
    }
}

/// A tokenizer failure as a 400 on `param`.
pub(crate) fn tok_err(param: &str) -> impl Fn(tl_core::TokenizerError) -> ApiError + '_ {
    move |e| ApiError::bad(param, e.to_string())
}

/// The answer to a request past `--request-timeout`.
pub(crate) fn timed_out(st: &AppState) -> ApiError {
    ApiError::new(
        StatusCode::GATEWAY_TIMEOUT,
        "server_error",
        "timeout",
        format!("the request took longer than {} s", st.limits.request_timeout.as_secs_f64()),
    )
}

/// Anything else: OpenAI's error body with 404.
pub(crate) async fn not_found() -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", "not_found", "no such endpoint").into_response()
}
