//! A Responses answer as OpenAI's event sequence, and the JSON answer it folds into:
//! `response.created`, `response.in_progress`; per output item `response.output_item.added`,
//! its parts and deltas (`response.reasoning_text.delta`, `response.content_part.added` /
//! `response.output_text.delta` / `.done` / `response.content_part.done`,
//! `response.function_call_arguments.delta` / `.done`) and `response.output_item.done`;
//! then `response.completed` (or `response.incomplete` when `max_output_tokens` cut it).
//! Every event has a `sequence_number`. An error after the start is an `error` event that
//! ends the stream.
//!
//! A non-streamed answer runs the same writer and returns the final response, so the two
//! give the same output items by construction.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Map, Value};
use tl_engine::{Event, FinishReason};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::answer::Answer;
use crate::api::new_id;
use crate::api::ApiError;
use crate::http;
use crate::reasoning::Split;
use crate::stream::{next_event, Next};
use crate::tools;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reasoning,
    Text,
    Call,
}

/// The stream's state: the output items so far, the open one, what the tool parser and
/// the reasoning split have seen.
struct Writer {
    a: Answer,
    out: Vec<Bytes>,
    seq: u64,
    /// Finished output items.
    output: Vec<Value>,
    /// The open item, its kind and its text so far (a call's arguments).
    open: Option<(Kind, Value, String)>,
    split: Option<Split>,
    /// With tools: the output so far, and what has gone out of it.
    text: String,
    sent: tools::Sent,
    /// The status an item gets when it closes: `incomplete` for the last one when
    /// `max_output_tokens` cut the answer (as OpenAI marks it).
    item_status: &'static str,
}

impl Writer {
    fn emit(&mut self, name: &str, mut data: Value) {
        data["type"] = json!(name);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        self.out.push(Bytes::from(format!("event: {name}\ndata: {data}\n\n")));
    }

    fn index(&self) -> usize {
        self.output.len()
    }

    /// Close the open item: its done events, then it joins `output`.
    fn close(&mut self) {
        let Some((kind, mut item, text)) = self.open.take() else { return };
        let (i, id) = (self.index(), item["id"].clone());
        match kind {
            Kind::Reasoning => {
                let at = json!({"item_id": id, "output_index": i, "content_index": 0});
                self.emit("response.reasoning_text.done", merge(at, json!({"text": text})));
                item["content"] = json!([{"type": "reasoning_text", "text": text}]);
            }
            Kind::Text => {
                let part = json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
                let at = json!({"item_id": id, "output_index": i, "content_index": 0});
                self.emit("response.output_text.done", merge(at.clone(), json!({"text": text, "logprobs": []})));
                self.emit("response.content_part.done", merge(at, json!({"part": part})));
                item["content"] = json!([part]);
            }
            Kind::Call => {
                let at = json!({"item_id": id, "output_index": i});
                self.emit("response.function_call_arguments.done", merge(at, json!({"arguments": text})));
                item["arguments"] = json!(text);
            }
        }
        item["status"] = json!(self.item_status);
        self.emit("response.output_item.done", json!({"output_index": i, "item": item}));
        self.output.push(item);
    }

    fn start(&mut self, kind: Kind, item: Value) {
        self.close();
        let i = self.index();
        self.emit("response.output_item.added", json!({"output_index": i, "item": item}));
        if kind == Kind::Text {
            let part = json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
            let at = json!({"item_id": item["id"], "output_index": i, "content_index": 0});
            self.emit("response.content_part.added", merge(at, json!({"part": part})));
        }
        self.open = Some((kind, item, String::new()));
    }

    /// Text for an item of `kind` (opened when another is open): its delta event.
    fn delta(&mut self, kind: Kind, s: &str) {
        if s.is_empty() {
            return;
        }
        if self.open.as_ref().map(|o| o.0) != Some(kind) {
            let item = match kind {
                Kind::Reasoning => json!({"type": "reasoning", "id": new_id("rs"), "summary": [], "content": []}),
                Kind::Text => json!({"type": "message", "id": new_id("msg"), "status": "in_progress",
                                     "role": "assistant", "content": []}),
                // A call's item is opened by `tool_deltas`, which knows its name.
                Kind::Call => return,
            };
            self.start(kind, item);
        }
        let Some((_, item, text)) = self.open.as_mut() else { return };
        text.push_str(s);
        let at = json!({"item_id": item["id"], "output_index": self.output.len()});
        let (name, extra) = match kind {
            Kind::Reasoning => ("response.reasoning_text.delta", json!({"content_index": 0, "delta": s})),
            Kind::Text => ("response.output_text.delta", json!({"content_index": 0, "delta": s, "logprobs": []})),
            Kind::Call => ("response.function_call_arguments.delta", json!({"delta": s})),
        };
        self.emit(name, merge(at, extra));
    }

