//! The streaming writer: a choice's engine events into `data:` lines of OpenAI's
//! chunk shapes, then `[DONE]`.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use tl_engine::{Event, FinishReason, TokenInfo, Usage};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::answer::{Choice, Ctx};
use crate::api::ApiError;
use crate::http;

fn data(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

const DONE: &[u8] = b"data: [DONE]\n\n";

/// An event that continues a choice (an error ends the whole stream instead).
enum Piece {
    Token(TokenInfo, String),
    Done(FinishReason, String, Usage),
}

/// Turns one answer's events into OpenAI's chunks: plain text, reasoning split
/// (reasoning.rs) or tool call deltas (tools.rs), by what the answer asked for.
struct Writer {
    ctx: Ctx,
    object: &'static str,
    include_usage: bool,
}

impl Writer {
    /// One choice's chunk: the envelope around it (`usage: null` until the last chunk when
    /// usage is asked for).
    fn frame(&self, choice: Value) -> Bytes {
        let mut v = self.ctx.envelope(self.object, json!([choice]));
        if self.include_usage {
            v["usage"] = Value::Null;
        }
        data(&v)
    }

    /// A plain chunk: chat's delta (with the role on the first) or a completion's text.
    fn chunk(&self, i: usize, content: Option<&str>, role: bool, lp: Value, finish: Option<FinishReason>) -> Bytes {
        let finish = finish.map(FinishReason::as_str);
        if !self.ctx.chat {
            return self
                .frame(json!({"index": i, "text": content.unwrap_or(""), "logprobs": lp, "finish_reason": finish}));
        }
        let mut delta = Map::new();
        if role {
            delta.insert("role".into(), json!("assistant"));
            delta.insert("refusal".into(), Value::Null);
        }
        if let Some(c) = content {
            delta.insert("content".into(), json!(c));
        }
        self.frame(json!({"index": i, "delta": delta, "logprobs": lp, "finish_reason": finish}))
    }

    /// A chat chunk with a ready delta.
    fn delta(&self, i: usize, delta: Map<String, Value>, lp: Value, finish: Option<&str>) -> Bytes {
        self.frame(json!({"index": i, "delta": delta, "logprobs": lp, "finish_reason": finish}))
    }

    /// The logprobs of the tokens no chunk reported yet (null when none), now reported.
    fn unsent(&self, c: &mut Choice) -> Value {
        let lp = if c.unsent.is_empty() { Value::Null } else { self.ctx.logprobs(&c.unsent, 0) };
        c.unsent.clear();
        lp
    }

    /// The chunks of one piece of choice `i`, and whether it finished the choice.
    fn piece(&self, c: &mut Choice, i: usize, piece: Piece) -> (Vec<Bytes>, bool) {
        if self.ctx.tools.is_some() {
            self.tool_piece(c, i, piece)
        } else if c.split.is_some() {
            self.split_piece(c, i, piece)
        } else {
            self.plain_piece(c, i, piece)
        }
    }

    /// Tool answers: the text is read as a call section as it grows; deltas go out in
    /// OpenAI's shape, each token's logprobs with the next delta.
    fn tool_piece(&self, c: &mut Choice, i: usize, piece: Piece) -> (Vec<Bytes>, bool) {
        let finish = match piece {
            Piece::Token(token, text) => {
                c.unsent.push(token);
                c.text.push_str(&text);
                None
            }
            Piece::Done(finish, text, usage) => {
                c.text.push_str(&text);
                c.usage = usage;
                Some(finish)
            }
        };
        let deltas = match &self.ctx.tools {
            Some(t) => t.deltas(&self.ctx.fingerprint, i, &c.text, finish.is_some(), &mut c.sent),
            None => Vec::new(),
        };
        let mut out: Vec<Bytes> = deltas.into_iter().map(|d| self.delta(i, d, self.unsent(c), None)).collect();
        if let Some(f) = finish {
            let lp = self.unsent(c);
            let f = if c.sent.called && f == FinishReason::Stop { "tool_calls" } else { f.as_str() };
            out.push(self.delta(i, Map::new(), lp, Some(f)));
        }
        (out, finish.is_some())
    }

    /// Reasoning split: thinking goes out as `reasoning_content` deltas, the answer as
    /// `content` ones; each token's logprobs with the next delta.
    fn split_piece(&self, c: &mut Choice, i: usize, piece: Piece) -> (Vec<Bytes>, bool) {
        let Some(split) = c.split.as_mut() else { return self.plain_piece(c, i, piece) };
        let (parts, finish) = match piece {
            Piece::Token(token, text) => {
                c.unsent.push(token);
                (split.push(&text), None)
            }
            Piece::Done(finish, text, usage) => {
                c.usage = usage;
                (split.end(&text), Some(finish))
            }
        };
        let mut out = Vec::new();
        for (field, part) in [("reasoning_content", parts.reasoning), ("content", parts.content)] {
            if !part.is_empty() {
                let mut delta = Map::new();
                delta.insert(field.into(), json!(part));
                out.push(self.delta(i, delta, self.unsent(c), None));
            }
        }
        if let Some(f) = finish {
            out.push(self.delta(i, Map::new(), self.unsent(c), Some(f.as_str())));
        }
        (out, finish.is_some())
    }

    /// Plain text: a chunk per token that released text, with its logprobs.
    fn plain_piece(&self, c: &mut Choice, i: usize, piece: Piece) -> (Vec<Bytes>, bool) {
        let mut out = Vec::new();
        match piece {
            Piece::Token(token, text) => {
                c.unsent.push(token);
                if !text.is_empty() {
                    let lp = self.ctx.logprobs(&c.unsent, c.text.len());
                    c.unsent.clear();
                    out.push(self.chunk(i, Some(&text), false, lp, None));
                    c.text.push_str(&text);
                }
                (out, false)
            }
            Piece::Done(finish, text, usage) => {
                if !text.is_empty() || !c.unsent.is_empty() {
                    let lp = self.ctx.logprobs(&c.unsent, c.text.len());
                    c.unsent.clear();
                    out.push(self.chunk(i, Some(&text), false, lp, None));
                }
                c.usage = usage;
                let last = if self.ctx.chat { None } else { Some("") };
                out.push(self.chunk(i, last, false, Value::Null, Some(finish)));
                (out, true)
            }
        }
    }
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
        let w = Writer { ctx, object, include_usage };
        let mut choices: Vec<Choice> = w.ctx.choices(n);
        if w.ctx.chat {
            for i in 0..n {
                if tx.send(w.chunk(i, Some(""), true, Value::Null, None)).is_err() {
                    return;
                }
            }
        }
        let mut open = n;
        while open > 0 {
            let ev = match next_event(&mut merged, deadline, Some(&tx)).await {
                Next::Gone => return,
                Next::TimedOut => None,
                Next::Event(ev) => Some(ev),
            };
            let Some(ev) = ev else {
                let _ = tx.send(data(&http::timed_out(&w.ctx.st).body()));
                let _ = tx.send(Bytes::from_static(DONE));
                return;
            };
            let Some((i, ev)) = ev else { break };
            let piece = match ev {
                Event::Token { token, text } => Piece::Token(token, text),
                Event::Done { finish, text, usage, .. } => Piece::Done(finish, text, usage),
                Event::Error(e) => {
                    let _ = tx.send(data(&ApiError::from(e).body()));
                    let _ = tx.send(Bytes::from_static(DONE));
                    return;
                }
            };
            let (out, finished) = w.piece(&mut choices[i], i, piece);
            if finished {
                open -= 1;
            }
            for b in out {
                if tx.send(b).is_err() {
                    return;
                }
            }
        }
        if include_usage {
            let mut v = w.ctx.envelope(object, json!([]));
            v["usage"] = w.ctx.usage(&choices);
            let _ = tx.send(data(&v));
        }
        let _ = tx.send(Bytes::from_static(DONE));
    });
    event_stream(rx)
}

