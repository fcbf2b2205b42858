//! The architecture extension point: a model family, registered by its own crate.

use std::any::Any;
use std::sync::Arc;

use thiserror::Error;

use crate::batch::{ForwardBatch, Logits};
use crate::config::{ConfigError, ModelConfig};
use crate::encoder::{EncodeInput, Encoded, EncoderInfo};
use crate::engine::EngineConfig;
use crate::kv::{KvError, KvGeometry, KvSlabs};
use crate::layout::KvLayout;
use crate::weights::{WeightError, WeightStore};

/// A model that cannot be built or run.
#[derive(Debug, Error)]
pub enum ModelError {
    /// The config does not describe a model this architecture can run.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A weight is missing or malformed.
    #[error(transparent)]
    Weights(#[from] WeightError),
    /// The KV pool refused an operation.
    #[error(transparent)]
    Kv(#[from] KvError),
    /// A Candle operation failed.
    #[error("tensor op: {0}")]
    Candle(#[from] candle_core::Error),
    /// A batch the model cannot run.
    #[error("bad batch: {0}")]
    BadBatch(String),
    /// Anything else, in words.
    #[error("{0}")]
    Other(String),
}

/// What an architecture is built from.
pub struct BuildCtx<'a> {
    /// The parsed config (with this architecture's typed config inside).
    pub config: &'a ModelConfig,
    /// The checkpoint's tensors.
    pub weights: &'a dyn WeightStore,
    /// Engine settings (quantization, threads).
    pub engine: &'a EngineConfig,
    /// Where tensors live.
    pub device: &'a candle_core::Device,
}

/// Per-step state handed to a forward.
pub struct ForwardCtx<'a> {
    /// The KV slabs the step writes K/V into and reads them from (the pool's
    /// management is the runner's, not the model's).
    pub kv: &'a mut dyn KvSlabs,
    /// Also return the final hidden state of every token.
    pub want_hidden: bool,
    /// Logits for every token of the step (rows in batch order), not only for each
    /// sequence's last token. Each row must be the bits the token's row would have in any
    /// other batch (a perplexity run compares every position with the next token).
    pub all_logits: bool,
    /// When set (and `all_logits` is not): logits for the last `tails[i]` tokens of
    /// sequence `i` (each in `1..=len`), rows in batch order. A speculative verify step
    /// needs every row of its `[last, d1..dk]` chunk but only the last row of a prefill
    /// chunk beside it. The same per-row bit promise as `all_logits`.
    pub tails: Option<&'a [usize]>,
    /// Which page of a block-table row holds which layer ([`KvLayout`]): a sequence's
    /// table holds G pages per `B` positions, row-major.
    pub layout: &'a KvLayout,
    /// A speculative verify step of a model with recurrent layers (docs/spec/kv.md,
    /// "Speculation"): `spares[i]`, when present, are state slots that receive sequence
    /// `i`'s recurrent state after each of its positions `end - 1 - m .. end - 1` (`m` the
    /// slice's length, `end` the step's end): the states the step may roll back to. Empty:
    /// none. Layers without state ignore it.
    pub spares: &'a [&'a [u32]],
    /// A draft head's step ([`Architecture::draft_head`]): `(N, hidden_size)`, for each
    /// token of the step in batch order, the target model's final hidden state at the
    /// position before it. Empty for every other model and step.
    pub given: &'a [f32],
}

impl ForwardCtx<'_> {
    /// The batch-order indices of the tokens whose logits the step returns, given the
    /// index of each sequence's last token (`last`, one per sequence, increasing).
    pub fn logit_rows(&self, last: &[usize]) -> Vec<usize> {
        if self.all_logits {
            return (0..last.last().map_or(0, |&l| l + 1)).collect();
        }
        match self.tails {
            Some(tails) => last.iter().zip(tails).flat_map(|(&l, &t)| (l + 1 - t.max(1))..=l).collect(),
            None => last.to_vec(),
        }
    }
}

/// What one forward step returns.
#[derive(Clone, Debug)]
pub struct ForwardOutput {
    /// One row per sequence (its last token's logits), or with `all_logits` one row per
    /// token of the step, or with `tails` the last `tails[i]` tokens of each sequence, in
    /// batch order.
    pub logits: Logits,
    /// With `want_hidden`: `(N, hidden_size)`, every token of the step in batch order.
    pub hidden: Option<Vec<f32>>,
}

