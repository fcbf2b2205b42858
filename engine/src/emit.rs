//! Token emission: sample a sequence's next token, stop it (end-of-sequence, stop
//! string, grammar complete, length) and finish it, sending its events.
//!
//! A sequence's sampling and stopping state ([`Emission`]) is owned here: the scheduler
//! and speculation only hand a logits row to [`Emitter::sample`]. Each sequence samples
//! with its own PCG32 stream and only from the row of its last fed token, which is what
//! keeps every answer independent of batching, chunking and speculation.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use llguidance::Matcher;
use tl_core::{SampleError, Tokenizer};
use tl_sampling::{Constraint, Pcg32, SpecSampler};
use tokio::sync::mpsc::UnboundedSender;

use crate::embed::{EmbedResult, Embedding};
use crate::error::EngineError;
use crate::request::{Event, FinishReason, Request, Timings, TokenInfo, Usage};
use crate::stats::{Observer, Shared};
use crate::text::TextOut;

/// Where a sequence's results go: a generation's events, or an embedding's one result.
pub(crate) enum Sink {
    /// Tokens, then `Done` or `Error`.
    Tokens(UnboundedSender<Event>),
    /// One embedding or an error (embed.rs).
    Embedding(UnboundedSender<EmbedResult>),
}

/// One sequence's sampling and stopping state, and where its events go.
pub(crate) struct Emission {
    rng: Pcg32,
    /// The grammar's state over this sequence's output (constrained requests only).
    matcher: Option<Matcher>,
    tx: Sink,
    text: TextOut,
    pub(crate) arrived: Instant,
    last_token: Option<Instant>,
    ttft: Option<Duration>,
}

impl Emission {
    pub(crate) fn new(req: &Request, matcher: Option<Matcher>, tx: Sink) -> Emission {
        Emission {
            rng: tl_sampling::choice_stream(req.seed, req.choice),
            matcher,
            tx,
            text: TextOut::default(),
            arrived: Instant::now(),
            last_token: None,
            ttft: None,
        }
    }

    /// End the sequence's stream with an error (a closed receiver is not an error).
    pub(crate) fn fail(&self, err: EngineError) {
        match &self.tx {
            Sink::Tokens(tx) => drop(tx.send(Event::Error(err))),
            Sink::Embedding(tx) => drop(tx.send(Err(err))),
        }
    }

    /// The client went away (its receiver was dropped).
    pub(crate) fn closed(&self) -> bool {
        match &self.tx {
            Sink::Tokens(tx) => tx.is_closed(),
            Sink::Embedding(tx) => tx.is_closed(),
        }
    }

    /// Send an embedding sequence's result (nothing for a generation).
    pub(crate) fn embedded(&self, e: Embedding) {
        if let Sink::Embedding(tx) = &self.tx {
            let _ = tx.send(Ok(e));
        }
    }

    fn send(&self, ev: Event) {
        if let Sink::Tokens(tx) = &self.tx {
            let _ = tx.send(ev);
        }
    }
}

/// What every sequence's emission shares: the sampler's scratch, the tokenizer, the
/// model's end tokens and context, and where figures go.
pub(crate) struct Emitter {
    sampler: SpecSampler,
    tok: Arc<Tokenizer>,
    eos: Vec<u32>,
    max_ctx: Option<usize>,
    observer: Option<Arc<dyn Observer>>,
    shared: Arc<Shared>,
}

impl Emitter {
    pub(crate) fn new(
        tok: Arc<Tokenizer>,
        eos: Vec<u32>,
        max_ctx: Option<usize>,
        observer: Option<Arc<dyn Observer>>,
        shared: Arc<Shared>,
    ) -> Emitter {
        Emitter { sampler: SpecSampler::new(), tok, eos, max_ctx, observer, shared }
    }

    /// Sample the next token of a sequence (`tokens` is its prompt, the first
    /// `n_prompt`, then its output) from its logits row, append and send it; `Some` when
    /// the sequence is done.
    pub(crate) fn sample(
        &mut self,
        out: &mut Emission,
        req: &Request,
        tokens: &mut Vec<u32>,
        n_prompt: usize,
        row: &[f32],
    ) -> Result<Option<FinishReason>, EngineError> {
        let (prompt, output) = tokens.split_at(n_prompt);
        let field = req.grammar.as_ref().map_or("logit_bias", |g| g.field);
        let grammar_err = |e: String| EngineError::BadRequest { field, reason: format!("grammar: {e}") };
        // Step 3a's allowed set: a function of this sequence's own output only.
        let mask = match out.matcher.as_mut() {
            Some(m) => Some(m.compute_mask().map_err(|e| grammar_err(e.to_string()))?),
            None => None,
        };
        let constraint = Constraint { allowed: mask.as_ref().map(|m| m.as_slice()), bias: &req.logit_bias };
        let (id, logprob) = self
            .sampler
            .sample_constrained(row, &req.params, prompt, output, &constraint, &mut out.rng)
            .map_err(|e| match e {
                // Not the request's fault: the model's output is unusable (a corrupt
                // checkpoint, say). Refuse to sample, and say so.
                SampleError::BadLogit { .. } | SampleError::AllMasked | SampleError::EmptyLogits => {
                    EngineError::Internal(format!("the model's logits are unusable, refusing to sample: {e}"))
                }
                SampleError::NothingAllowed => EngineError::BadRequest {
                    field,
                    reason: "the constraint leaves no token the model can produce here".into(),
                },
                e => EngineError::BadRequest { field: "sampling", reason: e.to_string() },
            })?;
        if self.eos.contains(&id) {
            return Ok(Some(FinishReason::Stop));
        }
        let top = match req.logprobs {
            Some(k) if k > 0 => self.sampler.top_logprobs(k),
            _ => Vec::new(),
        };
        tokens.push(id);
        // The grammar advances with the token; a grammar that is complete ends the output.
        let mut grammar_done = false;
        if let Some(m) = out.matcher.as_mut() {
            m.consume_token(id).map_err(|e| grammar_err(e.to_string()))?;
            grammar_done = m.is_stopped();
        }
        let bytes = self.tok.decode_bytes(&[id]).unwrap_or_default();
        let (text, stopped) = out.text.push(&bytes, &req.stop);
        let now = Instant::now();
        match out.last_token {
            None => {
                let ttft = now - out.arrived;
                out.ttft = Some(ttft);
                if let Some(o) = &self.observer {
                    o.first_token(ttft);
                }
            }
            Some(prev) => {
                if let Some(o) = &self.observer {
                    o.inter_token(now - prev);
                }
            }
        }
        out.last_token = Some(now);
        self.shared.generated.fetch_add(1, Ordering::Relaxed);
        out.send(Event::Token { token: TokenInfo { id, logprob, top }, text });
        if stopped || grammar_done {
            return Ok(Some(FinishReason::Stop));
        }
        let full = self.max_ctx.is_some_and(|m| tokens.len() >= m);
        Ok((tokens.len() - n_prompt >= req.max_tokens || full).then_some(FinishReason::Length))
    }

    /// Send a finished sequence's last event: the rest of its text, its counts and its
    /// timings (`preempted`: times it was preempted).
    pub(crate) fn finish(&self, out: &mut Emission, finish: FinishReason, usage: Usage, preempted: u32) {
        let timings = Timings { ttft: out.ttft, total: out.arrived.elapsed(), preempted };
        let text = out.text.finish();
        out.send(Event::Done { finish, text, usage, timings });
    }
}
