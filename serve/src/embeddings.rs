//! `POST /v1/embeddings` in OpenAI's shape (docs/serving.md, "Embeddings and rerank").
//!
//! `input` is a string, a list of strings, a list of token ids, or a list of token-id
//! lists; each input is one engine embedding sequence (tl_engine's embed.rs), planned and
//! batched with generation in the same steps, pooled as the model's files (or
//! `--pooling`) say (pooling.rs). `encoding_format: "base64"` sends each vector as its
//! little-endian f32 bytes, as OpenAI does; `dimensions` keeps the first values and
//! normalises again (Matryoshka). An encoder model (BERT and kin) answers with its own
//! pooled vectors instead (encoder.rs). The answer carries tl's `system_fingerprint` too (for
//! `verify --replay`).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};
use tl_engine::Embedding;
use tokio::time::Instant;

use crate::api::ApiError;
use crate::encoder;
use crate::fields::{kind, opt, opt_bool};
use crate::http::{self, St};
use crate::plan::EmbedPlan;
use crate::state::AppState;
use crate::submit;

/// Most inputs in one request (OpenAI's bound).
pub const MAX_INPUTS: usize = 2048;

pub use crate::input::Input;

/// A checked `/v1/embeddings` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbedBody {
    /// Must name the served model when given.
    pub model: Option<String>,
    /// The inputs, in order (never empty, none empty).
    pub inputs: Vec<Input>,
    /// `encoding_format: "base64"`.
    pub base64: bool,
    /// `dimensions` (at least 1; the model's bound is the engine's check).
    pub dimensions: Option<usize>,
    /// `truncate`: an encoder cuts a text longer than its `max_seq_length` instead of
    /// refusing it (encoder.rs).
    pub truncate: bool,
}

/// The body as an object, or OpenAI's 400.
pub(crate) fn object(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match http::parse_json::<Value>(bytes)? {
        Value::Object(o) => Ok(o),
        v => Err(ApiError::bad("", format!("the body must be a JSON object, not {}", kind(&v)))),
    }
}

/// `o["model"]`: a string when present.
pub(crate) fn model(o: &Map<String, Value>) -> Result<Option<String>, ApiError> {
    match opt(o, "model") {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(ApiError::bad("model", format!("model must be a string, not {}", kind(v)))),
    }
}

/// A token id, or `None` when `v` is not one.
fn token(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|t| u32::try_from(t).ok())
}

/// Parse and check a `/v1/embeddings` body (no tokenizer needed: text stays text).
pub fn parse(bytes: &[u8]) -> Result<EmbedBody, ApiError> {
    let o = object(bytes)?;
    let model = model(&o)?;
    let bad = |m: String| ApiError::bad("input", m);
    let shape = "input must be a string, a list of strings, a list of token ids or a list of token-id lists";
    let inputs = match opt(&o, "input") {
        None => return Err(bad("input is required".into())),
        Some(Value::String(s)) => vec![Input::Text(s.clone())],
        Some(Value::Array(a)) if a.is_empty() => return Err(bad("input must not be an empty list".into())),
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {
            a.iter().map(|s| Input::Text(s.as_str().unwrap_or_default().to_string())).collect()
        }
        Some(Value::Array(a)) if a.iter().all(Value::is_number) => {
            let ids = a.iter().map(token).collect::<Option<Vec<_>>>();
            vec![Input::Tokens(ids.ok_or_else(|| bad("token ids must be integers in 0..2^32".into()))?)]
        }
        Some(Value::Array(a)) if a.iter().all(Value::is_array) => {
            let mut v = Vec::with_capacity(a.len());
            for (i, t) in a.iter().enumerate() {
                let ids = t.as_array().into_iter().flatten().map(token).collect::<Option<Vec<_>>>();
                v.push(Input::Tokens(
                    ids.ok_or_else(|| bad(format!("input[{i}] must be a list of token ids (integers in 0..2^32)")))?,
                ));
            }
            v
        }
        Some(v) => return Err(bad(format!("{shape}, not {}", kind(v)))),
    };
    if inputs.len() > MAX_INPUTS {
        return Err(bad(format!("{} inputs; at most {MAX_INPUTS} per request", inputs.len())));
    }
    for (i, x) in inputs.iter().enumerate() {
        let empty = match x {
            Input::Text(s) => s.is_empty(),
            Input::Tokens(t) => t.is_empty(),
        };
        if empty {
            return Err(bad(format!("input[{i}] is empty")));
        }
    }
    let base64 = match opt(&o, "encoding_format") {
        None => false,
        Some(Value::String(s)) if s == "float" => false,
        Some(Value::String(s)) if s == "base64" => true,
        Some(v) => {
            return Err(ApiError::bad(
                "encoding_format",
                format!("encoding_format must be \"float\" or \"base64\", not {v}"),
            ))
        }
    };
    let dimensions = match opt(&o, "dimensions") {
        None => None,
        Some(v) => match v.as_u64() {
            Some(k) if k >= 1 => Some(usize::try_from(k).unwrap_or(usize::MAX)),
            _ => return Err(ApiError::bad("dimensions", format!("dimensions must be a positive integer, not {v}"))),
        },
    };
    let truncate = opt_bool(&o, "truncate")?.unwrap_or(false);
    Ok(EmbedBody { model, inputs, base64, dimensions, truncate })
}

