//! `POST /v1/score` (and `/score`) in vLLM's shape: `{model, text_1, text_2, truncate?}`,
//! where `text_1` is a string or a list and `text_2` a string or a list (one `text_1`
//! against each `text_2`, or both lists of one length, paired in order) →
//! `{id, object: "list", created, model, data: [{index, object: "score", score}], usage}`,
//! in pair order. A cross-encoder scores each pair itself; a model that pools (an
//! encoder's vectors, a decoder's embeddings) scores by the cosine of the two vectors, as
//! vLLM does for embedding models.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::api::ApiError;
use crate::embeddings::{self, Input, MAX_INPUTS};
use crate::encoder;
use crate::fields::{kind, opt, opt_bool};
use crate::http::{self, St};
use crate::similarity::cosine;
use crate::state::AppState;

/// A checked score body: the pairs, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScoreBody {
    /// Must name the served model when given.
    pub model: Option<String>,
    /// `(text_1, text_2)` pairs (at least one, no text empty).
    pub pairs: Vec<(String, String)>,
    /// Cut pairs longer than an encoder's `max_seq_length` instead of refusing them.
    pub truncate: bool,
}

/// `text_1` or `text_2`: one text or a non-empty list of them, none empty.
fn texts(o: &serde_json::Map<String, Value>, key: &str) -> Result<Vec<String>, ApiError> {
    let one = |i: Option<usize>, v: &Value| match v {
        Value::String(s) if !s.is_empty() => Ok(s.clone()),
        Value::String(_) => {
            Err(ApiError::bad(key, format!("{key}{} is empty", i.map_or(String::new(), |i| format!("[{i}]")))))
        }
        v => Err(ApiError::bad(key, format!("{key} must be a string or a list of strings, not {}", kind(v)))),
    };
    match opt(o, key) {
        None => Err(ApiError::bad(key, format!("{key} is required"))),
        Some(Value::Array(a)) if a.is_empty() => Err(ApiError::bad(key, format!("{key} must not be an empty list"))),
        Some(Value::Array(a)) if a.len() > MAX_INPUTS => {
            Err(ApiError::bad(key, format!("{} texts; at most {MAX_INPUTS}", a.len())))
        }
        Some(Value::Array(a)) => a.iter().enumerate().map(|(i, v)| one(Some(i), v)).collect(),
        Some(v) => Ok(vec![one(None, v)?]),
    }
}

/// Parse and check a score body.
pub fn parse(bytes: &[u8]) -> Result<ScoreBody, ApiError> {
    let o = embeddings::object(bytes)?;
    let model = embeddings::model(&o)?;
    let (a, b) = (texts(&o, "text_1")?, texts(&o, "text_2")?);
    let pairs = match (a.len(), b.len()) {
        (1, _) => b.into_iter().map(|t| (a[0].clone(), t)).collect(),
        (n, m) if n == m => a.into_iter().zip(b).collect(),
        (n, m) => {
            return Err(ApiError::bad(
                "text_2",
                format!("text_1 has {n} texts and text_2 {m}: give one text_1, or lists of one length"),
            ))
        }
    };
    let truncate = opt_bool(&o, "truncate")?.unwrap_or(false);
    Ok(ScoreBody { model, pairs, truncate })
}

/// POST /v1/score and /score.
pub(crate) async fn score(State(st): St, headers: HeaderMap, body: Body) -> Response {
    let r = inner(&st, &headers, body).await;
    http::counted(&st, "/v1/score", r)
}

/// A decoder's pair scores: the cosine of its pooled embeddings of each distinct text.
async fn decoder_scores(
    st: &AppState,
    pairs: &[(&str, &str)],
    deadline: Instant,
) -> Result<(Vec<f64>, usize), ApiError> {
    crate::rerank::no_head(st)?;
    let (distinct, idx) = crate::similarity::distinct(pairs);
    let prompts = distinct
        .iter()
        .map(|t| embeddings::tokens(st, &Input::Text((*t).to_string()), "text_2"))
        .collect::<Result<Vec<_>, _>>()?;
    let n = prompts.iter().map(Vec::len).sum();
    let v = embeddings::embed(st, prompts, None, deadline, "text_2").await?;
    Ok((idx.iter().map(|&(a, b)| cosine(&v[a].vector, &v[b].vector)).collect(), n))
}

async fn inner(st: &Arc<AppState>, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let deadline = Instant::now() + st.limits.request_timeout;
    let bytes = http::read_bytes(st, headers, body).await?;
    let b = parse(&bytes)?;
    http::check_model(st, &b.model)?;
    let pairs: Vec<(&str, &str)> = b.pairs.iter().map(|(a, c)| (a.as_str(), c.as_str())).collect();
    let (scores, n) = match &st.encoder {
        Some(enc) => encoder::score_pairs(st, enc, &pairs, b.truncate, deadline).await?,
        None => decoder_scores(st, &pairs, deadline).await?,
    };
    let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let data: Vec<Value> =
        scores.iter().enumerate().map(|(index, s)| json!({"index": index, "object": "score", "score": s})).collect();
    let v = json!({
        "id": crate::api::new_id("score"),
        "object": "list",
        "created": created,
        "model": st.model_id,
        "data": data,
        "usage": {"prompt_tokens": n, "total_tokens": n},
        "system_fingerprint": st.fingerprint,
    });
    Ok((StatusCode::OK, axum::Json(v)).into_response())
}
