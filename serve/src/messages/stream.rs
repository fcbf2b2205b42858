//! A Messages answer streamed in Anthropic's event sequence: `message_start`; per content
//! block `content_block_start`, its deltas (`thinking_delta` then an empty
//! `signature_delta`, `text_delta`, `input_json_delta`) and `content_block_stop`;
//! `message_delta` with the stop reason and usage; `message_stop`. An error after the
//! start is an `error` event that ends the stream.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Map, Value};
use tl_engine::{Event, FinishReason};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{error_body, Answer};
use crate::api::ApiError;
use crate::http;
use crate::reasoning::Split;
use crate::stream::{next_event, Next};
use crate::tools;

fn event(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    Thinking,
    Text,
    Tool,
}

/// The stream's state: the open block and its index, what the tool parser has sent.
struct Writer {
    a: Answer,
    out: Vec<Bytes>,
    /// The open block, and the index of the block open or next.
    open: Option<Block>,
    index: usize,
    split: Option<Split>,
    ids: Vec<u32>,
    /// With tools: the output so far, and what has gone out of it.
    text: String,
    sent: tools::Sent,
}

impl Writer {
    fn emit(&mut self, name: &str, mut data: Value) {
        data["type"] = json!(name);
        self.out.push(event(name, &data));
    }

    fn close(&mut self) {
        let Some(b) = self.open.take() else { return };
        if b == Block::Thinking {
            // tl's thinking is not signed: the signature is empty.
            self.emit(
                "content_block_delta",
                json!({"index": self.index, "delta": {"type": "signature_delta", "signature": ""}}),
            );
        }
        self.emit("content_block_stop", json!({"index": self.index}));
        self.index += 1;
    }

    fn start(&mut self, b: Block, block: Value) {
        self.close();
        self.emit("content_block_start", json!({"index": self.index, "content_block": block}));
        self.open = Some(b);
    }

    fn delta(&mut self, delta: Value) {
        self.emit("content_block_delta", json!({"index": self.index, "delta": delta}));
    }

    fn thinking(&mut self, s: &str) {
        if s.is_empty() {
            return;
        }
        if self.open != Some(Block::Thinking) {
            self.start(Block::Thinking, json!({"type": "thinking", "thinking": "", "signature": ""}));
        }
        self.delta(json!({"type": "thinking_delta", "thinking": s}));
    }

    fn text(&mut self, s: &str) {
        if s.is_empty() {
            return;
        }
        if self.open != Some(Block::Text) {
            self.start(Block::Text, json!({"type": "text", "text": ""}));
        }
        self.delta(json!({"type": "text_delta", "text": s}));
    }

    /// The tool parser's OpenAI-shaped deltas as blocks: content as text, a call's first
    /// delta opens its `tool_use` block, its argument text goes out as `input_json_delta`.
    fn tool_deltas(&mut self, deltas: Vec<Map<String, Value>>) {
        for d in deltas {
            if let Some(t) = d.get("content").and_then(Value::as_str) {
                self.text(t);
            }
            let Some(call) = d.get("tool_calls").and_then(|c| c.get(0)) else { continue };
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                let name = call["function"]["name"].clone();
                let block = json!({"type": "tool_use", "id": Answer::tool_id(id), "name": name, "input": {}});
                self.start(Block::Tool, block);
            }
            match call["function"]["arguments"].as_str() {
                Some(args) if !args.is_empty() => self.delta(json!({"type": "input_json_delta", "partial_json": args})),
                _ => {}
            }
        }
    }

    /// Released text of the answer (`done`: the last of it).
    fn push(&mut self, text: &str, done: bool) {
        if let Some(t) = &self.a.tools {
            self.text.push_str(text);
            let deltas = t.deltas(&self.a.fingerprint, 0, &self.text, done, &mut self.sent);
            self.tool_deltas(deltas);
            return;
        }
        let parts = match self.split.as_mut() {
            Some(s) if done => s.end(text),
            Some(s) => s.push(text),
            None => {
                self.text(text);
                return;
            }
        };
        self.thinking(&parts.reasoning);
        self.text(&parts.content);
    }

    fn finish(&mut self, finish: FinishReason, usage: &tl_engine::Usage) {
        self.close();
        let (reason, seq) = self.a.stop_reason(finish, &self.ids, self.sent.called);
        let delta = json!({"stop_reason": reason, "stop_sequence": seq});
        self.emit("message_delta", json!({"delta": delta, "usage": Answer::usage(usage)}));
        self.emit("message_stop", json!({}));
    }
}

/// The SSE answer: a task turns the engine's events into Anthropic's; the body streams
/// them. A client that leaves drops the body, the task's send fails, and the sequence is
/// cancelled (generate.rs's `merge`).
pub(super) fn sse(a: Answer, mut merged: mpsc::UnboundedReceiver<(usize, Event)>, deadline: Instant) -> Response {
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    tokio::spawn(async move {
        let split = a.think.map(Split::new);
        let start_usage = json!({"input_tokens": a.prompt_len, "output_tokens": 0});
        let start = a.message(json!([]), (None, None), start_usage);
        let mut w = Writer {
            a,
            out: Vec::new(),
            open: None,
            index: 0,
            split,
            ids: Vec::new(),
            text: String::new(),
            sent: tools::Sent::default(),
        };
        w.emit("message_start", json!({"message": start}));
        loop {
            for b in w.out.drain(..) {
                if tx.send(b).is_err() {
                    return;
                }
            }
            let ev = match next_event(&mut merged, deadline, Some(&tx)).await {
                Next::Gone => return,
                Next::TimedOut => None,
                Next::Event(ev) => Some(ev),
            };
            let err = match ev {
                None => http::timed_out(&w.a.st),
                Some(None) => {
                    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "internal_error", "engine gone")
                }
                Some(Some((_, Event::Token { token, text }))) => {
                    w.ids.push(token.id);
                    w.push(&text, false);
                    continue;
                }
                Some(Some((_, Event::Done { finish, text, usage, .. }))) => {
                    w.push(&text, true);
                    w.finish(finish, &usage);
                    for b in w.out.drain(..) {
                        let _ = tx.send(b);
                    }
                    return;
                }
                Some(Some((_, Event::Error(e)))) => e.into(),
            };
            let _ = tx.send(event("error", &error_body(&err)));
            return;
        }
    });
    crate::stream::event_stream(rx)
}
