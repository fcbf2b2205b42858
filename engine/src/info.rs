//! What the handle knows without asking the engine thread: the settings it was started
//! with ([`EngineOptions`]), the fixed facts of the loaded model ([`EngineInfo`]), and the
//! checks of a submission against them, made on the caller's thread so a bad request is
//! refused before anything is queued.

use std::sync::Arc;

use tl_core::encoder::check_input;
use tl_core::{EncodeInput, EncoderInfo, ModelRunner};

use crate::disk_cache::DiskCacheConfig;
use crate::embed::EmbedRequest;
use crate::encode::EncodeRequest;
use crate::error::EngineError;
use crate::request::Request;
use crate::speculate::Speculation;
use crate::stats::Observer;

/// Engine settings beyond the runner's [`tl_core::EngineConfig`].
#[derive(Clone, Default)]
pub struct EngineOptions {
    /// Most submitted sequences waiting for admission; more are refused with
    /// [`EngineError::QueueFull`]. 0 means 256.
    pub max_queue: usize,
    /// Timing figures go here.
    pub observer: Option<Arc<dyn Observer>>,
    /// Speculative decoding for requests that do not choose ([`Request::speculate`]):
    /// `None` is [`Speculation::Off`]. Output is the same bits either way.
    pub speculate: Option<Speculation>,
    /// Drafts join a step only while it holds fewer rows than this; 0 means
    /// [`crate::speculate::SPEC_STEP_ROWS`]. (`usize::MAX`: always, as tests of drafting under load want.)
    pub spec_step_rows: usize,
    /// A draft model's draft ends at the first token it gives less than this probability
    /// (its softmax over the vocabulary); 0 (the default here) drafts every token asked
    /// for. `serve --spec-p-min` defaults to [`crate::speculate::SPEC_P_MIN`]. Only speed
    /// changes: whatever is drafted, verification emits the tokens of plain decoding.
    pub spec_p_min: f32,
    /// Choose each draft's length (0 to the k asked for) from this engine's measured step
    /// and drafting costs and the sequence's acceptance so far (`StepCosts::best_k`), so
    /// speculation drafts only where it is faster than plain decoding; false (the default
    /// here, which keeps the drafted counts reproducible for tests): always the k asked
    /// for, under the adaptive pause rule. `serve` turns it on (`--spec-fixed-k` off).
    pub spec_costs: bool,
    /// Keep full prefix blocks on disk too (disk_cache.rs), so they are found again after
    /// an eviction or a restart. Only for models of one KV layer group (no attention
    /// windows); a windowed model runs without it.
    pub disk_cache: Option<DiskCacheConfig>,
}

/// Fixed facts about the loaded engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineInfo {
    /// The model's context (`max_position_embeddings`), when known.
    pub max_context: Option<usize>,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// KV blocks in the pool.
    pub n_blocks: usize,
    /// Token positions per block.
    pub block_tokens: usize,
    /// Pool pages per block of a block table (the model's KV layer groups, docs/kv.md):
    /// a table, a lease and a preload hold this many entries per `block_tokens` positions.
    pub kv_groups: usize,
    /// Bound on waiting submissions.
    pub max_queue: usize,
    /// Speculation for requests that do not choose.
    pub speculate: Speculation,
    /// A draft model is loaded (`Speculation::Draft` is allowed).
    pub draft_model: bool,
    /// The model's MTP head is loaded (`Speculation::Mtp` is allowed).
    pub mtp_head: bool,
    /// Width of the model's final hidden state (an embedding's full dimension).
    pub hidden_size: usize,
    /// The model has recurrent layers (a state column, docs/spec/kv.md).
    pub recurrent: bool,
    /// What the model declares when it is an encoder (docs/spec/encoders.md): it then
    /// answers [`crate::Engine::encode_all`] and refuses generation and decoder embeddings.
    pub encoder: Option<EncoderInfo>,
}

/// Why a draft model with recurrent layers is refused: its own state would keep the
/// rejected drafts (the target's is rolled back through spare slots; the draft model's
/// tables are not).
const NO_HYBRID_DRAFT: &str =
    "a draft model with recurrent layers is not supported (its state cannot be rolled back past rejected drafts); use a draft model without them, or ngram";

/// Why an encoder refuses generation.
const IS_ENCODER: &str = "the model is an encoder: it answers embeddings and scores (encode), not generation";

/// Why `mtp` speculation is refused on an engine started without the model's head.
const NO_HEAD: &str = "no MTP head is loaded (start the engine with the model's own draft head, --speculate mtp)";

