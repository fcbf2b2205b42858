//! tl-arch-llama: the Llama architecture, registered as `tl_arch = "llama"`.
//!
//! - [`LlamaConfig`]: the Llama fields of config.json, both generations of Hugging Face
//!   names, with everything the forward cannot run refused at load.
//! - Weights: F32/F16/BF16 widened to f32, or int4 projections (an int4 checkpoint, or
//!   `EngineConfig.quant` quantizing at load); every projection is one `tl_quant::Linear`.
//! - [`Llama`]: the forward over the paged KV pool, batch-invariant bit for bit
//!   (docs/forward.md).
//!
//! Nothing names this crate from core: a binary or test that loads a Llama writes
//! `use tl_arch_llama as _;` so the registration is linked.
#![deny(missing_docs)]

mod attention;
mod config;
mod forward;
pub mod gguf;
mod lanes;
mod rowops;
mod weights;

use std::any::Any;
use std::sync::Arc;

use tl_core::{
    ArchRegistration, Architecture, BuildCtx, ConfigError, GgufRegistration, KvGeometry, Model, ModelConfig,
    ModelError, ModelTypeRegistration,
};

pub use config::LlamaConfig;
pub use forward::Llama;

/// The forward's vector kernels, exposed for the tests that compare every instruction set
/// with the portable reference; not an API.
#[doc(hidden)]
pub mod kernels {
    pub use crate::attention::{attend_one, narrow_f16, MAX_G};
    pub use crate::lanes::{exp16, Path};
    pub use crate::rowops::{rms_norm_row, swiglu_row};
}

/// The Llama family.
struct LlamaArch;

impl Architecture for LlamaArch {
    fn parse_config(&self, config: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError> {
        Ok(Arc::new(LlamaConfig::parse(config)?))
    }

    fn kv_geometry(&self, config: &ModelConfig, block_tokens: u32) -> Result<KvGeometry, ConfigError> {
        let c = config.arch_config::<LlamaConfig>()?;
        // The config's caps keep these far below u32::MAX.
        Ok(KvGeometry {
            n_layers: c.num_hidden_layers as u32,
            n_kv_heads: c.num_key_value_heads as u32,
            head_dim: c.head_dim as u32,
            block_tokens,
        })
    }

    fn build(&self, ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
        let cfg = ctx.config.arch_config::<LlamaConfig>()?.clone();
        let weights = weights::load(&cfg, &ctx)?;
        Ok(Box::new(Llama::new(cfg, weights, ctx.device)?))
    }
}

fn make() -> Box<dyn Architecture> {
    Box::new(LlamaArch)
}

inventory::submit!(ArchRegistration { name: "llama", make });
// A Hugging Face config.json without `tl_arch` selects this crate by its `model_type`.
inventory::submit!(ModelTypeRegistration { model_type: "llama", arch: "llama" });
inventory::submit!(GgufRegistration { architecture: "llama", make: || Box::new(gguf::LlamaGguf) });
