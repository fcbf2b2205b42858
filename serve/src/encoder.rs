//! Serving an encoder model (docs/spec/encoders.md): `/v1/embeddings` gives the model's own
//! pooled vectors (sentence-transformers' modules), `/v1/rerank` and `/v1/score` a
//! cross-encoder's scores of (query, document) pairs, or the cosine of two vectors for a
//! model that pools; generation is refused (submit.rs).
//!
//! Text is tokenized as sentence-transformers does (core's `encoder_text`: the model's
//! tokenizer.json, `[CLS] ... [SEP]`, pairs cut longest-first). A text longer than the
//! model's `max_seq_length` is refused naming its index unless the request says
//! `"truncate": true` (as text-embeddings-inference does), which cuts it where
//! sentence-transformers cuts. The engine runs waiting inputs together; an input's
//! outputs are the same bits in any company.

use tl_engine::{EncodeRequest, Encoding};
use tokio::time::Instant;

use crate::api::ApiError;
pub(crate) use crate::encoder_text::EncoderText;
use crate::input::Input;
use crate::state::AppState;
use crate::submit;

/// Encode `reqs` (all or nothing), waiting until `deadline`.
pub(crate) async fn encode(
    st: &AppState,
    reqs: Vec<EncodeRequest>,
    deadline: Instant,
    param: &str,
) -> Result<Vec<Encoding>, ApiError> {
    submit::fits_queue(st, reqs.len(), param)?;
    let rxs = st.engine.encode_all(reqs)?;
    submit::answers(st, rxs, deadline).await
}

/// An encoding's pooled vector, cut to `dimensions` and normalised again when the model's
/// vectors are normalised (Matryoshka, as the decoder path does: in f64, rounded once).
pub(crate) fn vector(e: Encoding, dimensions: Option<usize>, normalized: bool) -> Result<Vec<f32>, ApiError> {
    let v = e.vector.ok_or_else(|| {
        ApiError::bad("model", "the model gives no pooled vector (a cross-encoder): use /v1/rerank or /v1/score")
    })?;
    let Some(k) = dimensions else { return Ok(v) };
    if k > v.len() {
        return Err(ApiError::bad("dimensions", format!("dimensions {k} exceeds the model's {} values", v.len())));
    }
    let mut v: Vec<f64> = v[..k].iter().map(|&x| f64::from(x)).collect();
    if normalized {
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        }
    }
    Ok(v.into_iter().map(|x| x as f32).collect())
}

/// The scores of `(query, document)` pairs: the cross-encoder's output for each pair, or
/// the cosine of the two pooled vectors for a model that pools. The second value is the
/// tokens read.
pub(crate) async fn score_pairs(
    st: &AppState,
    enc: &EncoderText,
    pairs: &[(&str, &str)],
    truncate: bool,
    deadline: Instant,
) -> Result<(Vec<f64>, usize), ApiError> {
    if enc.scores_pairs() {
        let reqs = pairs
            .iter()
            .enumerate()
            .map(|(i, (a, b))| enc.pair(a, b, truncate, "documents", i))
            .collect::<Result<Vec<_>, _>>()?;
        let n = reqs.iter().map(|r| r.ids.len()).sum();
        let out = encode(st, reqs, deadline, "documents").await?;
        let scores = out
            .into_iter()
            .map(|e| e.scores.and_then(|s| s.first().copied()).map(f64::from))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ApiError::from(tl_engine::EngineError::Internal("a cross-encoder gave no score".into())))?;
        return Ok((scores, n));
    }
    if enc.info.vector.is_none() {
        return Err(ApiError::bad(
            "model",
            "the model neither pools nor has a one-output classifier: it cannot score pairs",
        ));
    }
    // Each distinct text once: a query shared by every pair is encoded once.
    let (texts, idx) = crate::similarity::distinct(pairs);
    let reqs = texts
        .iter()
        .enumerate()
        .map(|(i, t)| enc.input(&Input::Text((*t).to_string()), truncate, "input", i))
        .collect::<Result<Vec<_>, _>>()?;
    let n = reqs.iter().map(|r| r.ids.len()).sum();
    let out = encode(st, reqs, deadline, "documents").await?;
    let vecs = out.into_iter().map(|e| vector(e, None, false)).collect::<Result<Vec<_>, _>>()?;
    Ok((idx.iter().map(|&(a, b)| crate::similarity::cosine(&vecs[a], &vecs[b])).collect(), n))
}
