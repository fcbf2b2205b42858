//! tl-decoder: the Llama-style decoder that tl's architecture crates share.
//!
//! A family crate (tl-arch-llama, tl-arch-qwen2) parses its config with
//! [`DecoderConfig::parse`] and a [`Variant`] (what it adds to Llama: q/k/v biases),
//! builds the model with [`build`], and translates its GGUF files with [`gguf`]. This
//! crate registers nothing: it is a library, so a family never depends on another
//! family's internals.
//!
//! - Weights: F32/F16/BF16 and GGUF Q4_0/Q4_1/Q8_0 kept as stored, widened to f32, or
//!   int4 projections (an int4 checkpoint, or `EngineConfig.weights` quantizing at load);
//!   every projection is one `tl_quant::Linear`.
//! - [`Decoder`]: the forward over the paged KV pool, batch-invariant bit for bit
//!   (docs/forward.md).
#![deny(missing_docs)]

mod attention;
mod config;
mod forward;
pub mod gguf;
mod lanes;
mod rowops;
mod weights;

use tl_core::{BuildCtx, ConfigError, KvGeometry, Model, ModelConfig, ModelError};

pub use config::{DecoderConfig, Variant};
pub use forward::Decoder;

/// The forward's vector kernels, exposed for the tests that compare every instruction set
/// with the portable reference; not an API.
#[doc(hidden)]
pub mod kernels {
    pub use crate::attention::{attend_one, narrow_f16, MAX_G};
    pub use crate::lanes::{exp16, Path};
    pub use crate::rowops::{rms_norm_row, swiglu_row};
}

/// The KV block geometry of a decoder config, for blocks of `block_tokens` positions.
pub fn kv_geometry(config: &ModelConfig, block_tokens: u32) -> Result<KvGeometry, ConfigError> {
    let c = config.arch_config::<DecoderConfig>()?;
    // The config's caps keep these far below u32::MAX.
    Ok(KvGeometry {
        n_layers: c.num_hidden_layers as u32,
        n_kv_heads: c.num_key_value_heads as u32,
        head_dim: c.head_dim as u32,
        block_tokens,
    })
}

/// Build the decoder `ctx.config` describes (its typed config must be a
/// [`DecoderConfig`]) from its weights.
pub fn build(ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
    let cfg = ctx.config.arch_config::<DecoderConfig>()?.clone();
    let weights = weights::load(&cfg, &ctx)?;
    Ok(Box::new(Decoder::new(cfg, weights, ctx.device)?))
}
