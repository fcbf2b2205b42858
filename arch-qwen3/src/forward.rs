//! The Qwen3 model: tl-decoder's pre-norm layer with per-head q/k norms, under Hugging
//! Face's names.
//!
//! Qwen3 is the Llama step with one addition: after the fused q/k/v projection (no
//! biases) every query head and every key head is RMS-normed over its own `head_dim`
//! values, with the layer's `q_norm` / `k_norm` weight (`(D,)` each) and the model's
//! `rms_norm_eps`, before RoPE (Hugging Face `Qwen3Attention`: `q_norm(q_proj(x)
//! .view(..., D))`, then `apply_rotary_pos_emb`). `D` is the config's `head_dim`, which
//! need not be `d / H` (the q projection is `H*D` wide, the o projection reads `H*D`).
//!
//! Per layer (tl-decoder's `PreNorm`): RMSNorm, q/k/v, q/k head norms, RoPE at the
//! absolute positions, K and V of the new tokens into the pool as f16, attention of each
//! new token over its visible keys, o projection + residual, RMSNorm, gate/up, SwiGLU,
//! down + residual; then the final norm and the LM head on the rows asked for.

use tl_core::{BuildCtx, Model, ModelError};
use tl_decoder::{dense_mlp, prenorm_stack, Attn, AttnSpec, DecoderConfig, QkNormKind};

/// The attention of every Qwen3 layer (and Qwen3-MoE's): global, scale `1 / sqrt(D)`, no
/// biases, per-head q/k norms, the one RoPE table.
pub fn attn_spec(cfg: &DecoderConfig) -> AttnSpec {
    AttnSpec {
        attn: Attn::new(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim),
        rope: 0,
        qkv_bias: false,
        o_bias: false,
        qk_norm: QkNormKind::PerHead,
        sinks: false,
        out_gate: false,
    }
}

/// Load a Qwen3 from `ctx` (its typed config is a [`DecoderConfig`]).
pub fn build(ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
    let cfg = ctx.config.arch_config::<DecoderConfig>()?;
    Ok(Box::new(prenorm_stack(&ctx, cfg, "Qwen3", |w, i| Ok((attn_spec(cfg), dense_mlp(w, cfg, i)?)))?))
}
