//! tl-arch-gemma4: Gemma 4 text models, registered as `tl_arch = "gemma4"` and as Hugging
//! Face `model_type = "gemma4_text"` (`Gemma4ForCausalLM`).
//!
//! A Gemma 4 is Gemma 3's sandwich-normed decoder (GELU-tanh gated MLP, sliding and full
//! layers, per-head q/k norms) with what the small on-device models added (forward.rs walks
//! through it): per-layer input embeddings mixed into every layer, the last
//! `num_kv_shared_layers` layers reading the K/V of the last owning layer of their kind
//! instead of their own, the full layers' own head size and "proportional" RoPE, an
//! unweighted v norm, `attention_k_eq_v`, a double-wide MLP on the shared layers, plain `w`
//! norms, `layer_scalar`, and a final logit softcap. It is built from tl-decoder's blocks
//! over the same paged KV pool and batch-invariant kernels as every family.
//!
//! The KV pool: a shared layer owns no slab ([`Architecture::kv_shared`], the layout maps
//! it to its source's), so pages hold the owning layers only; rows are the larger kind's
//! (KV heads, head size), the other kind padded (attn.rs says why the bits do not move).
//!
//! The multimodal checkpoints (`Gemma4ForConditionalGeneration`, `model_type = "gemma4"`,
//! the text model's config under `text_config` and its weights under
//! `model.language_model.`) run their text model through tl-core's generic nesting (a
//! `NestedRegistration` below); the vision and audio towers are not read.
//!
//! GGUF files (`general.architecture` `gemma4`, llama.cpp's converter) are read by [`gguf`]:
//! llama.cpp's names back to these, the metadata back to the config; their vocabulary
//! (`tokenizer.ggml.model` "gemma4": a byte-fallback BPE with merges) by vocab.rs, rebuilt
//! as the tokenizer.json transformers' `GemmaTokenizer` uses. A file without a vocabulary
//! is read as byte-tokenized.
//!
//! The MoE block (`enable_moe_block`: experts beside every layer's MLP, their own router
//! over the residual stream, `per_expert_scale`) runs from safetensors (forward.rs's
//! `G4Moe`, over tl-decoder's `Moe` and `StackedExperts`) and from GGUF files (the stacked
//! `ffn_*_exps` served per expert, F32 or Q8_0).
//!
//! Nothing names this crate from core: a binary or test that loads a Gemma 4 writes
//! `use tl_arch_gemma4 as _;` so the registrations are linked.
#![deny(missing_docs)]

mod attn;
mod config;
mod forward;
pub mod gguf;
mod vocab;
mod weights;

use std::any::Any;
use std::sync::Arc;

use tl_core::{
    ArchRegistration, Architecture, BuildCtx, ConfigError, KvGeometry, Model, ModelConfig, ModelError,
    ModelTypeRegistration, NestedRegistration,
};

pub use config::{Gemma4Config, Kind, KindShape};

/// The Gemma 4 family.
struct Gemma4Arch;

impl Architecture for Gemma4Arch {
    fn parse_config(&self, config: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError> {
        Ok(Arc::new(Gemma4Config::parse(config)?))
    }

    fn kv_geometry(&self, config: &ModelConfig, block_tokens: u32) -> Result<KvGeometry, ConfigError> {
        let c = config.arch_config::<Gemma4Config>()?;
        let (kv_heads, head_dim) = c.pool_shape();
        // The config's caps keep these far below u32::MAX.
        Ok(KvGeometry {
            n_layers: c.n_layers() as u32,
            n_kv_heads: kv_heads as u32,
            head_dim: head_dim as u32,
            block_tokens,
        })
    }

    fn kv_windows(&self, config: &ModelConfig) -> Result<Option<Vec<Option<usize>>>, ConfigError> {
        let c = config.arch_config::<Gemma4Config>()?;
        let w: Vec<Option<usize>> = c.layers.iter().map(|&k| c.window(k)).collect();
        Ok(w.iter().any(Option::is_some).then_some(w))
    }

    fn kv_shared(&self, config: &ModelConfig) -> Result<Option<Vec<Option<u32>>>, ConfigError> {
        let c = config.arch_config::<Gemma4Config>()?;
        let sources = c.sources()?;
        Ok(sources.iter().any(Option::is_some).then_some(sources))
    }

    fn build(&self, ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
        let cfg = ctx.config.arch_config::<Gemma4Config>()?.clone();
        Ok(Box::new(weights::load(&cfg, &ctx)?))
    }
}

inventory::submit!(ArchRegistration { name: "gemma4", make: || Box::new(Gemma4Arch) });
// A Hugging Face config.json without `tl_arch` selects this crate by its `model_type`.
inventory::submit!(ModelTypeRegistration { model_type: "gemma4_text", arch: "gemma4" });
// `Gemma4ForConditionalGeneration` (the released E2B/E4B/...): the text model's config under
// `text_config`, its weights under `model.language_model.`; the vision and audio towers
// (`model.vision_tower.*`, `model.audio_tower.*`, `model.embed_*`) are not read.
inventory::submit!(NestedRegistration {
    model_type: "gemma4",
    text_config: "text_config",
    weights: "model.language_model.",
    text_weights: "model.",
    arch: "gemma4",
});
