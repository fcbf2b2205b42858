//! tl-decoder: the Llama-style decoder that tl's architecture crates share, and the
//! blocks every family's forward is composed from.
//!
//! Every family's forward is the same skeleton ([`Stack`]: the step plan, the buffers
//! kept between steps, the embedding, the RoPE tables, the layers in order, the final norm
//! and the LM head) over layers the family composes from the sublayer blocks below. A
//! family crate is its config rule, its tensor names and, when its layer is not the
//! shared [`PreNorm`] one, a short [`LayerBody`] (Gemma 3's sandwich norms). A
//! Llama-shaped family (tl-arch-llama, tl-arch-qwen2, tl-arch-mistral) parses its config
//! with [`DecoderConfig::parse`] and a [`Variant`], builds with [`build`], and translates
//! its GGUF files with [`gguf`]. This crate registers nothing and names no family.
//!
//! The blocks, in the order a forward uses them (`N` tokens in the step, `d` hidden, `H`
//! query heads, `H_kv` KV heads, `D` head size, `I` MLP width, `E` experts):
//!
//! - the step: [`Plan`] (each token's sequence and position, each sequence's last token
//!   and blocks; built from the [`ForwardBatch`](tl_core::ForwardBatch) and checked
//!   against the pool's geometry, [`StepShape`]) and [`Step`] (path, batch, plan); a layer
//!   gets them with the buffers in a [`Cx`];
//! - weights: [`Loader`] reads `Linear`s and vectors under the engine's weight mode;
//!   [`Proj`] runs projections of one input fused or split; [`linear`] one `Linear`;
//!   [`Ends`]: embedding, final norm, LM head;
//! - buffers: [`Buffers`], grown with [`grow`], kept between steps;
//! - norms: [`rms_norm`] over `(N, d)` rows, [`head_rms_norm`] per head and
//!   [`full_qk_rms_norm`] over whole rows on the q and k of `(N, H*D + 2*H_kv*D)` rows;
//! - RoPE: [`inv_freq_default`], [`inv_freq_llama3`] ([`Llama3Scaling`]), [`inv_freq_yarn`]
//!   ([`YarnScaling`]), a layer's [`Rope`] and the step's [`RopeTables`] (one per distinct
//!   RoPE; a layer applies its own);
//! - the attention sublayer [`AttnBlock`] ([`AttnSpec`]: q/k/v and o biases, q/k norms
//!   [`QkNorm`], [`Attn`] heads, scale and window, the RoPE table): [`write_kv`] then
//!   [`attention`] over the paged KV;
//! - the feed-forward [`Ffn`]: a gated [`Mlp`] ([`swiglu`], [`gelu_tanh_gated`]) or a
//!   mixture of experts [`Moe`] ([`Routing`]: the router, top k, the weighted sum in
//!   ascending expert id);
//! - [`add`] (the residual), and [`LmHead`] (final norm and logits over the rows asked);
//! - [`f32_bytes`], `Proj::packed_bytes`, `Linear::packed_bytes` for `Model::weight_bytes`.
//!
//! Every block computes each row (or each (query tile, KV head) task) by one function of that
//! row alone, the same bits on every instruction set ([`Path`]), which is what keeps a
//! forward built from them batch- and chunk-invariant (docs/forward.md).
//!
//! - Weights: F32/F16/BF16 and every GGUF block type tl-quant reads, kept as stored,
//!   widened to f32, or int4 projections (an int4 checkpoint, or `EngineConfig.weights`
//!   quantizing at load); every projection is one `tl_quant::Linear`.
#![deny(missing_docs)]

mod attention;
mod attn_kernel;
mod blocks;
mod build;
mod config;
mod cx;
mod delta;
pub mod fields;
pub mod gguf;
mod head;
mod kv_rows;
mod kv_write;
mod lanes;
mod loader;
mod lora;
mod mlp;
mod moe;
mod plan;
mod proj;
mod rope;
mod rowops;
mod stack;
mod stacked;

use tl_core::{BuildCtx, ConfigError, KvGeometry, Model, ModelConfig, ModelError};

pub use attention::{attention, attention_sinks, Attn, Step};
pub use blocks::{AttnBlock, AttnSpec, Ffn, NormReader, PreNorm, QkNorm, QkNormKind};
pub use build::{dense_mlp, prenorm_stack};
pub use config::{global_layers, layer_types, sliding_window, DecoderConfig, LayerAttn, Variant};
pub use cx::{Buffers, Cx, LayerBody, MoeBuffers};
pub use delta::{DeltaLayer, DeltaNet, DeltaShape};
pub use head::{embed, LmHead};
pub use kv_write::write_kv;
/// `e^x` per vector of tl-quant's [`tl_quant::simd::Isa`] lanes, the same bits on every path
/// (the softmax's; tl-arch-bert's attention uses it too).
pub use lanes::exp as exp_lanes;
pub use lanes::Path;
pub use loader::Loader;
pub use lora::{LoraRows, Target, Targets};
pub use mlp::{Act, Mlp, MlpNames, MlpScratch, MLP_NAMES};
pub use moe::{Moe, MoeSpec, Routing, SharedExpert};
pub use plan::{Plan, StepShape};
pub use proj::{f32_bytes, grow, linear, Proj};
pub use rope::{
    inv_freq_default, inv_freq_llama3, inv_freq_yarn, inv_freq_yarn_from, rope_of, Llama3Scaling, Rope, RopeScaling,
    RopeTables, YarnScaling,
};
pub use rowops::{add, clamped_swiglu, full_qk_rms_norm, gelu_tanh_gated, head_rms_norm, rms_norm, swiglu};
pub use stack::{Ends, Stack, StackParts, StepInputs};
pub use stacked::StackedExperts;

/// The forward's vector kernels, exposed for the tests that compare every instruction set
/// with the portable reference; not an API.
#[doc(hidden)]
pub mod kernels {
    pub use crate::attention::{attend_one, attend_span, attend_span_sinks, attend_tile, Span, MAX_TILE};
    pub use crate::attn_kernel::{MAX_G, MAX_ROWS};
    pub use crate::delta::{conv_row, delta_step, l2norm_row, silu_mul};
    pub use crate::kv_rows::{narrow_f16, widen};
    pub use crate::lanes::{exp16, Path};
    pub use crate::rowops::{clamped_swiglu_row, gelu_tanh_row, rms_norm_row, sigmoid_gate_row, swiglu_row};
}

/// The KV block geometry of a decoder config, for blocks of `block_tokens` positions.
pub fn kv_geometry(config: &ModelConfig, block_tokens: u32) -> Result<KvGeometry, ConfigError> {
    Ok(config.arch_config::<DecoderConfig>()?.kv_geometry(block_tokens))
}

/// Each layer's window when some layer has one (`Architecture::kv_windows`): the runner
/// groups the KV pages by it and gives windowed pages back early (docs/kv.md).
pub fn kv_windows(config: &ModelConfig) -> Result<Option<Vec<Option<usize>>>, ConfigError> {
    Ok(config.arch_config::<DecoderConfig>()?.kv_windows())
}

/// Build the decoder `ctx.config` describes (its typed config must be a
/// [`DecoderConfig`]) from its weights.
pub fn build(ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
    let cfg = ctx.config.arch_config::<DecoderConfig>()?.clone();
    Ok(Box::new(build::load(&cfg, &ctx)?))
}
