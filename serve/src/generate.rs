//! The one path every generating surface takes: submit a request plan to the engine,
//! merge its choices' events, and answer (streaming through stream.rs).

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tl_engine::{Event, FinishReason, UnboundedReceiver};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::answer::{Choice, Ctx};
use crate::api::{self, ApiError, Plan};
use crate::http;
use crate::pd;
use crate::state::AppState;
use crate::stream::sse;
use crate::tools;

/// The default `max_tokens`: chat may fill the context; completions stop at 16 (OpenAI's).
pub(crate) fn default_max(st: &AppState, chat: bool, prompt: usize) -> usize {
    let rest = st.engine.info().max_context.map_or(4096, |c| c.saturating_sub(prompt));
    if chat {
        rest
    } else {
        rest.min(16)
    }
}

/// Submit the plan and answer it: one JSON body, or an SSE stream (stream.rs). P/D is
/// touched only when the request carries `kv_transfer_params`.
pub(crate) async fn generate(
    st: &Arc<AppState>,
    plan: Plan,
    chat: bool,
    deadline: Instant,
    tools: Option<tools::Active>,
    think: Option<bool>,
) -> Result<Response, ApiError> {
    let n = plan.reqs.len();
    let (stream, include_usage, logprobs) = (plan.stream, plan.include_usage, plan.logprobs);
    let (rxs, lease) = match plan.kv_transfer.as_ref() {
        Some(params) => {
            let (rxs, outcome) = pd::submit(st, params, stream, plan.reqs).await?;
            (rxs, Some(outcome))
        }
        None => (st.engine.submit_all(plan.reqs)?, None),
    };
    let created =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(st.created, |d| d.as_secs());
    let id = format!("{}-{:016x}", if chat { "chatcmpl" } else { "cmpl" }, api::random_seed());
    let ctx = Ctx { st: Arc::clone(st), chat, id, created, logprobs, tools, think };
    let merged = merge(rxs);
    if stream {
        return Ok(sse(ctx, merged, n, include_usage, deadline));
    }
    let mut merged = merged;
    let mut choices: Vec<Choice> = ctx.choices(n);
    let mut open = n;
    while open > 0 {
        // Past the deadline `merged` is dropped on return, which cancels the sequences.
        if Instant::now() >= deadline {
            return Err(http::timed_out(st));
        }
        let Ok(ev) = tokio::time::timeout_at(deadline, merged.recv()).await else { return Err(http::timed_out(st)) };
        let Some((i, ev)) = ev else {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "internal_error",
                "engine gone",
            ));
        };
        let c = &mut choices[i];
        match ev {
            Event::Token { token, text } => {
                c.push_text(&text);
                c.tokens.push(token);
            }
            Event::Done { finish, text, usage, .. } => {
                c.end_text(&text);
                c.finish = Some(finish);
                c.usage = usage;
                open -= 1;
            }
            Event::Error(e) => return Err(e.into()),
        }
    }
    let out: Vec<Value> = choices
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let finish = c.finish.map(FinishReason::as_str);
            let lp = ctx.logprobs(&c.tokens, 0);
            if chat {
                let (message, finish) = match &ctx.tools {
                    Some(t) => t.answer(&ctx.st.fingerprint, i, &c.text, c.finish),
                    None => (
                        json!({"role": "assistant", "content": c.text, "refusal": null}),
                        c.finish.map(FinishReason::as_str),
                    ),
                };
                let mut message = message;
                if !c.reasoning.is_empty() {
                    message["reasoning_content"] = json!(c.reasoning);
                }
                json!({"index": i, "message": message, "logprobs": lp, "finish_reason": finish})
            } else {
                json!({"index": i, "text": c.text, "logprobs": lp, "finish_reason": finish})
            }
        })
        .collect();
    let mut body = ctx.envelope(if chat { "chat.completion" } else { "text_completion" }, Value::Array(out));
    body["usage"] = ctx.usage(&choices);
    if let Some(outcome) = &lease {
        pd::annotate(st, outcome, &mut body);
    }
    Ok((StatusCode::OK, axum::Json(body)).into_response())
}

/// Forward every choice's events, tagged with the choice index, into one channel; a
/// forwarder stops (dropping its engine receiver, which cancels the sequence) as soon as
/// the merged receiver is gone.
pub(crate) fn merge(rxs: Vec<UnboundedReceiver<Event>>) -> mpsc::UnboundedReceiver<(usize, Event)> {
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
