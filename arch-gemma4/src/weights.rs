//! Gemma 4's tensors under Hugging Face's names, read through tl-decoder's [`Loader`]
//! under the engine's weight mode: projections native, widened or int4; the embedding
//! tables never int4; norms and `layer_scalar` as f32 vectors (used as stored: Gemma 4's
//! norms multiply by `w`). A shared-KV layer's k/v tensors are not read (transformers
//! ignores them too).

use tl_core::{BuildCtx, ModelError};
use tl_decoder::{
    inv_freq_default, Act, Attn, Ends, Loader, Mlp, Moe, MoeSpec, Proj, Rope, Routing, Stack, StackParts, StepShape,
    MLP_NAMES,
};

use crate::attn::G4Attn;
use crate::config::{Gemma4Config, Kind, KindShape};
use crate::forward::{G4Moe, Gemma4Layer, PerLayerInputs, PleBlock};

/// The RoPE tables: sliding layers apply the first, full ones the second.
const ROPE_SLIDING: usize = 0;
const ROPE_FULL: usize = 1;

/// A kind's inverse frequencies: transformers' default ones over the kind's head size,
/// past the rotated pairs 0 (`proportional`: those pairs pass unrotated).
fn inv_freq(s: &KindShape) -> Vec<f32> {
    let mut f = inv_freq_default(s.theta, s.head_dim);
    f.iter_mut().skip(s.rotated).for_each(|x| *x = 0.0);
    f
}

/// The Gemma 4 `ctx` describes, every tensor loaded.
pub fn load(cfg: &Gemma4Config, ctx: &BuildCtx<'_>) -> Result<Stack<Gemma4Layer>, ModelError> {
    // The experts are stacked (`experts.gate_up_proj` `[E, 2I, d]`): served per expert.
    let experts = tl_decoder::StackedExperts { inner: ctx.weights };
    let ctx = &BuildCtx { weights: &experts, ..*ctx };
    let w = Loader::new(ctx)?;
    let (d, heads, n_layers) = (cfg.hidden_size, cfg.heads, cfg.n_layers());
    let (hp, dp) = cfg.pool_shape();
    let sources = cfg.sources()?;
    let mut layers = Vec::with_capacity(n_layers);
    for (i, &kind) in cfg.layers.iter().enumerate() {
        let p = format!("model.layers.{i}");
        let s = cfg.shape(kind);
        let (hd, hkv) = (s.head_dim, s.kv_heads);
        let a = format!("{p}.self_attn");
        let owns = sources[i].is_none();
        let k_eq_v = cfg.k_eq_v && kind == Kind::Full;
        let kv = if owns {
            let mut parts = vec![w.proj(&format!("{a}.k_proj"), hkv * hd, d)?];
            if !k_eq_v {
                parts.push(w.proj(&format!("{a}.v_proj"), hkv * hd, d)?);
            }
            Some(Proj::new(parts))
        } else {
            None
        };
        let attn = G4Attn {
            q: w.proj(&format!("{a}.q_proj"), heads * hd, d)?,
            kv,
            k_eq_v,
            q_norm: w.vector(&format!("{a}.q_norm.weight"), hd)?,
            k_norm: if owns { w.vector(&format!("{a}.k_norm.weight"), hd)? } else { Vec::new() },
            ones: vec![1.0; hd],
            kv_heads: hkv,
            head_dim: hd,
            pool: Attn { heads, kv_heads: hp, head_dim: dp, scale: 1.0, window: cfg.window(kind) },
            rope: if kind == Kind::Sliding { ROPE_SLIDING } else { ROPE_FULL },
            o: w.proj(&format!("{a}.o_proj"), d, heads * hd)?,
        };
        let wide = if cfg.double_wide_mlp && !owns { 2 } else { 1 };
        let norm = |name: &str| w.vector(&format!("{p}.{name}.weight"), d);
        let ple = if cfg.ple_dim > 0 {
            Some(PleBlock {
                gate: w.proj(&format!("{p}.per_layer_input_gate"), cfg.ple_dim, d)?,
                proj: w.proj(&format!("{p}.per_layer_projection"), d, cfg.ple_dim)?,
                norm: norm("post_per_layer_input_norm")?,
                layers: n_layers,
            })
        } else {
            None
        };
        let moe = match cfg.moe {
            None => None,
            Some(m) => {
                let spec = MoeSpec {
                    experts: m.experts,
                    top_k: m.top_k,
                    width: m.width,
                    routing: Routing::SoftmaxTopK { renorm: true },
                    router: "router.proj",
                    names: MLP_NAMES,
                };
                let mut moe = Moe::load(&w, &p, d, spec)?;
                // Gemma's experts are GELU-tanh gated, like its MLP.
                moe.experts.iter_mut().for_each(|e| e.act = Act::GeluTanh);
                Some(G4Moe {
                    moe,
                    router_scale: w.vector(&format!("{p}.router.scale"), d)?,
                    root: (d as f64).powf(-0.5) as f32,
                    per_expert_scale: w.vector(&format!("{p}.router.per_expert_scale"), m.experts)?,
                    ones: vec![1.0; d],
                    post_norm_1: norm("post_feedforward_layernorm_1")?,
                    pre_norm_2: norm("pre_feedforward_layernorm_2")?,
                    post_norm_2: norm("post_feedforward_layernorm_2")?,
                })
            }
        };
        layers.push(Gemma4Layer {
            input_norm: norm("input_layernorm")?,
            attn,
            post_attn_norm: norm("post_attention_layernorm")?,
            pre_ffn_norm: norm("pre_feedforward_layernorm")?,
            mlp: Mlp::load(&w, &format!("{p}.mlp"), MLP_NAMES, d, wide * cfg.intermediate_size, Act::GeluTanh)?,
            post_ffn_norm: norm("post_feedforward_layernorm")?,
            moe,
            ple,
            scalar: w.vector(&format!("{p}.layer_scalar"), 1)?[0],
        });
    }
    let mut ends = Ends::load(&w, cfg.vocab_size, d, cfg.tie_word_embeddings, w.vector("model.norm.weight", d)?)?;
    // transformers: `embedding(ids) * embed_scale`, the buffer holding sqrt(d) in f32.
    ends.embed_scale = Some((d as f64).sqrt() as f32);
    ends.softcap = cfg.final_logit_softcapping;
    let parts = StackParts {
        family: "Gemma 4",
        shape: StepShape { n_layers, n_kv_heads: hp, head_dim: dp, vocab_size: cfg.vocab_size },
        hidden: d,
        eps: cfg.rms_norm_eps,
        ends,
        ropes: vec![Rope::plain(inv_freq(&cfg.sliding)), Rope::plain(inv_freq(&cfg.full))],
        layers,
    };
    let stack = Stack::new(parts, ctx.device)?;
    if cfg.ple_dim == 0 {
        return Ok(stack);
    }
    let lp = n_layers * cfg.ple_dim;
    let inputs = PerLayerInputs {
        table: w.matrix("model.embed_tokens_per_layer.weight", cfg.ple_vocab, lp)?,
        proj: w.proj("model.per_layer_model_projection", lp, d)?,
        norm: w.vector("model.per_layer_projection_norm.weight", cfg.ple_dim)?,
        // Python floats rounded to f32 where they meet f32 tensors, as transformers does.
        table_scale: (cfg.ple_dim as f64).sqrt() as f32,
        proj_scale: (d as f64).powf(-0.5) as f32,
        mix_scale: 2f64.powf(-0.5) as f32,
    };
    Ok(stack.with_inputs(Box::new(inputs)))
}
