//! tl-arch-modernbert: ModernBERT encoders (answerdotai/ModernBERT-base and -large, and the
//! embedding and reranking models built on them: gte-modernbert, modernbert-embed, ...),
//! registered as `tl_arch = "modernbert"` and as Hugging Face `model_type = "modernbert"`.
//! An encoder (docs/spec/encoders.md): the runner answers `ModelRunner::encode` with it.
//!
//! The model is transformers' `ModernBertModel` (5.23): token embeddings and a LayerNorm;
//! per layer a pre-norm attention block (`attn_norm`, none on layer 0, where the
//! embedding norm just ran), a fused `Wqkv`, rotate-half RoPE, bidirectional attention,
//! `Wo` and the residual add, then a pre-norm GeGLU (`mlp_norm`, `Wi` of twice the
//! intermediate width, `gelu(first half) * second half`, `Wo`, the residual add); a
//! final LayerNorm. Layer `i` attends globally when `i % global_attn_every_n_layers ==
//! 0` (or as `layer_types` says) with RoPE base `global_rope_theta`; the other layers see
//! keys within `local_attention / 2` positions on either side, with base
//! `local_rope_theta`. Biases follow `norm_bias`, `attention_bias` and `mlp_bias`
//! (ModernBERT's own checkpoints have none). transformers unpads a batch before the
//! layers; tl never pads (each input is its own sequence), so that is nothing to undo.
//!
//! `ModernBertForSequenceClassification` (encoder under `model.`) pools the last hidden
//! states (`classifier_pooling`: the first row, or the mean), then `head.dense`, GELU,
//! `head.norm`, `classifier`, and the cross-encoder's activation as arch-bert reads it.
//! `ModernBertForMaskedLM` (ModernBERT-base itself) runs as its encoder, its MLM head
//! unread, as sentence-transformers loads it. Vectors are sentence-transformers'
//! modules (arch-bert's [`Pipeline`]), the plain mean without modules.json.
//!
//! Every kernel is arch-bert's (projections, LayerNorm, GELU, attention, pooling), with
//! tl-decoder's RoPE tables, so ModernBERT rounds as BERT does. No token types: a pair's
//! type ids are not read. Refused at load, naming the field: another activation than
//! `gelu`, scaled RoPE, other heads, heads of an odd width.
//!
//! GGUF files (llama.cpp's converter, `general.architecture = "modern-bert"`) load too
//! ([`gguf`]: weights, config, and the byte-level BPE vocabulary rebuilt as ModernBERT's
//! tokenizer.json).
//!
//! Nothing names this crate from core: a binary or test that loads a ModernBERT writes
//! `use tl_arch_modernbert as _;` (or links tl-families) so the registrations are linked.
#![deny(missing_docs)]

use std::any::Any;
use std::sync::Arc;

use tl_arch_bert::{Head, Pipeline};
use tl_core::{
    ArchRegistration, Architecture, BuildCtx, ConfigError, KvGeometry, Model, ModelConfig, ModelError,
    ModelTypeRegistration,
};

pub mod config;
mod gguf;
mod model;

pub use config::{ModernBertConfig, Pooling};
pub use model::ModernBert;
// From text to outputs: core's, shared by every encoder family.
pub use tl_core::encoder_text::{embed, load, score, TextError, Texts, Tokens};

/// The architecture object.
pub struct ModernBertArch;

impl Architecture for ModernBertArch {
    fn parse_config(&self, config: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError> {
        Ok(Arc::new(ModernBertConfig::parse(config)?))
    }

    fn kv_geometry(&self, config: &ModelConfig, _: u32) -> Result<KvGeometry, ConfigError> {
        Err(tl_arch_bert::parts::no_kv(config, "ModernBERT"))
    }

    fn is_encoder(&self, _: &ModelConfig) -> bool {
        true
    }

    fn build(&self, ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
        let cfg: &ModernBertConfig = ctx.config.arch_config()?;
        let pipeline = Pipeline::of_model(ctx.config, cfg.hidden_size, cfg.head == Head::None)?;
        Ok(Box::new(ModernBert::build(&ctx, cfg, pipeline)?))
    }
}

inventory::submit!(ArchRegistration { name: "modernbert", make: || Box::new(ModernBertArch) });
inventory::submit!(ModelTypeRegistration { model_type: "modernbert", arch: "modernbert" });