/// What came next for a streamed request.
pub(crate) enum Next {
    /// The engine's next event (`None`: the engine is gone).
    Event(Option<(usize, Event)>),
    /// The deadline passed first.
    TimedOut,
    /// The client went (its receiver closed).
    Gone,
}

/// The next engine event, unless the deadline passes first or the client goes (`tx`
/// closed; `None`: no client to watch). Past the deadline nothing more goes out, checked
/// by hand as well: the timer wheel ticks each millisecond, so a passed deadline may not
/// fire yet. Every streaming surface waits through this one.
pub(crate) async fn next_event(
    merged: &mut mpsc::UnboundedReceiver<(usize, Event)>,
    deadline: Instant,
    tx: Option<&mpsc::UnboundedSender<Bytes>>,
) -> Next {
    if Instant::now() >= deadline {
        return Next::TimedOut;
    }
    let closed = async {
        match tx {
            Some(tx) => tx.closed().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        _ = tokio::time::sleep_until(deadline) => Next::TimedOut,
        _ = closed => Next::Gone,
        ev = merged.recv() => Next::Event(ev),
    }
}

/// A `text/event-stream` response whose body is what `rx` receives, until its senders go.
/// Every streaming surface (chat, completions, messages, responses) answers through this one.
pub(crate) fn event_stream(rx: mpsc::UnboundedReceiver<Bytes>) -> Response {
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