impl EngineInfo {
    /// The facts of `runner` with its drafters, `(draft, head)`, under `opts`; refused when
    /// a drafter does not fit the model or the default speculation has no drafter.
    pub(crate) fn of(
        runner: &ModelRunner,
        (draft, head): (Option<&ModelRunner>, Option<&ModelRunner>),
        opts: &EngineOptions,
    ) -> Result<EngineInfo, EngineError> {
        if let Some(h) = head {
            let (hv, tv, hd, td) =
                (h.config().vocab_size, runner.config().vocab_size, h.hidden_size(), runner.hidden_size());
            if (hv, hd) != (tv, td) {
                let reason =
                    format!("the MTP head's vocabulary and width are {hv} and {hd}, the model's {tv} and {td}");
                return Err(EngineError::BadRequest { field: "speculate", reason });
            }
        }
        // `!contains` also refuses NaN.
        if !(0.0..=1.0).contains(&opts.spec_p_min) {
            let reason = format!("{} is not a probability (0 to 1)", opts.spec_p_min);
            return Err(EngineError::BadRequest { field: "spec_p_min", reason });
        }
        if let Some(d) = draft {
            let (dv, tv) = (d.config().vocab_size, runner.config().vocab_size);
            if dv != tv {
                return Err(EngineError::BadRequest {
                    field: "draft",
                    reason: format!("the draft model's vocabulary has {dv} ids, the model's {tv}"),
                });
            }
            if d.kv_layout().state_column().is_some() {
                return Err(EngineError::BadRequest { field: "draft", reason: NO_HYBRID_DRAFT.into() });
            }
        }
        let n_blocks =
            runner.pool().lock().map_err(|_| EngineError::Internal("KV pool lock poisoned".into()))?.n_blocks()
                as usize;
        let info = EngineInfo {
            max_context: runner.config().max_position_embeddings,
            vocab_size: runner.config().vocab_size,
            n_blocks,
            block_tokens: runner.block_tokens(),
            kv_groups: runner.kv_layout().n_groups(),
            max_queue: if opts.max_queue == 0 { 256 } else { opts.max_queue },
            speculate: opts.speculate.unwrap_or(Speculation::Off),
            draft_model: draft.is_some(),
            mtp_head: head.is_some(),
            hidden_size: runner.hidden_size(),
            recurrent: runner.kv_layout().state_column().is_some(),
            encoder: runner.encoder_info().copied(),
        };
        if let Err(e) = info.speculate.check() {
            return Err(EngineError::BadRequest { field: "speculate", reason: e });
        }
        if matches!(info.speculate, Speculation::Draft { .. }) && draft.is_none() {
            return Err(EngineError::BadRequest { field: "speculate", reason: "no draft model is loaded".into() });
        }
        if matches!(info.speculate, Speculation::Mtp { .. }) && head.is_none() {
            return Err(EngineError::BadRequest { field: "speculate", reason: NO_HEAD.into() });
        }
        Ok(info)
    }

    /// A prompt (named `field` in the error) has tokens, each below the vocabulary size.
    fn check_tokens(&self, prompt: &[u32], field: &'static str) -> Result<(), EngineError> {
        let bad = |reason: String| Err(EngineError::BadRequest { field, reason });
        if prompt.is_empty() {
            return bad("no tokens".into());
        }
        if let Some(&t) = prompt.iter().find(|&&t| t as usize >= self.vocab_size) {
            return bad(format!("token id {t} >= vocab_size {}", self.vocab_size));
        }
        Ok(())
    }

    /// Generation and decoder embeddings need a decoder.
    fn check_decoder(&self) -> Result<(), EngineError> {
        match self.encoder {
            Some(_) => Err(EngineError::BadRequest { field: "model", reason: IS_ENCODER.into() }),
            None => Ok(()),
        }
    }

    /// Input `index` of an encode call fits the encoder (core's rules, checked here so a
    /// bad input is refused before anything is queued).
    pub(crate) fn check_encode(&self, index: usize, r: &EncodeRequest) -> Result<(), EngineError> {
        let Some(info) = &self.encoder else {
            return Err(EngineError::BadRequest {
                field: "model",
                reason: "the model is not an encoder: embed with it through embed_all".into(),
            });
        };
        let input = EncodeInput { ids: &r.ids, type_ids: r.type_ids.as_deref() };
        match check_input(&input, info, self.vocab_size) {
            Some(reason) => Err(EngineError::BadRequest { field: "input", reason: format!("input {index}: {reason}") }),
            None => Ok(()),
        }
    }

    /// An embedding input fits the model.
    pub(crate) fn check_embed(&self, r: &EmbedRequest) -> Result<(), EngineError> {
        self.check_decoder()?;
        let bad = |field, reason: String| Err(EngineError::BadRequest { field, reason });
        self.check_tokens(&r.prompt, "input")?;
        if let Some(ctx) = self.max_context.filter(|&c| r.prompt.len() > c) {
            return bad("input", format!("{} tokens exceed the context of {ctx}", r.prompt.len()));
        }
        let d = self.hidden_size;
        if r.dimensions.is_some_and(|k| k == 0 || k > d) {
            return bad("dimensions", format!("must be in 1..={d} (the model's hidden size)"));
        }
        Ok(())
    }

    /// A generation fits the model and this engine's drafters.
    pub(crate) fn check(&self, r: &Request) -> Result<(), EngineError> {
        self.check_decoder()?;
        let bad = |field, reason: String| Err(EngineError::BadRequest { field, reason });
        self.check_tokens(&r.prompt, "prompt")?;
        if r.max_tokens == 0 {
            return bad("max_tokens", "must be at least 1".into());
        }
        if let Some(spec) = r.speculate {
            spec.check().or_else(|e| bad("speculate", e))?;
            if matches!(spec, Speculation::Draft { .. }) && !self.draft_model {
                return bad("speculate", "this engine has no draft model".into());
            }
            if matches!(spec, Speculation::Mtp { .. }) && !self.mtp_head {
                return bad("speculate", NO_HEAD.into());
            }
        }
        let mut biased = std::collections::HashSet::new();
        for &(id, b) in &r.logit_bias {
            if id as usize >= self.vocab_size {
                return bad("logit_bias", format!("token id {id} >= vocab_size {}", self.vocab_size));
            }
            if !(-100.0..=100.0).contains(&b) {
                return bad("logit_bias", format!("bias {b} for token {id} is outside [-100, 100]"));
            }
            if !biased.insert(id) {
                return bad("logit_bias", format!("token id {id} appears twice"));
            }
        }
        if let Some(ctx) = self.max_context {
            if r.prompt.len() + r.max_tokens > ctx {
                return bad(
                    "max_tokens",
                    format!(
                        "{} prompt tokens + {} max_tokens exceed the context of {ctx}",
                        r.prompt.len(),
                        r.max_tokens
                    ),
                );
            }
        }
        Ok(())
    }
}
