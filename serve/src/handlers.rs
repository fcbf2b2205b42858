//! The endpoints: request in, engine submit, OpenAI-shaped JSON or SSE out.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use tl_engine::{Event, FinishReason, TokenInfo, UnboundedReceiver, Usage};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::api::{self, ApiError, Plan};
use crate::metrics::Status;
use crate::prompt;
use crate::tools;
use crate::AppState;

type St = State<Arc<AppState>>;

/// Count the answer in the metrics.
pub(crate) fn counted(st: &AppState, endpoint: &str, r: Result<Response, ApiError>) -> Response {
    let r = r.unwrap_or_else(IntoResponse::into_response);
    let code = r.status().as_u16();
    st.metrics.requests.get_or_create(&Status { endpoint: endpoint.into(), code }).inc();
    r
}

async fn read(st: &AppState, headers: &HeaderMap, body: Body) -> Result<api::Body, ApiError> {
    read_json(st, headers, body).await
}

/// The body as JSON of type `T`, within the size and time limits.
pub(crate) async fn read_json<T: serde::de::DeserializeOwned>(
    st: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    parse_json(&read_bytes(st, headers, body).await?)
}

fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| ApiError {
        code: Some("invalid_json"),
        param: None,
        ..ApiError::bad("", format!("the body is not a valid request: {e}"))
    })
}

/// The body's bytes, within the size and time limits.
async fn read_bytes(st: &AppState, headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    let too_big = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            "request_too_large",
            format!("the request body exceeds {} bytes", st.max_body),
        )
    };
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    if declared.is_some_and(|n: usize| n > st.max_body) {
        return Err(too_big());
    }
    let bytes = match tokio::time::timeout(st.limits.body_timeout, axum::body::to_bytes(body, st.max_body)).await {
        Ok(r) => r.map_err(|_| too_big())?,
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "invalid_request_error",
                "request_timeout",
                format!("the request body did not arrive within {} s", st.limits.body_timeout.as_secs_f64()),
            ))
        }
    };
    Ok(bytes)
}

fn check_model(st: &AppState, b: &api::Body) -> Result<(), ApiError> {
    match &b.model {
        Some(m) if *m != st.model_id => Err(ApiError {
            param: Some("model".into()),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                "model_not_found",
                format!("the model {m:?} does not exist; this server serves {:?}", st.model_id),
            )
        }),
        _ => Ok(()),
    }
}

pub(crate) fn tok_err(param: &str) -> impl Fn(tl_core::TokenizerError) -> ApiError + '_ {
    move |e| ApiError::bad(param, e.to_string())
}

/// The default `max_tokens`: chat may fill the context; completions stop at 16 (OpenAI's).
fn default_max(st: &AppState, chat: bool, prompt: usize) -> usize {
    let rest = st.engine.info().max_context.map_or(4096, |c| c.saturating_sub(prompt));
    if chat {
        rest
    } else {
        rest.min(16)
    }
}

/// POST /v1/chat/completions.
pub(crate) async fn chat(State(st): St, headers: HeaderMap, body: Body) -> Response {
    let r = chat_inner(&st, &headers, body).await;
    counted(&st, "/v1/chat/completions", r)
}

