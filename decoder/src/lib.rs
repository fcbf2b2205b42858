//! tl-decoder: the Llama-style decoder that tl's architecture crates share, and the
//! blocks every family's forward is composed from.
//!
//! A Llama-shaped family (tl-arch-llama, tl-arch-qwen2) parses its config with
//! [`DecoderConfig::parse`] and a [`Variant`] (what it adds to Llama: q/k/v biases),
//! builds the model with [`build`], and translates its GGUF files with [`gguf`]. A family
//! with its own shape (Gemma 3, Qwen3) writes its forward in its own crate, top to bottom,
//! from the blocks below; this crate registers nothing and names no family.
//!
//! The blocks, in the order a forward uses them (`N` tokens in the step, `d` hidden, `H`
//! query heads, `H_kv` KV heads, `D` head size, `I` MLP width):
//!
//! - the step: [`Plan`] (each token's sequence and position, each sequence's last token
//!   and blocks; built from the [`ForwardBatch`](tl_core::ForwardBatch) and checked
//!   against the pool's geometry, [`StepShape`]) and [`Step`] (path, batch, plan);
//! - weights: [`Loader`] reads `Linear`s and vectors under the engine's weight mode;
//!   [`Proj`] runs projections of one input fused or split; [`linear`] one `Linear`;
//! - buffers: [`grow`] keeps a step's `(N, ...)` buffers between steps;
//! - [`embed`]: the `(N, d)` embedding rows of the step's tokens;
//! - norms: [`rms_norm`] over `(N, d)` rows, [`head_rms_norm`] per head in place on the
//!   q and k heads of `(N, H*D + 2*H_kv*D)` rows;
//! - RoPE: [`inv_freq_default`], [`inv_freq_llama3`] ([`Llama3Scaling`]), the step's
//!   [`RopeTables`] (one per distinct frequency vector; a layer applies its own);
//! - attention: [`Attn`] (heads, KV heads, head size, `scale`, optional `window`),
//!   [`write_kv`] then [`attention`] over the paged KV;
//! - activations: [`swiglu`] and [`gelu_tanh_gated`] on `(N, 2I)` gate|up rows;
//! - [`add`] (the residual), and [`LmHead`] (final norm and logits over the rows asked);
//! - [`f32_bytes`], `Proj::packed_bytes`, `Linear::packed_bytes` for `Model::weight_bytes`.
//!
//! Every block computes each row (or each (token, KV head) task) by one function of that
//! row alone, the same bits on every instruction set ([`Path`]), which is what keeps a
//! forward built from them batch- and chunk-invariant (docs/forward.md).
//!
//! - Weights: F32/F16/BF16 and GGUF Q4_0/Q4_1/Q8_0 kept as stored, widened to f32, or
//!   int4 projections (an int4 checkpoint, or `EngineConfig.weights` quantizing at load);
//!   every projection is one `tl_quant::Linear`.
//! - [`Decoder`]: the Llama forward over the paged KV pool, batch-invariant bit for bit.
#![deny(missing_docs)]

mod attention;
mod config;
pub mod fields;
mod forward;
pub mod gguf;
mod head;
mod lanes;
mod plan;
mod proj;
mod rope;
mod rowops;
mod weights;

use tl_core::{BuildCtx, ConfigError, KvGeometry, Model, ModelConfig, ModelError};

pub use attention::{attention, write_kv, Attn, Step};
pub use config::{global_layers, layer_types, sliding_window, DecoderConfig, LayerAttn, Variant};
pub use forward::Decoder;
pub use head::{embed, LmHead};
pub use lanes::Path;
pub use plan::{Plan, StepShape};
pub use proj::{f32_bytes, grow, linear, Proj};
pub use rope::{inv_freq_default, inv_freq_llama3, Llama3Scaling, RopeTables};
pub use rowops::{add, gelu_tanh_gated, head_rms_norm, rms_norm, swiglu};
pub use weights::Loader;

/// The forward's vector kernels, exposed for the tests that compare every instruction set
/// with the portable reference; not an API.
#[doc(hidden)]
pub mod kernels {
    pub use crate::attention::{attend_one, attend_span, narrow_f16, Span, MAX_G};
    pub use crate::lanes::{exp16, Path};
    pub use crate::rowops::{gelu_tanh_row, rms_norm_row, swiglu_row};
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
