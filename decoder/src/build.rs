//! The builders of the pre-norm families (Llama, Qwen2, Mistral, Qwen3, the mixtures of
//! experts): a stack of [`PreNorm`] layers under Hugging Face's names, read through a
//! [`Loader`]. Above the blocks and the stack; nothing below imports it.

use tl_core::{BuildCtx, ModelError};

use crate::attention::Attn;
use crate::blocks::{AttnBlock, AttnSpec, Ffn, PreNorm, QkNormKind};
use crate::config::DecoderConfig;
use crate::loader::Loader;
use crate::mlp::{Act, Mlp, MLP_NAMES};
use crate::stack::{Ends, Stack, StackParts};

/// A stack of [`PreNorm`] layers under Hugging Face's names (`model.layers.N.` +
/// `input_layernorm`, `self_attn.*`, `post_attention_layernorm`; the ends), the one RoPE
/// table of `cfg`: `sublayers(loader, N)` says layer N's attention and reads its
/// feed-forward (`model.layers.N.mlp` for a dense one). Llama, Qwen2, Mistral, Qwen3 and
/// the mixtures of experts are this, with their own `sublayers`.
pub fn prenorm_stack(
    ctx: &BuildCtx<'_>,
    cfg: &DecoderConfig,
    family: &'static str,
    mut sublayers: impl FnMut(&Loader<'_>, usize) -> Result<(AttnSpec, Ffn), ModelError>,
) -> Result<Stack<PreNorm>, ModelError> {
    let w = Loader::new(ctx)?;
    let d = cfg.hidden_size;
    let vector = |name: &str, len| w.vector(name, len);
    let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
    for i in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{i}");
        let (spec, ffn) = sublayers(&w, i)?;
        let attn = AttnBlock::load(&w, &format!("{p}.self_attn"), d, spec, &vector)?;
        layers.push(PreNorm::load(&w, &p, d, attn, ffn)?);
    }
    // Tied: the embedding table is the LM head, kept once.
    let ends = Ends::load(&w, cfg.vocab_size, d, cfg.tie_word_embeddings, w.vector("model.norm.weight", d)?)?;
    let parts = StackParts {
        family,
        shape: cfg.step_shape(),
        hidden: d,
        eps: cfg.rms_norm_eps,
        ends,
        ropes: vec![cfg.rope()], // rope_type default, llama3 or yarn as the config says
        layers,
    };
    Stack::new(parts, ctx.device)
}

/// Layer `i`'s dense SwiGLU MLP under Hugging Face's names (`model.layers.N.mlp`).
pub fn dense_mlp(w: &Loader<'_>, cfg: &DecoderConfig, i: usize) -> Result<Ffn, ModelError> {
    let p = format!("model.layers.{i}.mlp");
    Ok(Ffn::Dense(Mlp::load(w, &p, MLP_NAMES, cfg.hidden_size, cfg.intermediate_size, Act::SwiGlu)?))
}

/// The Llama-shaped decoder `ctx` describes (Llama, Qwen2's q/k/v biases, Mistral's
/// windows): pre-norm layers of attention and a SwiGLU MLP.
pub fn load(cfg: &DecoderConfig, ctx: &BuildCtx<'_>) -> Result<Stack<PreNorm>, ModelError> {
    let global = Attn::new(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim);
    prenorm_stack(ctx, cfg, "decoder", |w, i| {
        let spec = AttnSpec {
            attn: Attn { window: cfg.layer_attn[i].window(), ..global },
            rope: 0,
            qkv_bias: cfg.qkv_bias,
            o_bias: false,
            qk_norm: QkNormKind::None,
            sinks: false,
            out_gate: false,
        };
        Ok((spec, dense_mlp(w, cfg, i)?))
    })
}