async fn chat_inner(st: &Arc<AppState>, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let deadline = Instant::now() + st.limits.request_timeout;
    let bytes = read_bytes(st, headers, body).await?;
    let b: api::Body = parse_json(&bytes)?;
    check_model(st, &b)?;
    let msgs = prompt::messages(&b)?;
    let tools = tools::parse(b.tools.as_ref(), b.tool_choice.as_ref(), b.parallel_tool_calls.as_ref())?;
    let format = st.tool_format;
    let turns = tools::prepare(format, tools.as_ref(), prompt::turns(msgs)?);
    // A native template renders the tools itself; the generic format put them in the system turn.
    let raw = tools.as_ref().filter(|_| format != tools::Format::Generic).map(|t| t.raw.as_slice());
    let prompt = prompt::render(&st.tok, &st.template, &turns, raw)?;
    let mut plan = b.plan(prompt.clone(), true, st.engine.info().max_context, default_max(st, true, prompt.len()))?;
    let tool_ctx = match tools {
        Some(t) if t.choice != tools::ToolChoice::None => {
            if plan.reqs.first().is_some_and(|r| r.grammar.is_some()) {
                return Err(ApiError::bad(
                    "response_format",
                    "response_format cannot be combined with tools unless tool_choice is \"none\"",
                ));
            }
            let g = tools::grammar(format, &t);
            for r in &mut plan.reqs {
                r.grammar = g.clone();
            }
            let seed = plan.reqs.first().map_or(0, |r| r.seed);
            Some(tools::Active { format, choice: t.choice, body: bytes, seed })
        }
        _ => None,
    };
    generate(st, plan, true, deadline, tool_ctx).await
}

/// POST /v1/completions.
pub(crate) async fn completions(State(st): St, headers: HeaderMap, body: Body) -> Response {
    let r = completions_inner(&st, &headers, body).await;
    counted(&st, "/v1/completions", r)
}

async fn completions_inner(st: &Arc<AppState>, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let deadline = Instant::now() + st.limits.request_timeout;
    let b = read(st, headers, body).await?;
    check_model(st, &b)?;
    let prompt = prompt::completion(&st.tok, st.bos, &b)?;
    let plan = b.plan(prompt.clone(), false, st.engine.info().max_context, default_max(st, false, prompt.len()))?;
    generate(st, plan, false, deadline, None).await
}

impl AppState {
    pub(crate) fn token_text(&self, id: u32) -> (String, Vec<u8>) {
        let bytes = self.tok.decode_bytes(&[id]).unwrap_or_default();
        (String::from_utf8_lossy(&bytes).into_owned(), bytes)
    }
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

/// Per-choice state while answering.
#[derive(Default)]
struct Choice {
    text: String,
    tokens: Vec<TokenInfo>,
    /// Tokens not yet reported in a stream chunk.
    unsent: Vec<TokenInfo>,
    finish: Option<FinishReason>,
    usage: Usage,
    /// With tools (streaming): what has been sent.
    sent: tools::Sent,
}

struct Ctx {
    st: Arc<AppState>,
    chat: bool,
    id: String,
    created: u64,
    logprobs: Option<usize>,
    tools: Option<tools::Active>,
}

impl Ctx {
    fn chat_logprobs(&self, toks: &[TokenInfo]) -> Value {
        let entry = |id: u32, lp: f64| {
            let (t, b) = self.st.token_text(id);
            json!({"token": t, "logprob": lp, "bytes": b})
        };
        let content: Vec<Value> = toks
            .iter()
            .map(|t| {
                let mut e = entry(t.id, t.logprob);
                e["top_logprobs"] = Value::Array(t.top.iter().map(|&(i, l)| entry(i, l)).collect());
                e
            })
            .collect();
        json!({ "content": content })
    }

