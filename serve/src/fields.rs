//! Optional fields of a JSON request body, read with a 400 that names the field and what
//! it held (the Messages and Responses translations both read their bodies this way).

use serde_json::{Map, Value};

use crate::api::ApiError;

/// The kind of a JSON value, for messages.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// `o[key]`, absent when missing or null.
pub(crate) fn opt<'a>(o: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    o.get(key).filter(|v| !v.is_null())
}

/// `o[key]` as a number, if present.
pub(crate) fn opt_f64(o: &Map<String, Value>, key: &str) -> Result<Option<f64>, ApiError> {
    match opt(o, key) {
        None => Ok(None),
        Some(v) => {
            v.as_f64().map(Some).ok_or_else(|| ApiError::bad(key, format!("{key} must be a number, not {}", kind(v))))
        }
    }
}

/// `o[key]` as an integer, if present.
pub(crate) fn opt_i64(o: &Map<String, Value>, key: &str) -> Result<Option<i64>, ApiError> {
    match opt(o, key) {
        None => Ok(None),
        Some(v) => {
            v.as_i64().map(Some).ok_or_else(|| ApiError::bad(key, format!("{key} must be an integer, not {}", kind(v))))
        }
    }
}

/// `o[key]` as a boolean, if present.
pub(crate) fn opt_bool(o: &Map<String, Value>, key: &str) -> Result<Option<bool>, ApiError> {
    match opt(o, key) {
        None => Ok(None),
        Some(v) => {
            v.as_bool().map(Some).ok_or_else(|| ApiError::bad(key, format!("{key} must be a boolean, not {}", kind(v))))
        }
    }
}
