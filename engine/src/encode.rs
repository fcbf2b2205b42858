//! Encoder requests (docs/spec/encoders.md): a whole input per call, no KV, no sampling.
//! When the engine's model is an encoder, [`crate::Engine::encode_all`] queues one job per
//! input; between steps the engine thread takes the waiting jobs, up to
//! `max_batch_tokens` tokens (at least one job), and runs them in one
//! `ModelRunner::encode` call (step.rs), then answers each on its own channel. This file
//! is a leaf: the request, the answer and the queued job.
//!
//! Determinism: an input's outputs are a function of that input alone (the encoder
//! contract: no padding, per-input arithmetic in a fixed order), so how the jobs of
//! different requests are grouped into calls never changes a vector or a score.

use tokio::sync::mpsc::UnboundedSender;

use crate::error::EngineError;

/// One input to encode: token ids with the model's special tokens, already cut to its
/// length (core's `encoder_text` cuts text as sentence-transformers does), and, for a pair,
/// each token's type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodeRequest {
    /// Token ids (never empty).
    pub ids: Vec<u32>,
    /// One type id per token (a pair's second text is type 1); `None`: all type 0.
    pub type_ids: Option<Vec<u32>>,
}

/// An encoded input: what the model gives (see its `EncoderInfo`).
#[derive(Clone, Debug, PartialEq)]
pub struct Encoding {
    /// The pooled vector (after the model's own pooling and normalisation), when it pools.
    pub vector: Option<Vec<f32>>,
    /// The classifier's outputs after its activation, when the model has a head.
    pub scores: Option<Vec<f32>>,
    /// Tokens of the input.
    pub tokens: usize,
}

/// What an encode receiver gets: one result.
pub type EncodeResult = Result<Encoding, EngineError>;

/// A queued input and where its answer goes.
pub(crate) struct Job {
    pub(crate) req: EncodeRequest,
    pub(crate) out: UnboundedSender<EncodeResult>,
}