/// An input's token ids (text through the model's tokenizer, special tokens added).
pub(crate) fn tokens(st: &AppState, x: &Input, param: &str) -> Result<Vec<u32>, ApiError> {
    let ids = match x {
        Input::Text(s) => st.tok.encode_with_special(s).map_err(http::tok_err(param))?,
        Input::Tokens(t) => t.clone(),
    };
    if ids.is_empty() {
        return Err(ApiError::bad(param, "the input has no tokens"));
    }
    if let Some(ctx) = st.engine.info().max_context.filter(|&c| ids.len() > c) {
        return Err(ApiError::bad(param, format!("{} tokens exceed the model's context of {ctx}", ids.len())));
    }
    Ok(ids)
}

/// The model's pooling, or 501 when its files declare one tl does not implement.
fn pooling(st: &AppState) -> Result<tl_engine::Pooling, ApiError> {
    st.pooling.pooling.clone().map_err(|reason| {
        ApiError::new(StatusCode::NOT_IMPLEMENTED, "invalid_request_error", "not_implemented", reason)
    })
}

/// Embed `prompts` through the engine (one sequence each, batched with whatever runs),
/// pooled as the model says, waiting until `deadline`. `param` names the inputs' field.
pub(crate) async fn embed(
    st: &AppState,
    prompts: Vec<Vec<u32>>,
    dimensions: Option<usize>,
    deadline: Instant,
    param: &str,
) -> Result<Vec<Embedding>, ApiError> {
    submit::fits_queue(st, prompts.len(), param)?;
    let d = st.engine.info().hidden_size;
    if let Some(k) = dimensions.filter(|&k| k > d) {
        return Err(ApiError::bad("dimensions", format!("dimensions {k} exceeds the model's hidden size {d}")));
    }
    let pooling = pooling(st)?;
    let normalize = st.pooling.normalize;
    let rxs = submit::embed(st, EmbedPlan { prompts, pooling, normalize, dimensions })?;
    submit::answers(st, rxs, deadline).await
}

/// POST /v1/embeddings.
pub(crate) async fn embeddings(State(st): St, headers: HeaderMap, body: Body) -> Response {
    let r = inner(&st, &headers, body).await;
    http::counted(&st, "/v1/embeddings", r)
}

#[derive(Serialize)]
#[serde(untagged)]
enum Vector {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Serialize)]
struct Datum {
    object: &'static str,
    index: usize,
    embedding: Vector,
}

#[derive(Serialize)]
struct Usage {
    prompt_tokens: usize,
    total_tokens: usize,
}

#[derive(Serialize)]
struct Answer<'a> {
    object: &'static str,
    data: Vec<Datum>,
    model: &'a str,
    usage: Usage,
    system_fingerprint: &'a str,
}

async fn inner(st: &Arc<AppState>, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let deadline = Instant::now() + st.limits.request_timeout;
    let bytes = http::read_bytes(st, headers, body).await?;
    let b = parse(&bytes)?;
    http::check_model(st, &b.model)?;
    let (vectors, n) = match &st.encoder {
        Some(enc) => {
            let reqs = b
                .inputs
                .iter()
                .enumerate()
                .map(|(i, x)| enc.input(x, b.truncate, "input", i))
                .collect::<Result<Vec<_>, _>>()?;
            let n: usize = reqs.iter().map(|r| r.ids.len()).sum();
            let out = encoder::encode(st, reqs, deadline, "input").await?;
            let normalized = enc.info.normalized;
            (out.into_iter().map(|e| encoder::vector(e, b.dimensions, normalized)).collect::<Result<Vec<_>, _>>()?, n)
        }
        None => {
            let prompts = b.inputs.iter().map(|x| tokens(st, x, "input")).collect::<Result<Vec<_>, _>>()?;
            let n: usize = prompts.iter().map(Vec::len).sum();
            (embed(st, prompts, b.dimensions, deadline, "input").await?.into_iter().map(|e| e.vector).collect(), n)
        }
    };
    let data = vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = if b.base64 { Vector::Base64(base64_f32(&v)) } else { Vector::Float(v) };
            Datum { object: "embedding", index, embedding }
        })
        .collect();
    let a = Answer {
        object: "list",
        data,
        model: &st.model_id,
        usage: Usage { prompt_tokens: n, total_tokens: n },
        system_fingerprint: &st.fingerprint,
    };
    Ok((StatusCode::OK, axum::Json(a)).into_response())
}

/// Standard base64 (with padding) of the vector's little-endian f32 bytes.
pub fn base64_f32(v: &[f32]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut s = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for k in 0..4 {
            if k <= c.len() {
                s.push(char::from(A[(n >> (18 - 6 * k)) as usize & 63]));
            } else {
                s.push('=');
            }
        }
    }
    s
}
