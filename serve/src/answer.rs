//! The OpenAI shapes an answer is made of, streamed or not: per-choice state, logprobs,
//! usage and the envelope around the choices.

use std::sync::Arc;

use serde_json::{json, Map, Value};
use tl_engine::{FinishReason, TokenInfo, Usage};

use crate::reasoning::Split;
use crate::state::AppState;
use crate::tools;

/// Per-choice state while answering.
#[derive(Default)]
pub(crate) struct Choice {
    pub(crate) text: String,
    pub(crate) tokens: Vec<TokenInfo>,
    /// Tokens not yet reported in a stream chunk.
    pub(crate) unsent: Vec<TokenInfo>,
    pub(crate) finish: Option<FinishReason>,
    pub(crate) usage: Usage,
    /// With tools (streaming): what has been sent.
    pub(crate) sent: tools::Sent,
    /// The reasoning split, when the answer's thinking is returned apart (reasoning.rs).
    pub(crate) split: Option<Split>,
    /// Reasoning text (non-streaming).
    pub(crate) reasoning: String,
}

/// One answer's fixed parts: its id, its kind (chat or text completion) and what it
/// shows.
pub(crate) struct Ctx {
    pub(crate) st: Arc<AppState>,
    /// `system_fingerprint` (the adapter's when the request ran under one).
    pub(crate) fingerprint: String,
    pub(crate) chat: bool,
    pub(crate) id: String,
    pub(crate) created: u64,
    pub(crate) logprobs: Option<usize>,
    pub(crate) tools: Option<tools::Active>,
    /// `Some(open)`: split the reasoning off, starting inside it when `open`.
    pub(crate) think: Option<bool>,
}

impl Choice {
    /// Add released text: to the answer, or through the reasoning split.
    pub(crate) fn push_text(&mut self, text: &str) {
        match self.split.as_mut() {
            Some(s) => {
                let parts = s.push(text);
                self.reasoning.push_str(&parts.reasoning);
                self.text.push_str(&parts.content);
            }
            None => self.text.push_str(text),
        }
    }

    /// Add the text released at the end (not a token's), and whatever the split held.
    pub(crate) fn end_text(&mut self, text: &str) {
        match self.split.as_mut() {
            Some(s) => {
                let parts = s.end(text);
                self.reasoning.push_str(&parts.reasoning);
                self.text.push_str(&parts.content);
            }
            None => self.text.push_str(text),
        }
    }
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

    /// `logprobs` of `toks` in the answer's shape (null when not asked).
    pub(crate) fn logprobs(&self, toks: &[TokenInfo], offset: usize) -> Value {
        match self.logprobs {
            None => Value::Null,
            Some(_) if self.chat => self.chat_logprobs(toks),
            Some(_) => self.completion_logprobs(toks, offset),
        }
    }

    /// The per-choice state of `n` choices.
    pub(crate) fn choices(&self, n: usize) -> Vec<Choice> {
        (0..n).map(|_| Choice { split: self.think.map(Split::new), ..Choice::default() }).collect()
    }

    /// `usage` over every choice.
    pub(crate) fn usage(&self, choices: &[Choice]) -> Value {
        let prompt = choices.first().map_or(0, |c| c.usage.prompt_tokens);
        let completion: usize = choices.iter().map(|c| c.usage.completion_tokens).sum();
        let cached = choices.iter().map(|c| c.usage.cached_tokens).max().unwrap_or(0);
        let reasoning: usize = choices.iter().filter_map(|c| c.split.as_ref()).map(Split::reasoning_tokens).sum();
        json!({
            "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            // tl has no predicted outputs: those are 0 by definition.
            "completion_tokens_details": {
                "reasoning_tokens": reasoning, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0,
            },
        })
    }

    /// The fields around `choices`.
    pub(crate) fn envelope(&self, object: &str, choices: Value) -> Value {
        json!({
            "id": self.id, "object": object, "created": self.created, "model": self.st.model_id,
            "system_fingerprint": self.fingerprint, "choices": choices,
        })
    }
}