    /// The tool parser's OpenAI-shaped deltas as items: content as message text, a call's
    /// first delta opens its `function_call` item, its argument text goes out as deltas.
    fn tool_deltas(&mut self, deltas: Vec<Map<String, Value>>) {
        for d in deltas {
            if let Some(t) = d.get("content").and_then(Value::as_str) {
                self.delta(Kind::Text, t);
            }
            let Some(call) = d.get("tool_calls").and_then(|c| c.get(0)) else { continue };
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                let item = json!({"type": "function_call", "id": format!("fc_{}", id.trim_start_matches("call_")),
                                  "call_id": id, "name": call["function"]["name"], "arguments": "",
                                  "status": "in_progress"});
                self.start(Kind::Call, item);
            }
            if let Some(args) = call["function"]["arguments"].as_str() {
                self.delta(Kind::Call, args);
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
                self.delta(Kind::Text, text);
                return;
            }
        };
        self.delta(Kind::Reasoning, &parts.reasoning);
        self.delta(Kind::Text, &parts.content);
    }

    /// The last events; the final response (stored unless `store: false`).
    fn finish(&mut self, finish: FinishReason, usage: &tl_engine::Usage) -> Value {
        let cut = finish == FinishReason::Length;
        if cut {
            self.item_status = "incomplete";
        }
        self.close();
        let r = self.a.response(&self.output, Some(cut), Some(usage));
        let output = std::mem::take(&mut self.output);
        self.a.keep(&output, &r);
        let name = if cut { "response.incomplete" } else { "response.completed" };
        self.emit(name, json!({"response": r}));
        r
    }
}

fn merge(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

/// Why the events stopped before the end.
enum Stopped {
    /// The client left.
    Gone,
    /// An error, to answer.
    Error(ApiError),
}

/// Run the answer through `w`, sending its events to `tx` (none: a JSON answer);
/// the final response.
async fn drive(
    w: &mut Writer,
    mut merged: mpsc::UnboundedReceiver<(usize, Event)>,
    deadline: Instant,
    tx: Option<&mpsc::UnboundedSender<Bytes>>,
) -> Result<Value, Stopped> {
    let start = w.a.response(&[], None, None);
    w.emit("response.created", json!({"response": start}));
    w.emit("response.in_progress", json!({"response": start}));
    loop {
        let out = std::mem::take(&mut w.out);
        if let Some(tx) = tx {
            for b in out {
                tx.send(b).map_err(|_| Stopped::Gone)?;
            }
        }
        // Dropping `merged` on return cancels the sequence.
        let ev = match next_event(&mut merged, deadline, tx).await {
            Next::Gone => return Err(Stopped::Gone),
            Next::TimedOut => None,
            Next::Event(ev) => Some(ev),
        };
        match ev {
            None => return Err(Stopped::Error(http::timed_out(&w.a.st))),
            Some(None) => {
                return Err(Stopped::Error(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    "internal_error",
                    "engine gone",
                )))
            }
            Some(Some((_, Event::Token { text, .. }))) => w.push(&text, false),
            Some(Some((_, Event::Done { finish, text, usage, .. }))) => {
                w.push(&text, true);
                let r = w.finish(finish, &usage);
                if let Some(tx) = tx {
                    for b in w.out.drain(..) {
                        let _ = tx.send(b);
                    }
                }
                return Ok(r);
            }
            Some(Some((_, Event::Error(e)))) => return Err(Stopped::Error(e.into())),
        }
    }
}

fn writer(a: Answer) -> Writer {
    let split = a.think.map(Split::new);
    Writer {
        a,
        out: Vec::new(),
        seq: 0,
        output: Vec::new(),
        open: None,
        split,
        text: String::new(),
        sent: tools::Sent::default(),
        item_status: "completed",
    }
}

/// The whole answer as one response object.
pub(super) async fn collect(
    a: Answer,
    merged: mpsc::UnboundedReceiver<(usize, Event)>,
    deadline: Instant,
) -> Result<Value, ApiError> {
    let mut w = writer(a);
    drive(&mut w, merged, deadline, None).await.map_err(|s| match s {
        Stopped::Error(e) => e,
        Stopped::Gone => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "internal_error", "gone"),
    })
}

/// The SSE answer: a task turns the engine's events into Responses events; the body
/// streams them. A client that leaves drops the body, the task's send fails, and the
/// sequence is cancelled (generate.rs's `merge`).
pub(super) fn sse(a: Answer, merged: mpsc::UnboundedReceiver<(usize, Event)>, deadline: Instant) -> Response {
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    tokio::spawn(async move {
        let mut w = writer(a);
        if let Err(Stopped::Error(e)) = drive(&mut w, merged, deadline, Some(&tx)).await {
            let mut data = e.body()["error"].clone();
            data["type"] = json!("error");
            data["sequence_number"] = json!(w.seq);
            let _ = tx.send(Bytes::from(format!("event: error\ndata: {data}\n\n")));
        }
    });
    crate::stream::event_stream(rx)
}