/// A built model: immutable weights; per-sequence state lives in the KV pool.
pub trait Model: Send + Sync {
    /// Hidden size `d` of the rows `ForwardOutput::hidden` holds.
    fn hidden_size(&self) -> usize;
    /// Bytes the loaded weights take in memory (for resident-memory reports), when the
    /// model knows.
    fn weight_bytes(&self) -> Option<usize> {
        None
    }
    /// Run one step. The runner has already checked the batch (tokens < vocab, positions
    /// within the context, block tables long enough, blocks in use).
    fn forward(&self, batch: &ForwardBatch, ctx: &mut ForwardCtx<'_>) -> Result<ForwardOutput, ModelError>;
    /// The projections a LoRA adapter may adapt ([`crate::adapter`]), under Hugging Face's
    /// module names; the forward then applies a sequence's adapter
    /// ([`crate::ForwardSeq::adapter`]) to those it names. The default: none (an adapter
    /// is refused, naming the architecture).
    fn adaptable(&self) -> Vec<crate::adapter::Adaptable> {
        Vec::new()
    }
    /// The model as an encoder, when its architecture is one
    /// ([`Architecture::is_encoder`]); its `forward` is then never called.
    fn encoder(&self) -> Option<&dyn Encoder> {
        None
    }
}

/// A built encoder. The batch-invariance rule: each input's outputs are a function of
/// that input alone: the same bits whatever else is in the call, in any order, on any
/// number of threads.
pub trait Encoder: Send + Sync {
    /// What it reads and returns.
    fn info(&self) -> &EncoderInfo;
    /// Encode every input (already checked by the runner,
    /// crate::encoder::check_input); one [`Encoded`] per input, in
    /// order, hidden states only with `want_hidden`.
    fn encode(&self, inputs: &[EncodeInput<'_>], want_hidden: bool) -> Result<Vec<Encoded>, ModelError>;
}

/// A model family.
pub trait Architecture: Send + Sync {
    /// Parse and validate this architecture's own fields of config.json (`config.json()`),
    /// refusing what it cannot run correctly. The result is kept in the `ModelConfig`.
    fn parse_config(&self, config: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError>;
    /// The KV block geometry the model needs, for blocks of `block_tokens` positions.
    fn kv_geometry(&self, config: &ModelConfig, block_tokens: u32) -> Result<KvGeometry, ConfigError>;
    /// Each layer's attention window (`None`: global), when some layer has one: the
    /// runner groups the layers' KV pages by it ([`KvLayout::from_windows`]) and gives a
    /// windowed group's pages back once no future query sees them. The default, `None`,
    /// keeps one group of every layer (a page is a whole block).
    fn kv_windows(&self, config: &ModelConfig) -> Result<Option<Vec<Option<usize>>>, ConfigError> {
        let _ = config;
        Ok(None)
    }
    /// The layers that are not attention (docs/spec/kv.md, "Recurrent state beside the
    /// pages"): their model indices, ascending, and the f32 values one layer's state takes.
    /// The runner gives them a state column of slots instead of KV pages. The default,
    /// `None`: every layer is attention.
    fn recurrent(&self, config: &ModelConfig) -> Result<Option<Recurrent>, ConfigError> {
        let _ = config;
        Ok(None)
    }
    /// Layers that read an earlier layer's K and V instead of writing their own (a family
    /// whose last layers reuse earlier keys): `Some(source)` per sharing layer, one entry per layer. The
    /// runner gives them no slabs ([`KvLayout::with_shared`]), so the pool holds the owning
    /// layers only. The default, `None`: every attention layer owns its KV.
    fn kv_shared(&self, config: &ModelConfig) -> Result<Option<Vec<Option<u32>>>, ConfigError> {
        let _ = config;
        Ok(None)
    }
    /// Whether the model is an encoder (crate::encoder): a whole input per call,
    /// bidirectional attention, no KV kept. The runner then asks for no KV geometry,
    /// windows, recurrent layers or sharing, and the built model must return itself from
    /// [`Model::encoder`]. The default: a decoder.
    fn is_encoder(&self, config: &ModelConfig) -> bool {
        let _ = config;
        false
    }
    /// Build the model from its weights.
    fn build(&self, ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError>;
    /// The checkpoint's own draft head (multi-token prediction), built from its weights as
    /// a model of its own: a step feeds it, beside each token `t_{p+1}`, the target's final
    /// hidden state at position `p` ([`ForwardCtx::given`]), at position `p`, and it
    /// returns the logits of `t_{p+2}` and its own final hidden state (which the next
    /// chained draft is given). Its KV is its own ([`DraftHead::kv`]). The default, and an
    /// architecture whose checkpoint carries no head: `None`.
    fn draft_head(&self, ctx: BuildCtx<'_>) -> Result<Option<DraftHead>, ModelError> {
        let _ = ctx;
        Ok(None)
    }
}

/// A draft head ([`Architecture::draft_head`]): the model and the KV geometry of its own
/// layers (every one attention).
pub struct DraftHead {
    /// The head, run like any model with [`ForwardCtx::given`] set.
    pub model: Box<dyn Model>,
    /// Its layers' KV, for blocks of the engine's `block_tokens`.
    pub kv: KvGeometry,
}

/// A hybrid model's recurrent layers ([`Architecture::recurrent`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recurrent {
    /// Their model layer indices, ascending.
    pub layers: Vec<u32>,
    /// f32 values of one layer's state (the same for every recurrent layer).
    pub floats: u32,
}

/// An architecture registration: `inventory::submit!(ArchRegistration { name, make })`.
pub struct ArchRegistration {
    /// The `tl_arch` value that selects it.
    pub name: &'static str,
    /// The architecture object.
    pub make: fn() -> Box<dyn Architecture>,
}

inventory::collect!(ArchRegistration);

/// A Hugging Face `model_type` that selects an architecture when config.json has no
/// `tl_arch`: `inventory::submit!(ModelTypeRegistration { model_type, arch })`.
pub struct ModelTypeRegistration {
    /// The `model_type` value of Hugging Face config.json files.
    pub model_type: &'static str,
    /// The registered architecture name it selects.
    pub arch: &'static str,
}

inventory::collect!(ModelTypeRegistration);

/// A Hugging Face `model_type` whose checkpoints nest a text model tl runs (a multimodal
/// `...ForConditionalGeneration`): its config under `text_config`, its weights under
/// `weights` where the text-only checkpoint has `text_weights`; the other towers are not
/// read (crate::nested). `inventory::submit!(NestedRegistration { .. })`.
pub struct NestedRegistration {
    /// The outer config's `model_type`.
    pub model_type: &'static str,
    /// The outer config's field holding the text model's config (`"text_config"`).
    pub text_config: &'static str,
    /// The stored weights' prefix of the text model (`"model.language_model."`).
    pub weights: &'static str,
    /// The same tensors' prefix in a text-only checkpoint (`"model."`).
    pub text_weights: &'static str,
    /// The registered architecture that runs the text model; the text config's own
    /// `model_type`, when it has one, must select it.
    pub arch: &'static str,
}

inventory::collect!(NestedRegistration);
