//! `--api-key`: every `/v1` route (and `/tokenize`, `/detokenize`) needs `Authorization: Bearer <key>` or
//! `x-api-key: <key>` (Anthropic's header), compared in constant time; otherwise 401 with OpenAI's error body
//! (Anthropic's on `/v1/messages`).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

/// Whether `given` equals `key`, in time that depends only on `key`'s length (every byte
/// of the key is compared whatever `given` holds, and the result is folded without an
/// early exit).
pub(crate) fn same_key(given: &[u8], key: &[u8]) -> bool {
    let mut diff = (given.len() != key.len()) as u8;
    for (i, &k) in key.iter().enumerate() {
        let g = given.get(i).copied().unwrap_or(!k);
        diff |= std::hint::black_box(g ^ k);
    }
    std::hint::black_box(diff) == 0
}

pub(crate) async fn require_key(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    match refusal(st.api_key.as_deref(), &req) {
        None => next.run(req).await,
        Some(r) => {
            st.metrics.requests.get_or_create(&crate::metrics::Status { endpoint: "auth".into(), code: 401 }).inc();
            r
        }
    }
}

/// The 401 answer for a request that needs `key` and does not carry it (`None`: let it
/// through). Shared with the multi-model front (multi.rs), whose own routes need the key too.
pub(crate) fn refusal(key: Option<&[u8]>, req: &Request) -> Option<Response> {
    let key = key?;
    let path = req.uri().path();
    if !(path.starts_with("/v1")
        || path.starts_with("/models/")
        || path == "/rerank"
        || path == "/score"
        || path == "/tokenize"
        || path == "/detokenize")
    {
        return None;
    }
    let given = req.headers().get(header::AUTHORIZATION).map(HeaderValue::as_bytes);
    let bearer = given.and_then(|v| {
        let (scheme, rest) = v.split_at(v.iter().position(|&b| b == b' ').unwrap_or(v.len()));
        scheme.eq_ignore_ascii_case(b"bearer").then(|| rest.trim_ascii())
    });
    // Anthropic's clients send the key as `x-api-key`; either header may carry it.
    let x_api_key = req.headers().get("x-api-key").map(|v| v.as_bytes().trim_ascii());
    let keys = [bearer, x_api_key];
    if keys.iter().flatten().any(|t| same_key(t, key)) {
        return None;
    }
    let message = match keys {
        [None, None] => {
            "You didn't provide an API key. Send it as an HTTP header: Authorization: Bearer YOUR_KEY (or x-api-key: \
             YOUR_KEY)."
        }
        _ => "Incorrect API key provided.",
    };
    let err = ApiError::new(StatusCode::UNAUTHORIZED, "invalid_request_error", "invalid_api_key", message);
    let mut r =
        if path.starts_with("/v1/messages") { crate::messages::error_response(err) } else { err.into_response() };
    r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    Some(r)
}
