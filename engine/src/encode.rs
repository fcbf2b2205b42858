//! Encoder requests (docs/spec/encoders.md): a whole input per call, no KV, no sampling.
//! When the engine's model is an encoder, [`crate::Engine::encode_all`] queues one job per
//! input; between steps the engine thread takes the waiting jobs, up to
//! `max_batch_tokens` tokens (at least one job), and runs them in one
//! `ModelRunner::encode` call, then answers each on its own channel.
//!
//! Determinism: an input's outputs are a function of that input alone (the encoder
//! contract: no padding, per-input arithmetic in a fixed order), so how the jobs of
//! different requests are grouped into calls never changes a vector or a score.

use std::sync::atomic::Ordering;
use std::time::Instant;

use tl_core::EncodeInput;
use tokio::sync::mpsc::UnboundedSender;

use crate::error::EngineError;
use crate::scheduler::Scheduler;
use crate::stats::StepFigures;

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

impl Scheduler {
    /// Run the waiting encode jobs, up to the step's token budget (at least one), in one
    /// encode call; each job is answered, none left half done. Jobs whose receiver is gone
    /// are dropped unrun.
    pub(crate) fn encode_waiting(&mut self) {
        let budget = self.lim.max_batch_tokens;
        let mut jobs = Vec::new();
        let mut tokens = 0;
        while let Some(job) = self.encodes.front() {
            if !jobs.is_empty() && tokens + job.req.ids.len() > budget {
                break;
            }
            let Some(job) = self.encodes.pop_front() else { break };
            self.shared.queued.fetch_sub(1, Ordering::SeqCst);
            if job.out.is_closed() {
                self.shared.cancelled.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            tokens += job.req.ids.len();
            jobs.push(job);
        }
        if jobs.is_empty() {
            return;
        }
        let t0 = Instant::now();
        let inputs: Vec<EncodeInput<'_>> =
            jobs.iter().map(|j| EncodeInput { ids: &j.req.ids, type_ids: j.req.type_ids.as_deref() }).collect();
        let out = self.runner.encode(&inputs, false);
        let forward = t0.elapsed();
        match out {
            Ok(encoded) if encoded.len() == jobs.len() => {
                for (job, e) in jobs.iter().zip(encoded) {
                    let _ =
                        job.out.send(Ok(Encoding { vector: e.vector, scores: e.scores, tokens: job.req.ids.len() }));
                }
            }
            Ok(encoded) => {
                let err = EngineError::Internal(format!("encode: {} outputs for {} inputs", encoded.len(), jobs.len()));
                jobs.iter().for_each(|j| drop(j.out.send(Err(err.clone()))));
            }
            Err(e) => {
                let err = EngineError::Internal(e.to_string());
                jobs.iter().for_each(|j| drop(j.out.send(Err(err.clone()))));
            }
        }
        self.shared.steps.fetch_add(1, Ordering::Relaxed);
        self.shared.finished.fetch_add(jobs.len(), Ordering::Relaxed);
        if let Some(o) = &self.observer {
            let figures = StepFigures {
                tokens,
                seqs: jobs.len(),
                prefill_tokens: tokens,
                admitted: jobs.len(),
                forward,
                elapsed: t0.elapsed(),
            };
            o.step(&figures);
        }
    }

    /// Answer every waiting encode job with `err` (shutting down, or a failed step).
    pub(crate) fn fail_encodes(&mut self, err: &EngineError) {
        for job in self.encodes.drain(..) {
            self.shared.queued.fetch_sub(1, Ordering::SeqCst);
            let _ = job.out.send(Err(err.clone()));
        }
    }
}
