//! Gemma 3's tensors (Hugging Face names; a GGUF's are translated to them), read through
//! tl-decoder's [`Loader`] under the engine's weight mode: projections native, widened
//! or int4; the embedding / tied LM head never int4; norms as f32 vectors.
//!
//! Every norm is applied as `x * (1 + w)`. Hugging Face checkpoints store `w`, so the 1 is
//! added here, once, in f32 (as transformers adds it: `1.0 + weight.float()`, the same
//! bits); GGUF files store `1 + w` already (llama.cpp's converter adds it), which the
//! config says (`tl_norms_include_one`), and are used as stored.

use tl_core::{BuildCtx, ModelError};
use tl_decoder::{Act, Attn, AttnBlock, AttnSpec, Ends, Loader, Mlp, QkNormKind, Rope, Stack, StackParts, MLP_NAMES};

use crate::config::{Gemma3Config, LayerKind};
use crate::forward::Gemma3Layer;

/// The RoPE tables of the model: windowed layers apply the first, global ones the second.
const ROPE_LOCAL: usize = 0;
const ROPE_GLOBAL: usize = 1;

/// A norm weight as the forward multiplies by it: `1 + w`.
fn norm(w: &Loader<'_>, name: &str, len: usize, cfg: &Gemma3Config) -> Result<Vec<f32>, ModelError> {
    let mut v = w.vector(name, len)?;
    if !cfg.norms_include_one {
        v.iter_mut().for_each(|x| *x += 1.0);
    }
    Ok(v)
}

/// The Gemma 3 `ctx` describes, every tensor loaded.
pub fn load(cfg: &Gemma3Config, ctx: &BuildCtx<'_>) -> Result<Stack<Gemma3Layer>, ModelError> {
    let w = Loader::new(ctx)?;
    let (d, hd) = (cfg.hidden_size, cfg.head_dim);
    // transformers: `self.scaling = query_pre_attn_scalar**-0.5` (a Python float),
    // applied to f32 scores, so rounded to f32.
    let scale = cfg.query_pre_attn_scalar.powf(-0.5) as f32;
    let global = Attn { scale, window: None, ..Attn::new(cfg.num_attention_heads, cfg.num_key_value_heads, hd) };
    let norm_of = |name: &str, len| norm(&w, name, len, cfg);
    let mut layers = Vec::with_capacity(cfg.n_layers());
    for (i, &kind) in cfg.layers.iter().enumerate() {
        let p = format!("model.layers.{i}");
        let rope = match kind {
            LayerKind::Windowed => ROPE_LOCAL,
            LayerKind::Global => ROPE_GLOBAL,
        };
        let attn = Attn { window: cfg.window(kind), ..global };
        let spec = AttnSpec {
            attn,
            rope,
            qkv_bias: false,
            o_bias: false,
            qk_norm: QkNormKind::PerHead,
            sinks: false,
            out_gate: false,
        };
        let norm = |name: &str| norm(&w, &format!("{p}.{name}.weight"), d, cfg);
        layers.push(Gemma3Layer {
            input_norm: norm("input_layernorm")?,
            attn: AttnBlock::load(&w, &format!("{p}.self_attn"), d, spec, &norm_of)?,
            post_attn_norm: norm("post_attention_layernorm")?,
            pre_ffn_norm: norm("pre_feedforward_layernorm")?,
            mlp: Mlp::load(&w, &format!("{p}.mlp"), MLP_NAMES, d, cfg.intermediate_size, Act::GeluTanh)?,
            post_ffn_norm: norm("post_feedforward_layernorm")?,
        });
    }
    let final_norm = norm(&w, "model.norm.weight", d, cfg)?;
    let mut ends = Ends::load(&w, cfg.vocab_size, d, cfg.tie_word_embeddings, final_norm)?;
    // (N, d) embedding rows times sqrt(d), one f32 product each (transformers:
    // `embedding(ids) * embed_scale`, the buffer holding sqrt(d) rounded to f32).
    ends.embed_scale = Some((d as f64).sqrt() as f32);
    let parts = StackParts {
        family: "Gemma 3",
        shape: tl_decoder::StepShape {
            n_layers: cfg.n_layers(),
            n_kv_heads: cfg.num_key_value_heads,
            head_dim: hd,
            vocab_size: cfg.vocab_size,
        },
        hidden: d,
        eps: cfg.rms_norm_eps,
        ends,
        ropes: vec![
            Rope::plain(tl_decoder::inv_freq_default(cfg.rope_local_theta, hd)), // rope_local_base_freq
            Rope::plain(tl_decoder::inv_freq_default(cfg.rope_theta, hd)),       // rope_theta
        ],
        layers,
    };
    Stack::new(parts, ctx.device)
}
