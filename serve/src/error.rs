//! OpenAI's error body, and how engine refusals map onto it. A leaf: every module may
//! import it without making a circle.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tl_engine::EngineError;

/// An error answered with OpenAI's body `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Human-readable message.
    pub message: String,
    /// OpenAI's error type.
    pub kind: &'static str,
    /// The request field at fault.
    pub param: Option<String>,
    /// A machine-readable code.
    pub code: Option<&'static str>,
    /// Seconds for `Retry-After` (queue full, shutting down).
    pub retry_after: Option<u32>,
}

impl ApiError {
    /// 400 on `param`.
    pub fn bad(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param.to_string()),
            code: Some("invalid_value"),
            retry_after: None,
        }
    }

    /// Any status, no param.
    pub fn new(status: StatusCode, kind: &'static str, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into(), kind, param: None, code: Some(code), retry_after: None }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        let busy = |code, msg: String| ApiError {
            retry_after: Some(1),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", code, msg)
        };
        match e {
            EngineError::QueueFull { .. } => busy("overloaded", e.to_string()),
            EngineError::ShuttingDown => busy("shutting_down", e.to_string()),
            EngineError::BadRequest { field, .. } => ApiError::bad(field, e.to_string()),
            EngineError::PoolTooSmall { .. } => ApiError::bad("max_tokens", e.to_string()),
            EngineError::Internal(_) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "internal_error", e.to_string())
            }
        }
    }
}
