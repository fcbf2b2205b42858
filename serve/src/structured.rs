//! Structured outputs: `response_format` into an engine [`Grammar`], and `logit_bias` into
//! step 3a's bias list (docs/serving.md, "Structured outputs").
//!
//! The grammar itself is compiled by the engine at submit, so a schema llguidance refuses
//! comes back as a 400 on `response_format` with llguidance's message.

use serde_json::{json, Value};
use tl_engine::{Grammar, GrammarSpec};

use crate::error::ApiError;

const FIELD: &str = "response_format";

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::bad(FIELD, message)
}

/// The schema `json_object` (and a `json_schema` without a schema) means: any JSON object.
fn any_object() -> Value {
    json!({"type": "object"})
}

/// OpenAI's rule for `json_schema.name`: `[a-zA-Z0-9_-]`, 1 to 64 characters.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `response_format`: absent, null or `{"type": "text"}` is no constraint;
/// `{"type": "json_object"}` any JSON object (llama.cpp's optional `schema` is read);
/// `{"type": "json_schema", "json_schema": {name, description?, schema?, strict?}}` the
/// schema. Every other shape is a 400 naming `response_format`.
pub fn response_format(v: Option<&Value>) -> Result<Option<Grammar>, ApiError> {
    let obj = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(o)) => o,
        Some(_) => return Err(bad("response_format must be an object such as {\"type\": \"json_object\"}")),
    };
    let schema = match obj.get("type").and_then(Value::as_str) {
        Some("text") => return Ok(None),
        Some("json_object") => match obj.get("schema") {
            None | Some(Value::Null) => any_object(),
            Some(s) => s.clone(),
        },
        Some("json_schema") => {
            let Some(js) = obj.get("json_schema").and_then(Value::as_object) else {
                return Err(bad("response_format of type json_schema needs a json_schema object"));
            };
            match js.get("name") {
                Some(Value::String(n)) if valid_name(n) => {}
                Some(Value::String(n)) => {
                    return Err(bad(format!(
                        "json_schema.name {n:?} must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -"
                    )))
                }
                _ => return Err(bad("json_schema.name is required (a string)")),
            }
            if !matches!(js.get("strict"), None | Some(Value::Null) | Some(Value::Bool(_))) {
                return Err(bad("json_schema.strict must be a boolean"));
            }
            if !matches!(js.get("description"), None | Some(Value::Null) | Some(Value::String(_))) {
                return Err(bad("json_schema.description must be a string"));
            }
            match js.get("schema") {
                None | Some(Value::Null) => any_object(),
                Some(s @ (Value::Object(_) | Value::Bool(_))) => s.clone(),
                Some(_) => return Err(bad("json_schema.schema must be a JSON schema (an object)")),
            }
        }
        Some(t) => {
            return Err(bad(format!(
                "response_format type {t:?} is not one of \"text\", \"json_object\", \"json_schema\""
            )))
        }
        None => return Err(bad("response_format needs a type: \"text\", \"json_object\" or \"json_schema\"")),
    };
    Ok(Some(Grammar { spec: GrammarSpec::JsonSchema(schema), field: FIELD }))
}

/// `logit_bias`: `{"<token id>": bias, ...}` with biases in [-100, 100] (-100 bans the
/// token), at most `vocab` entries; ids are checked against the vocabulary by the engine.
pub fn logit_bias(v: Option<&Value>) -> Result<Vec<(u32, f64)>, ApiError> {
    let obj = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(o)) => o,
        Some(_) => return Err(ApiError::bad("logit_bias", "logit_bias must be an object of token id -> bias")),
    };
    let mut out = Vec::with_capacity(obj.len());
    for (k, b) in obj {
        let id: u32 =
            k.parse().map_err(|_| ApiError::bad("logit_bias", format!("logit_bias key {k:?} is not a token id")))?;
        let b = b
            .as_f64()
            .filter(|b| (-100.0..=100.0).contains(b))
            .ok_or_else(|| ApiError::bad("logit_bias", format!("logit_bias[{k}] must be a number in [-100, 100]")))?;
        out.push((id, b));
    }
    // JSON object order is the client's; the engine's step 3a does not depend on it, but a
    // fixed order keeps the request's debug form stable.
    out.sort_by_key(|e| e.0);
    Ok(out)
}
