//! The OpenAI answer of a generation (chat and completions): submit the plan
//! (submit.rs), collect its choices' events into one body, or stream them (stream.rs).

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tl_engine::{Event, FinishReason};
use tokio::time::Instant;

use crate::answer::{Choice, Ctx};
use crate::api::{self, ApiError, Plan};
use crate::http;
use crate::pd;
use crate::state::AppState;
use crate::stream::sse;
use crate::submit::{self, Submitted};

/// Submit the plan and answer it: one JSON body, or an SSE stream (stream.rs).
pub(crate) async fn generate(
    st: &Arc<AppState>,
    plan: Plan,
    chat: bool,
    deadline: Instant,
) -> Result<Response, ApiError> {
    let n = plan.n as usize;
    let (stream, include_usage, logprobs) = (plan.stream, plan.include_usage, plan.base.logprobs);
    let Submitted { events: merged, lease, fingerprint } = submit::submit(st, &plan).await?;
    let (tools, think) = (plan.tools, plan.think);
    let created =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(st.created, |d| d.as_secs());
    let id = format!("{}-{:016x}", if chat { "chatcmpl" } else { "cmpl" }, api::random_seed());
    let ctx = Ctx { st: Arc::clone(st), fingerprint, chat, id, created, logprobs, tools, think };
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
                    Some(t) => t.answer(&ctx.fingerprint, i, &c.text, c.finish),
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
