//! tl-arch-bert: BERT encoders (all-MiniLM, bge, e5, gte and the other BERT-based
//! sentence-transformers models, and BERT cross-encoders), registered as
//! `tl_arch = "bert"` and as Hugging Face `model_type = "bert"`. It is tl's first encoder
//! (docs/spec/encoders.md): `Architecture::is_encoder` is true, and the runner answers
//! `ModelRunner::encode` with it.
//!
//! The model is transformers' `BertModel`: word + token-type + absolute position
//! embeddings and a LayerNorm; per layer, bidirectional multi-head attention with q/k/v
//! biases, the output projection, a post-LayerNorm over the residual sum, the
//! intermediate projection with GELU (erf), the output projection and a second
//! post-LayerNorm. `BertForSequenceClassification` (tensors under `bert.`) adds the
//! pooler (`tanh` of a dense layer on the `[CLS]` row) and `classifier`, then the
//! cross-encoder's activation (config.json's sentence-transformers `activation_fn`,
//! else sigmoid for one label). The projections are loaded by tl-decoder's `Loader` (any
//! weight mode); stored f32 they run in this crate's own product kernel ([`gemm`], the
//! same bits as tl-quant's f32 `Linear`), otherwise through tl-quant. LayerNorm, GELU and
//! the attention are this crate's ([`ops`], [`lanes`]), since the decoder's blocks are
//! RMSNorm and causal paged attention.
//!
//! A `BertModel` directory's vector is sentence-transformers' pipeline ([`pooling`]):
//! modules.json's Pooling (cls, max, mean, mean_sqrt_len, weightedmean, lasttoken, or
//! several concatenated) and Normalize; without modules.json, the mean (what
//! sentence-transformers does with a plain transformers model). Text goes through
//! core's `encoder_text`: tokenizer.json, cut at sentence_bert_config.json's `max_seq_length`.
//!
//! A GGUF file as llama.cpp's converter writes it (`general.architecture = "bert"`) loads
//! too: [`gguf`] maps its names and metadata, and registers the `"bert"` (WordPiece)
//! vocabulary that every BERT-family GGUF uses ([`wordpiece_tokenizer_json`]); its pooling
//! is the file's `pooling_type`, always normalised (docs/spec/model-dir.md, "GGUF encoders").
//!
//! Refused at load, naming the field or file: another `hidden_act` than `gelu`, relative
//! position embeddings, a decoder or cross-attention config, other heads, modules tl does
//! not run (Dense, ...), a listed Pooling config that is missing or turns nothing on.
//!
//! The other encoder families build on this crate rather than copy it: [`parts`] (a
//! LayerNorm's vectors, a projection in the kernel that suits its weights, the split of a
//! batch's rows into each input's outputs), [`ops`] (LayerNorm, attention, with a sliding
//! window for ModernBERT), [`lanes`] (GELU), [`pooling`], the classifier activations, and
//! [`Bert`] itself, which [`Bert::assemble`] builds from another checkpoint's tensors with
//! rotary positions and a SwiGLU (nomic-bert).
//!
//! Nothing names this crate from core: a binary or test that loads a BERT writes
//! `use tl_arch_bert as _;` (or links tl-families) so the registrations are linked.
#![deny(missing_docs)]

use std::any::Any;
use std::sync::Arc;

use tl_core::{
    ArchRegistration, Architecture, BuildCtx, ConfigError, KvGeometry, Model, ModelConfig, ModelError,
    ModelTypeRegistration,
};

pub mod config;
pub mod gemm;
pub mod gguf;
mod gguf_vocab;
pub mod lanes;
mod model;
pub mod ops;
pub mod parts;
pub mod pooling;

pub use config::{Activation, BertConfig, Head};
pub use gguf_vocab::wordpiece_tokenizer_json;
pub use model::{Bert, Embeddings, Ffn, Layer};
pub use pooling::{Mode, Pipeline};
// From text to outputs (tokenizer.json cut as sentence-transformers cuts): core's, shared
// by every encoder family.
pub use tl_core::encoder_text::{embed, load, score, TextError, Texts, Tokens};

/// The architecture object.
pub struct BertArch;

impl Architecture for BertArch {
    fn parse_config(&self, config: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError> {
        Ok(Arc::new(BertConfig::parse(config)?))
    }

    fn kv_geometry(&self, config: &ModelConfig, _: u32) -> Result<KvGeometry, ConfigError> {
        Err(parts::no_kv(config, "BERT"))
    }

    fn is_encoder(&self, _: &ModelConfig) -> bool {
        true
    }

    fn build(&self, ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
        let cfg: &BertConfig = ctx.config.arch_config()?;
        let pipeline = Pipeline::of_model(ctx.config, cfg.hidden_size, cfg.head == Head::None)?;
        Ok(Box::new(Bert::build(&ctx, cfg, pipeline)?))
    }
}

inventory::submit!(ArchRegistration { name: "bert", make: || Box::new(BertArch) });
inventory::submit!(ModelTypeRegistration { model_type: "bert", arch: "bert" });
