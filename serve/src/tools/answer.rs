//! A request with active tools answered: the finished output as a message with
//! `tool_calls`, or while streaming the deltas OpenAI's clients accumulate.

use axum::body::Bytes;
use serde_json::{json, Map, Value};
use tl_engine::FinishReason;

use super::{call_id, parse_output, Format, ToolChoice};

/// What answering a request whose `tool_choice` is not `none` needs.
#[derive(Debug)]
pub struct Active {
    /// The template's format.
    pub format: Format,
    /// `tool_choice`.
    pub choice: ToolChoice,
    /// The request body (call ids hash it).
    pub body: Bytes,
    /// The request's seed (call ids hash it).
    pub seed: u64,
}

/// What a stream has sent of one choice.
#[derive(Debug, Default)]
pub struct Sent {
    /// Bytes of content.
    content: usize,
    /// Bytes of arguments, per call whose first delta went out.
    args: Vec<usize>,
    /// The output ended as complete calls.
    pub called: bool,
}

impl Active {
    fn id(&self, fingerprint: &str, choice: usize, index: usize) -> String {
        call_id(fingerprint, &self.body, self.seed, choice, index)
    }

    /// A finished choice's message and finish reason: a complete call section becomes
    /// `tool_calls` (content the text before it, or null) and `finish_reason:
    /// "tool_calls"`; a call cut short by `length` stays text.
    pub fn answer(
        &self,
        fingerprint: &str,
        i: usize,
        text: &str,
        finish: Option<FinishReason>,
    ) -> (Value, Option<&'static str>) {
        let finish_s = finish.map(FinishReason::as_str);
        let plain = |content: &str| json!({"role": "assistant", "content": content, "refusal": null});
        let p = parse_output(self.format, &self.choice, text, true);
        if p.calls.is_empty() {
            return (plain(&p.content), finish_s);
        }
        if !p.calls.iter().all(|c| c.done) {
            return (plain(text), finish_s);
        }
        let calls: Vec<Value> = p
            .calls
            .iter()
            .enumerate()
            .map(|(k, c)| {
                json!({"id": self.id(fingerprint, i, k), "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
        let content = if p.content.trim().is_empty() { Value::Null } else { json!(p.content) };
        let finish = if finish == Some(FinishReason::Stop) { Some("tool_calls") } else { finish_s };
        (json!({"role": "assistant", "content": content, "refusal": null, "tool_calls": calls}), finish)
    }

    /// The deltas choice `i` owes after its text grew to `text`: new content, then for each
    /// call its first delta (index, id, type, name, empty arguments) and the argument text
    /// since the last delta. `done`: the output is complete.
    pub fn deltas(
        &self,
        fingerprint: &str,
        i: usize,
        text: &str,
        done: bool,
        sent: &mut Sent,
    ) -> Vec<Map<String, Value>> {
        let p = parse_output(self.format, &self.choice, text, done);
        let mut out = Vec::new();
        // A call cut short at the end stays unreported (the non-streamed answer gives it as text).
        let calls = if done && !p.calls.iter().all(|x| x.done) { &[][..] } else { &p.calls[..] };
        let content = if done && calls.is_empty() && !p.calls.is_empty() { text } else { p.content.as_str() };
        if content.len() > sent.content && content.is_char_boundary(sent.content) {
            let mut d = Map::new();
            d.insert("content".into(), json!(content[sent.content..]));
            out.push(d);
            sent.content = content.len();
        }
        for (k, call) in calls.iter().enumerate() {
            if sent.args.len() == k {
                let f = json!({"name": call.name, "arguments": ""});
                let tc = json!({"index": k, "id": self.id(fingerprint, i, k), "type": "function", "function": f});
                let mut d = Map::new();
                d.insert("tool_calls".into(), json!([tc]));
                out.push(d);
                sent.args.push(0);
            }
            let at = sent.args[k];
            if call.arguments.len() > at && call.arguments.is_char_boundary(at) {
                let mut d = Map::new();
                d.insert("tool_calls".into(), json!([{"index": k, "function": {"arguments": call.arguments[at..]}}]));
                out.push(d);
                sent.args[k] = call.arguments.len();
            }
        }
        if done && !calls.is_empty() {
            sent.called = true;
        }
        out
    }
}
