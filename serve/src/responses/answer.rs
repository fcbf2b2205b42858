//! One Responses answer's fixed parts ([`Answer`]: id, creation time, tools, the
//! translated request) and the response object around its output items, shared by the
//! handler (responses.rs) and the stream that writes the answer (responses/stream.rs).

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::request::Translated;
use crate::state::AppState;
use crate::tools;

/// One answer's fixed parts.
pub(crate) struct Answer {
    pub(super) st: Arc<AppState>,
    /// `system_fingerprint` (the adapter's when the request ran under one).
    pub(super) fingerprint: String,
    pub(super) id: String,
    pub(super) created: u64,
    pub(super) tools: Option<tools::Active>,
    pub(super) think: Option<bool>,
    pub(super) t: Translated,
}

impl Answer {
    /// The response object around `output`. `finish`: `None` while it runs (status
    /// `in_progress`); `Some(cut)` once done, `cut` when `max_output_tokens` ended it.
    pub(super) fn response(&self, output: &[Value], finish: Option<bool>, usage: Option<&tl_engine::Usage>) -> Value {
        let status = match finish {
            None => "in_progress",
            Some(true) => "incomplete",
            Some(false) => "completed",
        };
        let mut r = Map::new();
        r.insert("id".into(), json!(self.id));
        r.insert("object".into(), json!("response"));
        r.insert("created_at".into(), json!(self.created));
        r.insert("status".into(), json!(status));
        r.insert("model".into(), json!(self.st.model_id));
        r.insert("output".into(), json!(output));
        r.insert("error".into(), Value::Null);
        let incomplete = if finish == Some(true) { json!({"reason": "max_output_tokens"}) } else { Value::Null };
        r.insert("incomplete_details".into(), incomplete);
        for k in ["instructions", "max_output_tokens", "temperature", "top_p", "metadata"] {
            r.insert(k.into(), self.t.echo.get(k).cloned().unwrap_or(Value::Null));
        }
        r.insert("tools".into(), self.t.echo.get("tools").cloned().unwrap_or(json!([])));
        r.insert("tool_choice".into(), self.t.echo.get("tool_choice").cloned().unwrap_or(json!("auto")));
        r.insert("parallel_tool_calls".into(), self.t.echo.get("parallel_tool_calls").cloned().unwrap_or(json!(true)));
        r.insert("text".into(), self.t.echo.get("text").cloned().unwrap_or(json!({"format": {"type": "text"}})));
        r.insert("previous_response_id".into(), json!(self.t.previous));
        r.insert("store".into(), json!(self.t.store));
        r.insert("usage".into(), usage.map_or(Value::Null, Self::usage));
        // tl's extension (not OpenAI's): what `verify --replay` checks.
        r.insert("system_fingerprint".into(), json!(self.fingerprint));
        Value::Object(r)
    }

    /// `usage`: OpenAI counts cached prompt tokens inside `input_tokens`. Reasoning tokens
    /// are not counted apart (the engine counts tokens, the split reads text).
    pub(super) fn usage(u: &tl_engine::Usage) -> Value {
        json!({
            "input_tokens": u.prompt_tokens,
            "input_tokens_details": {"cached_tokens": u.cached_tokens.min(u.prompt_tokens), "cache_write_tokens": 0},
            "output_tokens": u.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.prompt_tokens + u.completion_tokens,
        })
    }

    /// Keep a finished answer for `previous_response_id` (unless `store: false`): the
    /// conversation so far, then the output items as the input items that mean them.
    pub(super) fn keep(&mut self, output: &[Value], response: &Value) {
        if !self.t.store {
            return;
        }
        let mut items = std::mem::take(&mut self.t.items);
        items.extend(output.iter().filter(|o| o["type"] != "reasoning").cloned());
        self.st.responses.put(self.id.clone(), items, response.clone());
    }
}
