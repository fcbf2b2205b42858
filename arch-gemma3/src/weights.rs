//! Gemma 3's tensors (Hugging Face names; a GGUF's are translated to them), read through
//! tl-decoder's [`Loader`] under the engine's weight mode: projections native, widened
//! or int4; the embedding / tied LM head never int4; norms as f32 vectors.
//!
//! Every norm is applied as `x * (1 + w)`. Hugging Face checkpoints store `w`, so the 1 is
//! added here, once, in f32 (as transformers adds it: `1.0 + weight.float()`, the same
//! bits); GGUF files store `1 + w` already (llama.cpp's converter adds it), which the
//! config says (`tl_norms_include_one`), and are used as stored.

use tl_core::{BuildCtx, ModelError};
use tl_decoder::{Loader, Proj};
use tl_quant::Linear;

use crate::config::Gemma3Config;

/// One layer's weights as the forward runs them.
pub struct LayerW {
    /// `(d,)` `1 + w` of the norm before attention (`input_layernorm`).
    pub input_norm: Vec<f32>,
    /// `[H*D + 2*H_kv*D, d]`: q, k, v stacked.
    pub qkv: Proj,
    /// `(D,)` `1 + w` of the per-head query norm (`self_attn.q_norm`).
    pub q_norm: Vec<f32>,
    /// `(D,)` `1 + w` of the per-head key norm (`self_attn.k_norm`).
    pub k_norm: Vec<f32>,
    /// `[d, H*D]`.
    pub o: Linear,
    /// `(d,)` `1 + w` of the norm of the attention output (`post_attention_layernorm`).
    pub post_attn_norm: Vec<f32>,
    /// `(d,)` `1 + w` of the norm before the MLP (`pre_feedforward_layernorm`).
    pub pre_ffn_norm: Vec<f32>,
    /// `[2*I, d]`: gate, up stacked.
    pub gate_up: Proj,
    /// `[d, I]`.
    pub down: Linear,
    /// `(d,)` `1 + w` of the norm of the MLP output (`post_feedforward_layernorm`).
    pub post_ffn_norm: Vec<f32>,
}

/// All weights of a Gemma 3.
pub struct Gemma3Weights {
    /// The layers, in order.
    pub layers: Vec<LayerW>,
    /// `(d,)` `1 + w` of the final norm (`model.norm`).
    pub norm: Vec<f32>,
    /// `[V, d]` the LM head: with tied embeddings (every released Gemma 3) also the
    /// embedding table, kept once.
    pub lm_head: Linear,
    /// `(V, d)` the embedding table when it is not tied to the head.
    pub embed: Option<Linear>,
}

impl Gemma3Weights {
    /// The `(V, d)` embedding table (rows widened to f32 on lookup).
    pub fn embedding(&self) -> &Linear {
        self.embed.as_ref().unwrap_or(&self.lm_head)
    }
}

/// A norm weight as the forward multiplies by it: `1 + w`.
fn norm(w: &Loader<'_>, name: &str, len: usize, cfg: &Gemma3Config) -> Result<Vec<f32>, ModelError> {
    let mut v = w.vector(name, len)?;
    if !cfg.norms_include_one {
        v.iter_mut().for_each(|x| *x += 1.0);
    }
    Ok(v)
}

/// Load every tensor of the model `ctx` describes.
pub fn load(cfg: &Gemma3Config, ctx: &BuildCtx<'_>) -> Result<Gemma3Weights, ModelError> {
    let w = Loader::new(ctx)?;
    let (d, v, inter, hd) = (cfg.hidden_size, cfg.vocab_size, cfg.intermediate_size, cfg.head_dim);
    let (qw, kvw) = (cfg.q_width(), cfg.kv_width());
    let mut layers = Vec::with_capacity(cfg.n_layers());
    for i in 0..cfg.n_layers() {
        let p = format!("model.layers.{i}");
        let proj = |name: &str, out, inp| w.proj(&format!("{p}.{name}"), out, inp);
        let norm = |name: &str, len| norm(&w, &format!("{p}.{name}.weight"), len, cfg);
        layers.push(LayerW {
            input_norm: norm("input_layernorm", d)?,
            qkv: Proj::new(vec![
                proj("self_attn.q_proj", qw, d)?,
                proj("self_attn.k_proj", kvw, d)?,
                proj("self_attn.v_proj", kvw, d)?,
            ]),
            q_norm: norm("self_attn.q_norm", hd)?,
            k_norm: norm("self_attn.k_norm", hd)?,
            o: proj("self_attn.o_proj", d, qw)?,
            post_attn_norm: norm("post_attention_layernorm", d)?,
            pre_ffn_norm: norm("pre_feedforward_layernorm", d)?,
            gate_up: Proj::new(vec![proj("mlp.gate_proj", inter, d)?, proj("mlp.up_proj", inter, d)?]),
            down: proj("mlp.down_proj", d, inter)?,
            post_ffn_norm: norm("post_feedforward_layernorm", d)?,
        });
    }
    let final_norm = norm(&w, "model.norm.weight", d, cfg)?;
    let table = w.matrix("model.embed_tokens.weight", v, d)?;
    // Tied: the embedding table is the LM head (Hugging Face ignores a stored
    // lm_head.weight then); untied, a missing lm_head.weight is an error naming it.
    let (embed, lm_head) =
        if cfg.tie_word_embeddings { (None, table) } else { (Some(table), w.matrix("lm_head.weight", v, d)?) };
    Ok(Gemma3Weights { layers, norm: final_norm, lm_head, embed })
}
