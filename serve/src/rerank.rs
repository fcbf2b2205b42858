//! `POST /v1/rerank` (and `/rerank`, as llama-server answers both), in the shape
//! llama-server, vLLM and Cohere share: `{model, query, documents, top_n?,
//! return_documents?}` → `{id, model, usage, results: [{index, relevance_score,
//! document?: {text}}]}`, best first (ties by index), `top_n` kept.
//!
//! For an embedding model the score is the cosine similarity of the query's and the
//! document's pooled embeddings (what vLLM does for embedding models): the query and every
//! document go to the engine together as embedding sequences (embeddings.rs), so they
//! batch with each other and with generation. A decoder with a reranking head (a
//! sequence-classification checkpoint: pooling.rs) is refused with 501: tl does not run
//! such heads on decoders, and a similarity of its hidden states is not its score. An
//! encoder model answers through encoder.rs: a cross-encoder scores each (query,
//! document) pair as sentence-transformers' `CrossEncoder.predict` does; a pooling
//! encoder ranks by the cosine of its own vectors.

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
pub use crate::similarity::cosine;
use crate::state::AppState;

/// A checked rerank body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RerankBody {
    /// Must name the served model when given.
    pub model: Option<String>,
    /// The query (not empty).
    pub query: String,
    /// The documents, in order (at least one, none empty).
    pub documents: Vec<String>,
    /// Keep the best `top_n` (at least 1); `None`: all.
    pub top_n: Option<usize>,
    /// Send each document's text back.
    pub return_documents: bool,
    /// `truncate`: an encoder cuts pairs longer than its `max_seq_length` (encoder.rs).
    pub truncate: bool,
}

/// Parse and check a rerank body.
pub fn parse(bytes: &[u8]) -> Result<RerankBody, ApiError> {
    let o = embeddings::object(bytes)?;
    let model = embeddings::model(&o)?;
    let query = match opt(&o, "query") {
        None => return Err(ApiError::bad("query", "query is required")),
        Some(Value::String(s)) if s.is_empty() => return Err(ApiError::bad("query", "query must not be empty")),
        Some(Value::String(s)) => s.clone(),
        Some(v) => return Err(ApiError::bad("query", format!("query must be a string, not {}", kind(v)))),
    };
    let documents = match opt(&o, "documents") {
        None => return Err(ApiError::bad("documents", "documents is required")),
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(ApiError::bad("documents", "documents must not be an empty list"))
        }
        Some(Value::Array(a)) if a.len() >= MAX_INPUTS => {
            return Err(ApiError::bad("documents", format!("{} documents; at most {}", a.len(), MAX_INPUTS - 1)))
        }
        Some(Value::Array(a)) => {
            let mut docs = Vec::with_capacity(a.len());
            for (i, d) in a.iter().enumerate() {
                match d {
                    Value::String(s) if !s.is_empty() => docs.push(s.clone()),
                    Value::String(_) => return Err(ApiError::bad("documents", format!("documents[{i}] is empty"))),
                    v => {
                        return Err(ApiError::bad(
                            "documents",
                            format!("documents[{i}] must be a string, not {}", kind(v)),
                        ))
                    }
                }
            }
            docs
        }
        Some(v) => {
            return Err(ApiError::bad("documents", format!("documents must be a list of strings, not {}", kind(v))))
        }
    };
    let top_n = match opt(&o, "top_n") {
        None => None,
        Some(v) => match v.as_u64() {
            Some(k) if k >= 1 => Some(usize::try_from(k).unwrap_or(usize::MAX)),
            _ => return Err(ApiError::bad("top_n", format!("top_n must be a positive integer, not {v}"))),
        },
    };
    let return_documents = opt_bool(&o, "return_documents")?.unwrap_or(false);
    let truncate = opt_bool(&o, "truncate")?.unwrap_or(false);
    Ok(RerankBody { model, query, documents, top_n, return_documents, truncate })
}

/// `(index, score)` best first, ties by index, the best `top_n` kept.
pub fn rank(scores: &[f64], top_n: Option<usize>) -> Vec<(usize, f64)> {
    let mut r: Vec<(usize, f64)> = scores.iter().copied().enumerate().collect();
    r.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    r.truncate(top_n.unwrap_or(usize::MAX));
    r
}

/// POST /v1/rerank and /rerank.
pub(crate) async fn rerank(State(st): St, headers: HeaderMap, body: Body) -> Response {
    let r = inner(&st, &headers, body).await;
    http::counted(&st, "/v1/rerank", r)
}

async fn inner(st: &Arc<AppState>, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let deadline = Instant::now() + st.limits.request_timeout;
    let bytes = http::read_bytes(st, headers, body).await?;
    let b = parse(&bytes)?;
    http::check_model(st, &b.model)?;
    let (scores, n) = match &st.encoder {
        Some(enc) => {
            let pairs: Vec<(&str, &str)> = b.documents.iter().map(|d| (b.query.as_str(), d.as_str())).collect();
            encoder::score_pairs(st, enc, &pairs, b.truncate, deadline).await?
        }
        None => decoder_scores(st, &b, deadline).await?,
    };
    let results: Vec<Value> = rank(&scores, b.top_n)
        .into_iter()
        .map(|(index, score)| {
            let mut r = json!({"index": index, "relevance_score": score});
            if b.return_documents {
                r["document"] = json!({"text": b.documents[index]});
            }
            r
        })
        .collect();
    let v = json!({
        "id": crate::api::new_id("rerank"),
        "model": st.model_id,
        "usage": {"prompt_tokens": n, "total_tokens": n},
        "results": results,
        "system_fingerprint": st.fingerprint,
    });
    Ok((StatusCode::OK, axum::Json(v)).into_response())
}

/// 501 for a decoder checkpoint with a reranking head: tl does not run such heads, and the
/// cosine of its pooled embeddings is not that model's score.
pub(crate) fn no_head(st: &AppState) -> Result<(), ApiError> {
    match &st.pooling.rerank_head {
        Some(why) => Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "invalid_request_error",
            "not_implemented",
            format!(
                "reranking heads are not implemented: {why}; tl ranks by the cosine similarity of pooled \
                 embeddings, which is not this model's score"
            ),
        )),
        None => Ok(()),
    }
}

/// A decoder's scores of the documents: the cosine of pooled embeddings (refused for a
/// checkpoint whose reranking head tl does not run), and the tokens read.
pub(crate) async fn decoder_scores(
    st: &AppState,
    b: &RerankBody,
    deadline: Instant,
) -> Result<(Vec<f64>, usize), ApiError> {
    no_head(st)?;
    let mut prompts = vec![embeddings::tokens(st, &Input::Text(b.query.clone()), "query")?];
    for d in &b.documents {
        prompts.push(embeddings::tokens(st, &Input::Text(d.clone()), "documents")?);
    }
    let n: usize = prompts.iter().map(Vec::len).sum();
    let vectors = embeddings::embed(st, prompts, None, deadline, "documents").await?;
    let (query, docs) = vectors.split_first().ok_or_else(|| ApiError::bad("query", "nothing was embedded"))?;
    Ok((docs.iter().map(|d| cosine(&query.vector, &d.vector)).collect(), n))
}
