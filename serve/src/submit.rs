//! The one place a plan meets the engine: a generation's choices are submitted (through
//! P/D only when the request carries `kv_transfer_params`) and their events merged into
//! one channel; an embedding's inputs are submitted together. Every surface answers from
//! what this returns, in its own shape.

use std::sync::Arc;

use tl_engine::{EmbedResult, EngineError, Event, UnboundedReceiver};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::api::ApiError;
use crate::http;
use crate::pd;
use crate::plan::{EmbedPlan, Plan};
use crate::state::AppState;

/// A submitted generation: its choices' events, tagged with the choice index, and the
/// P/D outcome when the request took part in a hand-off.
pub(crate) struct Submitted {
    pub(crate) events: mpsc::UnboundedReceiver<(usize, Event)>,
    pub(crate) lease: Option<pd::Outcome>,
    /// The answer's `system_fingerprint`: the server's, or under an adapter the server's
    /// combined with the adapter's key (`tl_engine::adapted_fingerprint`).
    pub(crate) fingerprint: String,
}

/// Submit every choice of `plan`, all or nothing.
pub(crate) async fn submit(st: &Arc<AppState>, plan: &Plan) -> Result<Submitted, ApiError> {
    if st.encoder.is_some() {
        return Err(ApiError::bad(
            "model",
            format!(
                "{:?} is an encoder (embeddings and scores): it answers /v1/embeddings, /v1/rerank and /v1/score, not generation",
                st.model_id
            ),
        ));
    }
    let mut reqs = plan.requests();
    let adapter = st.loras.resolve(&plan.lora)?;
    let fingerprint = tl_engine::adapted_fingerprint(&st.fingerprint, adapter.as_ref());
    if let Some(adapter) = adapter {
        st.metrics.adapter_request(adapter.adapter.name());
        reqs.iter_mut().for_each(|r| r.adapter = Some(adapter.clone()));
    }
    let (rxs, lease) = match plan.kv_transfer.as_ref() {
        Some(params) => {
            let (rxs, outcome) = pd::submit(st, params, plan.stream, reqs).await?;
            (rxs, Some(outcome))
        }
        None => (st.engine.submit_all(reqs)?, None),
    };
    Ok(Submitted { events: merge(rxs), lease, fingerprint })
}

/// Submit every input of `plan`, all or nothing; one receiver per input.
pub(crate) fn embed(st: &AppState, plan: EmbedPlan) -> Result<Vec<UnboundedReceiver<EmbedResult>>, ApiError> {
    Ok(st.engine.embed_all(plan.into_requests())?)
}

/// More inputs than the engine's queue holds could never be admitted together: not a busy
/// server (503) but a request too big for this one (a 400 on `param`).
pub(crate) fn fits_queue(st: &AppState, inputs: usize, param: &str) -> Result<(), ApiError> {
    let max = st.engine.info().max_queue;
    if inputs > max {
        return Err(ApiError::bad(
            param,
            format!("{inputs} inputs; this server embeds at most {max} per request (--max-queue)"),
        ));
    }
    Ok(())
}

/// Each input's one answer (an embedding's, an encoding's), in order, waiting until
/// `deadline`. A prompt the pool can never hold is the input's fault (a 400 on `input`),
/// not `max_tokens`'.
pub(crate) async fn answers<T>(
    st: &AppState,
    rxs: Vec<UnboundedReceiver<Result<T, EngineError>>>,
    deadline: Instant,
) -> Result<Vec<T>, ApiError> {
    let mut out = Vec::with_capacity(rxs.len());
    for mut rx in rxs {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Err(_) => return Err(http::timed_out(st)),
            Ok(None) => return Err(ApiError::from(EngineError::Internal("the engine dropped an input".into()))),
            Ok(Some(Err(e @ EngineError::PoolTooSmall { .. }))) => return Err(ApiError::bad("input", e.to_string())),
            Ok(Some(r)) => out.push(r?),
        }
    }
    Ok(out)
}

/// Forward every choice's events, tagged with the choice index, into one channel; a
/// forwarder stops (dropping its engine receiver, which cancels the sequence) as soon as
/// the merged receiver is gone.
fn merge(rxs: Vec<UnboundedReceiver<Event>>) -> mpsc::UnboundedReceiver<(usize, Event)> {
    let (tx, rx) = mpsc::unbounded_channel();
    for (i, mut r) in rxs.into_iter().enumerate() {
        let tx = tx.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    ev = r.recv() => {
                        let Some(ev) = ev else { break };
                        let last = !matches!(ev, Event::Token { .. });
                        if tx.send((i, ev)).is_err() || last {
                            break;
                        }
                    }
                    _ = tx.closed() => break,
                }
            }
        });
    }
    rx
}
