//! The streaming writer: a choice's engine events into `data:` lines of OpenAI's
//! chunk shapes, then `[DONE]`.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use tl_engine::{Event, FinishReason};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::answer::{Choice, Ctx};
use crate::api::ApiError;
use crate::http;

fn data(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

/// The SSE answer: a writer task turns events into `data:` lines; the body streams them.
/// A client that leaves drops the body, the writer's send fails, and the sequences are
/// cancelled through generate.rs's `merge`.
pub(crate) fn sse(
    ctx: Ctx,
    mut merged: mpsc::UnboundedReceiver<(usize, Event)>,
    n: usize,
    include_usage: bool,
    deadline: Instant,
) -> Response {
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    tokio::spawn(async move {
        let object = if ctx.chat { "chat.completion.chunk" } else { "text_completion" };
        let chunk = |i: usize, content: Option<&str>, role: bool, lp: Value, finish: Option<FinishReason>| {
            let finish = finish.map(FinishReason::as_str);
            let choice = if ctx.chat {
                let mut delta = Map::new();
                if role {
                    delta.insert("role".into(), json!("assistant"));
                    delta.insert("refusal".into(), Value::Null);
                }
                if let Some(c) = content {
                    delta.insert("content".into(), json!(c));
                }
                json!({"index": i, "delta": delta, "logprobs": lp, "finish_reason": finish})
            } else {
                json!({"index": i, "text": content.unwrap_or(""), "logprobs": lp, "finish_reason": finish})
            };
            let mut v = ctx.envelope(object, json!([choice]));
            if include_usage {
                v["usage"] = Value::Null;
            }
            data(&v)
        };
        let delta_chunk = |i: usize, delta: Map<String, Value>, lp: Value, finish: Option<&str>| {
            let mut v =
                ctx.envelope(object, json!([{"index": i, "delta": delta, "logprobs": lp, "finish_reason": finish}]));
            if include_usage {
                v["usage"] = Value::Null;
            }
            data(&v)
        };
        let mut choices: Vec<Choice> = ctx.choices(n);
        if ctx.chat {
            for i in 0..n {
                if tx.send(chunk(i, Some(""), true, Value::Null, None)).is_err() {
                    return;
                }
            }
        }
        let mut open = n;
        while open > 0 {
            // Past the deadline no further token goes out (checked by hand as well: the
            // timer wheel ticks each millisecond, so a passed deadline may not fire yet).
            let ev = if Instant::now() >= deadline {
                None
            } else {
                tokio::select! {
                    biased;
                    _ = tokio::time::sleep_until(deadline) => None,
                    _ = tx.closed() => return,
                    ev = merged.recv() => Some(ev),
                }
            };
            let Some(ev) = ev else {
                let _ = tx.send(data(&http::timed_out(&ctx.st).body()));
                let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n"));
                return;
            };
            let Some((i, ev)) = ev else { break };
            let c = &mut choices[i];
            let mut out = Vec::new();
            if ctx.tools.is_some() {
                // Tool answers: the text is read as a call section as it grows; deltas go
                // out in OpenAI's shape, each token's logprobs with the next delta.
                let (done, finish) = match ev {
                    Event::Token { token, text } => {
                        c.unsent.push(token);
                        c.text.push_str(&text);
                        (false, None)
                    }
                    Event::Done { finish, text, usage, .. } => {
                        c.text.push_str(&text);
                        c.usage = usage;
                        (true, Some(finish))
                    }
                    Event::Error(e) => {
                        let _ = tx.send(data(&ApiError::from(e).body()));
                        let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n"));
                        return;
                    }
                };
                let deltas = match &ctx.tools {
                    Some(t) => t.deltas(&ctx.st.fingerprint, i, &c.text, done, &mut c.sent),
                    None => Vec::new(),
                };
                for d in deltas {
                    let lp = if c.unsent.is_empty() { Value::Null } else { ctx.logprobs(&c.unsent, 0) };
                    c.unsent.clear();
                    out.push(delta_chunk(i, d, lp, None));
                }
                if let Some(f) = finish {
                    let lp = if c.unsent.is_empty() { Value::Null } else { ctx.logprobs(&c.unsent, 0) };
                    c.unsent.clear();
                    let f = if c.sent.called && f == FinishReason::Stop { "tool_calls" } else { f.as_str() };
                    out.push(delta_chunk(i, Map::new(), lp, Some(f)));
                    open -= 1;
                }
                for b in out {
                    if tx.send(b).is_err() {
                        return;
                    }
                }
                continue;
            }
            if let Some(split) = c.split.as_mut() {
                // Reasoning split: thinking goes out as `reasoning_content` deltas, the
                // answer as `content` ones; each token's logprobs with the next delta.
                let (parts, finish) = match ev {
                    Event::Token { token, text } => {
                        c.unsent.push(token);
                        (split.push(&text), None)
                    }
                    Event::Done { finish, text, usage, .. } => {
                        c.usage = usage;
                        (split.end(&text), Some(finish))
                    }
                    Event::Error(e) => {
                        let _ = tx.send(data(&ApiError::from(e).body()));
                        let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n"));
                        return;
                    }
                };
                for (field, part) in [("reasoning_content", parts.reasoning), ("content", parts.content)] {
                    if !part.is_empty() {
                        let lp = if c.unsent.is_empty() { Value::Null } else { ctx.logprobs(&c.unsent, 0) };
                        c.unsent.clear();
                        let mut delta = Map::new();
                        delta.insert(field.into(), json!(part));
                        out.push(delta_chunk(i, delta, lp, None));
                    }
                }
                if let Some(f) = finish {
                    let lp = if c.unsent.is_empty() { Value::Null } else { ctx.logprobs(&c.unsent, 0) };
                    c.unsent.clear();
                    out.push(delta_chunk(i, Map::new(), lp, Some(f.as_str())));
                    open -= 1;
                }
                for b in out {
                    if tx.send(b).is_err() {
                        return;
                    }
                }
                continue;
            }
            match ev {
                Event::Token { token, text } => {
                    c.unsent.push(token);
                    if !text.is_empty() {
                        let lp = ctx.logprobs(&c.unsent, c.text.len());
                        c.unsent.clear();
                        out.push(chunk(i, Some(&text), false, lp, None));
                        c.text.push_str(&text);
                    }
                }
                Event::Done { finish, text, usage, .. } => {
                    if !text.is_empty() || !c.unsent.is_empty() {
                        let lp = ctx.logprobs(&c.unsent, c.text.len());
                        c.unsent.clear();
                        out.push(chunk(i, Some(&text), false, lp, None));
                    }
                    c.usage = usage;
                    out.push(chunk(i, if ctx.chat { None } else { Some("") }, false, Value::Null, Some(finish)));
                    open -= 1;
                }
                Event::Error(e) => {
                    let _ = tx.send(data(&ApiError::from(e).body()));
                    let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n"));
                    return;
                }
            }
            for b in out {
                if tx.send(b).is_err() {
                    return;
                }
            }
        }
        if include_usage {
            let mut v = ctx.envelope(object, json!([]));
            v["usage"] = ctx.usage(&choices);
            let _ = tx.send(data(&v));
        }
        let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n"));
    });
    let stream =
        futures_util::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|b| (Ok::<Bytes, Infallible>(b), rx)) },
        );
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