    fn completion_logprobs(&self, toks: &[TokenInfo], offset: usize) -> Value {
        let mut at = offset;
        let (mut tokens, mut lps, mut tops, mut offs) = (vec![], vec![], vec![], vec![]);
        for t in toks {
            let (text, _) = self.st.token_text(t.id);
            offs.push(at);
            at += text.len();
            tokens.push(text);
            lps.push(t.logprob);
            let mut m = Map::new();
            for &(i, l) in &t.top {
                m.insert(self.st.token_text(i).0, json!(l));
            }
            tops.push(Value::Object(m));
        }
        json!({"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offs})
    }

    fn logprobs(&self, toks: &[TokenInfo], offset: usize) -> Value {
        match self.logprobs {
            None => Value::Null,
            Some(_) if self.chat => self.chat_logprobs(toks),
            Some(_) => self.completion_logprobs(toks, offset),
        }
    }

    fn usage(&self, choices: &[Choice]) -> Value {
        let prompt = choices.first().map_or(0, |c| c.usage.prompt_tokens);
        let completion: usize = choices.iter().map(|c| c.usage.completion_tokens).sum();
        let cached = choices.iter().map(|c| c.usage.cached_tokens).max().unwrap_or(0);
        json!({
            "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            // tl has no reasoning split and no predicted outputs: these are 0 by definition.
            "completion_tokens_details": {
                "reasoning_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0,
            },
        })
    }

    fn envelope(&self, object: &str, choices: Value) -> Value {
        json!({
            "id": self.id, "object": object, "created": self.created, "model": self.st.model_id,
            "system_fingerprint": self.st.fingerprint, "choices": choices,
        })
    }
}

/// The answer to a request past `--request-timeout`.
fn timed_out(st: &AppState) -> ApiError {
    ApiError::new(
        StatusCode::GATEWAY_TIMEOUT,
        "server_error",
        "timeout",
        format!("the request took longer than {} s", st.limits.request_timeout.as_secs_f64()),
    )
}

async fn generate(
    st: &Arc<AppState>,
    plan: Plan,
    chat: bool,
    deadline: Instant,
    tools: Option<tools::Active>,
) -> Result<Response, ApiError> {
    let n = plan.reqs.len();
    let (stream, include_usage, logprobs) = (plan.stream, plan.include_usage, plan.logprobs);
    let (rxs, pd) = crate::pd::submit(st, plan.kv_transfer.as_ref(), stream, plan.reqs).await?;
    let created =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(st.created, |d| d.as_secs());
    let id = format!("{}-{:016x}", if chat { "chatcmpl" } else { "cmpl" }, api::random_seed());
    let ctx = Ctx { st: Arc::clone(st), chat, id, created, logprobs, tools };
    let merged = merge(rxs);
    if stream {
        return Ok(sse(ctx, merged, n, include_usage, deadline));
    }
    let mut merged = merged;
    let mut choices: Vec<Choice> = (0..n).map(|_| Choice::default()).collect();
    let mut open = n;
    while open > 0 {
        // Past the deadline `merged` is dropped on return, which cancels the sequences.
        if Instant::now() >= deadline {
            return Err(timed_out(st));
        }
        let Ok(ev) = tokio::time::timeout_at(deadline, merged.recv()).await else { return Err(timed_out(st)) };
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
                c.text.push_str(&text);
                c.tokens.push(token);
            }
            Event::Done { finish, text, usage, .. } => {
                c.text.push_str(&text);
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
                json!({"index": i, "message": message, "logprobs": lp, "finish_reason": finish})
            } else {
                json!({"index": i, "text": c.text, "logprobs": lp, "finish_reason": finish})
            }
        })
        .collect();
    let mut body = ctx.envelope(if chat { "chat.completion" } else { "text_completion" }, Value::Array(out));
    body["usage"] = ctx.usage(&choices);
    crate::pd::annotate(st, &pd, &mut body);
    Ok((StatusCode::OK, axum::Json(body)).into_response())
}

fn data(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

/// The SSE answer: a writer task turns events into `data:` lines; the body streams them.
/// A client that leaves drops the body, the writer's send fails, and the sequences are
/// cancelled through `merge`.
fn sse(
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
        let mut choices: Vec<Choice> = (0..n).map(|_| Choice::default()).collect();
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
                let _ = tx.send(data(&timed_out(&ctx.st).body()));
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

/// GET /v1/models.
pub(crate) async fn models(State(st): St) -> Response {
    let body = json!({"object": "list", "data": [
        {"id": st.model_id, "object": "model", "created": st.created, "owned_by": "tl"}
    ]});
    counted(&st, "/v1/models", Ok(axum::Json(body).into_response()))
}

/// GET /metrics.
pub(crate) async fn metrics(State(st): St) -> Response {
    let stats = st.engine.stats();
    let text = crate::replica::metrics_text(&st, st.metrics.encode(&stats), &stats);
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text)
        .into_response()
}

/// Anything else: OpenAI's error body with 404.
pub(crate) async fn not_found() -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", "not_found", "no such endpoint").into_response()
}
