//! What goes into the engine (a [`Request`]) and what comes out of it ([`Event`]s).

use std::sync::Arc;
use std::time::Duration;

use tl_core::{Adapter, Applied, SamplingParams};

use crate::error::EngineError;
use crate::grammar::Grammar;
use crate::speculate::Speculation;

/// One sequence to generate: a prompt, how to sample, and when to stop.
///
/// A request with `n > 1` choices is `n` of these with the same seed and choices `0..n`.
#[derive(Clone, Debug)]
pub struct Request {
    /// Prompt token ids (never empty).
    pub prompt: Vec<u32>,
    /// Sampling parameters (sampling.md).
    pub params: SamplingParams,
    /// The seed; with `choice` it alone fixes the sampling stream (pcg32.md).
    pub seed: u64,
    /// The choice index inside its request (0 for a single choice).
    pub choice: u32,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Stop strings: the output ends before the first one that appears; not emitted.
    pub stop: Vec<String>,
    /// `None`: no logprobs; `Some(k)`: the chosen token's logprob and the `k` best.
    pub logprobs: Option<usize>,
    /// A grammar the output must match (sampling.md step 3a), compiled at submit.
    pub grammar: Option<Grammar>,
    /// OpenAI's `logit_bias` (step 3a): `(id, bias)`, each id once, bias in [-100, 100];
    /// -100 bans the id.
    pub logit_bias: Vec<(u32, f64)>,
    /// Speculative decoding for this request; `None` takes the engine's setting
    /// (`EngineOptions::speculate`). Never changes the output, only its speed.
    pub speculate: Option<Speculation>,
    /// The LoRA adapter the sequence runs under, or `None` for the base model. Its
    /// prefix-cache, disk-cache and P/D blocks are keyed by it ([`AdapterChoice::key`]).
    pub adapter: Option<AdapterChoice>,
}

/// A request's LoRA adapter (docs/spec/numbers.md, "Adapters"): one loaded by the
/// runner ([`tl_core::ModelRunner::load_adapter`]), shared by every request using it,
/// and the request's scale on it (1 unless asked: llama.cpp's `lora: [{id, scale}]`).
#[derive(Clone, Debug)]
pub struct AdapterChoice {
    /// The adapter.
    pub adapter: Arc<Adapter>,
    /// Multiplies its `alpha / r`.
    pub scale: f32,
}

impl AdapterChoice {
    /// The adapter at scale 1.
    pub fn new(adapter: Arc<Adapter>) -> AdapterChoice {
        AdapterChoice { adapter, scale: 1.0 }
    }

    /// What a step's sequence carries.
    pub fn applied(&self) -> Applied<'_> {
        Applied { adapter: &self.adapter, scale: self.scale }
    }

    /// The root of the sequence's block-hash chain: the adapter's digest and the scale,
    /// so a block computed under one adapter (or scale) is never found for another.
    pub fn key(&self) -> u64 {
        self.applied().key()
    }
}

/// The first parent of a prompt's block-hash chain: `None` for the base model, the
/// adapter's key otherwise.
pub(crate) fn chain_root(adapter: Option<&AdapterChoice>) -> Option<u64> {
    adapter.map(AdapterChoice::key)
}

/// Why a sequence ended (OpenAI's `finish_reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-sequence token or a stop string.
    Stop,
    /// `max_tokens`, or the model's context is full.
    Length,
}

impl FinishReason {
    /// OpenAI's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// One sampled token.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenInfo {
    /// Its id.
    pub id: u32,
    /// Its logprob under the penalised distribution (sampling.md step 4), when asked.
    pub logprob: f64,
    /// The best `(id, logprob)` pairs, best first, ties by id (empty unless asked).
    pub top: Vec<(u32, f64)>,
}

/// Token counts of a finished sequence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens (an end-of-sequence token is not counted).
    pub completion_tokens: usize,
    /// Prompt tokens served from the prefix cache at first admission.
    pub cached_tokens: usize,
}

/// Per-request timings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timings {
    /// Submit to first token.
    pub ttft: Option<Duration>,
    /// Submit to finish.
    pub total: Duration,
    /// Times this sequence was preempted (its blocks released) and recomputed.
    pub preempted: u32,
}

/// What the engine streams back for one sequence, in order: any number of `Token`s, then
/// exactly one `Done` or `Error`.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A token was sampled; `text` is the output text it released (possibly empty: an
    /// unfinished UTF-8 character, or text held back because a stop string may begin).
    Token {
        /// The token.
        token: TokenInfo,
        /// Newly released text.
        text: String,
    },
    /// The sequence finished; `text` is the rest of the output text.
    Done {
        /// Why.
        finish: FinishReason,
        /// Text released at the end.
        text: String,
        /// Token counts.
        usage: Usage,
        /// Timings.
        timings: Timings,
    },
    /// The sequence was dropped: a bad parameter, a pool too small for it, shutdown.
    Error(EngineError),
}
