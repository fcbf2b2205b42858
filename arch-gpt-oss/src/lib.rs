//! tl-arch-gpt-oss: gpt-oss (gpt-oss-20b, gpt-oss-120b), registered as `tl_arch =
//! "gpt_oss"` and as Hugging Face `model_type = "gpt_oss"`.
//!
//! A gpt-oss layer is tl-decoder's pre-norm layer (transformers' `GptOssDecoderLayer`):
//!
//! - attention with q, k, v and o biases, one sink logit per query head
//!   (`self_attn.sinks`: one more logit in each softmax whose value is dropped), scores
//!   scaled by `head_dim^-0.5`, YaRN RoPE, and layers alternating between a sliding window
//!   of `sliding_window` keys and full attention (`layer_types`; transformers' default:
//!   even layers windowed);
//! - a mixture of experts: a router with a bias (`mlp.router`), the top
//!   `num_experts_per_tok` logits then a softmax over them, experts whose gate and up
//!   projections carry biases and whose activation is the clamped SwiGLU (`swiglu_limit`,
//!   `swiglu_alpha`), summed in ascending expert id.
//!
//! The hub's bf16 checkpoints hold each layer's experts fused: `mlp.experts.gate_up_proj`
//! `[E, d, 2I]` (gate and up interleaved along the last axis), `gate_up_proj_bias`
//! `[E, 2I]`, `down_proj` `[E, I, d]`, `down_proj_bias` `[E, d]`; each expert's matrices
//! are transposed out of them at load, kept in the stored type. The hub's MXFP4
//! checkpoints (the released gpt-oss-20b/120b: `gate_up_proj_blocks` / `_scales` and
//! `down_proj_blocks` / `_scales`, rows interleaved the same way) become MXFP4 blocks, the
//! same values transformers dequantizes them to. GGUF files (llama.cpp's layout, [`gguf`]:
//! experts split per projection, usually MXFP4) are read too, their blocks kept as stored.
//!
//! Nothing names this crate from core: a binary or test that loads a gpt-oss writes
//! `use tl_arch_gpt_oss as _;` so the registrations are linked.
#![deny(missing_docs)]

use std::any::Any;
use std::sync::Arc;

use serde_json::Value;
use tl_core::{
    ArchRegistration, Architecture, BuildCtx, ConfigError, GgufRegistration, KvGeometry, Model, ModelConfig,
    ModelError, ModelTypeRegistration, WeightError,
};
use tl_decoder::fields::{experts, field, invalid, positive_float};
use tl_decoder::{
    layer_types, prenorm_stack, sliding_window, Act, Attn, AttnSpec, DecoderConfig, Ffn, LayerAttn, Loader, Mlp, Moe,
    Proj, QkNormKind, Routing, Variant, MLP_NAMES,
};

mod gguf;

/// `GptOssConfig`'s defaults (transformers 5.23) for absent fields.
const DEFAULT_EXPERTS: usize = 128;
const DEFAULT_TOP_K: usize = 4;
const DEFAULT_LIMIT: f64 = 7.0;
const DEFAULT_ALPHA: f64 = 1.702;

/// A gpt-oss's typed config.
#[derive(Clone, Debug, PartialEq)]
pub struct GptOssConfig {
    /// The shared decoder fields; `intermediate_size` is each expert's width; each layer's
    /// window in `layer_attn`.
    pub base: DecoderConfig,
    /// Experts, E (`num_local_experts`).
    pub num_experts: usize,
    /// Experts per token, k (`num_experts_per_tok`).
    pub top_k: usize,
    /// The clamp of the experts' SwiGLU (`swiglu_limit`).
    pub swiglu_limit: f32,
    /// The slope of its sigmoid (`swiglu_alpha`).
    pub swiglu_alpha: f32,
}

/// gpt-oss's layers: `layer_types` when given, else transformers' default (even layers
/// windowed, odd ones full), the window `sliding_window`.
fn gpt_oss_layers(json: &Value, n_layers: usize) -> Result<Vec<LayerAttn>, ConfigError> {
    let window = sliding_window(json)?;
    if let Some(kinds) = layer_types(json, n_layers, window)? {
        return Ok(kinds);
    }
    let w = window.ok_or_else(|| invalid("sliding_window", &Value::Null, "gpt-oss's windowed layers need a window"))?;
    Ok((0..n_layers).map(|i| if i % 2 == 0 { LayerAttn::Windowed(w) } else { LayerAttn::Global }).collect())
}

impl GptOssConfig {
    /// Parse and check `config`, each error naming its field.
    pub fn parse(config: &ModelConfig) -> Result<GptOssConfig, ConfigError> {
        // The q/k/v (and o) biases are always there; `attention_bias: false` is refused.
        let json = config.json();
        if let Some(v) = field(json, "attention_bias").filter(|v| v.as_bool() == Some(false)) {
            return Err(invalid("attention_bias", v, "gpt-oss without attention biases is not implemented"));
        }
        let base = DecoderConfig::parse_with_layers(config, Variant { qkv_bias: true }, gpt_oss_layers)?;
        let (num_experts, top_k) =
            experts(json, &["num_local_experts", "num_experts"], DEFAULT_EXPERTS, DEFAULT_TOP_K)?;
        let swiglu_limit = positive_float(json, "swiglu_limit")?.unwrap_or(DEFAULT_LIMIT) as f32;
        let swiglu_alpha = positive_float(json, "swiglu_alpha")?.unwrap_or(DEFAULT_ALPHA) as f32;
        Ok(GptOssConfig { base, num_experts, top_k, swiglu_limit, swiglu_alpha })
    }
}

/// Layer `i`'s experts below `p` (`model.layers.N.mlp`): the hub's fused tensors, or a
/// GGUF file's per-expert ones ([`gguf`]).
fn moe(w: &Loader<'_>, cfg: &GptOssConfig, p: &str) -> Result<Moe, ModelError> {
    let (d, e_count) = (cfg.base.hidden_size, cfg.num_experts);
    let router = w.router(&format!("{p}.router.weight"), e_count, d)?;
    let router_bias = Some(w.vector(&format!("{p}.router.bias"), e_count)?);
    let has = |t: &str| w.store().info(&format!("{p}.experts.{t}")).is_some();
    let experts = if has("gate_up_proj") || has("gate_up_proj_blocks") {
        fused_experts(w, cfg, p)?
    } else {
        split_experts(w, cfg, p)?
    };
    Ok(Moe { router, router_bias, experts, top_k: cfg.top_k, routing: Routing::TopKSoftmax, shared: None })
}

/// The experts' activation.
fn act(cfg: &GptOssConfig) -> Act {
    Act::ClampedSwiGlu { limit: cfg.swiglu_limit, alpha: cfg.swiglu_alpha }
}

/// The hub's layouts: bf16 `gate_up_proj` `[E, d, 2I]` (gate and up interleaved along the
/// last axis: gate columns even, up columns odd) and `down_proj` `[E, I, d]`; or MXFP4
/// `gate_up_proj_blocks` / `_scales` with the 2I rows interleaved the same way and
/// `down_proj_blocks` / `_scales` of d rows (`Loader::mxfp4_rows`); their biases.
fn fused_experts(w: &Loader<'_>, cfg: &GptOssConfig, p: &str) -> Result<Vec<Mlp>, ModelError> {
    let (d, e_count, inter) = (cfg.base.hidden_size, cfg.num_experts, cfg.base.intermediate_size);
    let (gu, down) = (format!("{p}.experts.gate_up_proj"), format!("{p}.experts.down_proj"));
    let mxfp4 = w.store().info(&format!("{gu}_blocks")).is_some();
    let gu_bias = w.store().f32(&format!("{p}.experts.gate_up_proj_bias"), &[e_count, 2 * inter])?;
    let down_bias = w.store().f32(&format!("{p}.experts.down_proj_bias"), &[e_count, d])?;
    let gate_cols: Vec<usize> = (0..inter).map(|i| 2 * i).collect();
    let up_cols: Vec<usize> = (0..inter).map(|i| 2 * i + 1).collect();
    let all: Vec<usize> = (0..d).collect();
    // Matrix `e`'s rows `sel` of the gate/up (`gate_up` true) or down projection.
    let part = |gate_up: bool, e: usize, sel: &[usize]| match (mxfp4, gate_up) {
        (true, true) => w.mxfp4_rows(&gu, (e_count, 2 * inter, d), e, sel),
        (true, false) => w.mxfp4_rows(&down, (e_count, d, inter), e, sel),
        (false, true) => w.stacked_columns(&gu, (e_count, d, 2 * inter), e, sel),
        (false, false) => w.stacked_columns(&down, (e_count, inter, d), e, sel),
    };
    let mut experts = Vec::with_capacity(e_count);
    for e in 0..e_count {
        let b = &gu_bias[e * 2 * inter..(e + 1) * 2 * inter];
        let mut gate_up_bias: Vec<f32> = gate_cols.iter().map(|&c| b[c]).collect();
        gate_up_bias.extend(up_cols.iter().map(|&c| b[c]));
        experts.push(Mlp {
            gate_up: Proj::new(vec![part(true, e, &gate_cols)?, part(true, e, &up_cols)?]),
            down: part(false, e, &all)?,
            act: act(cfg),
            gate_up_bias: Some(gate_up_bias),
            down_bias: Some(down_bias[e * d..(e + 1) * d].to_vec()),
            lora: Default::default(),
        });
    }
    Ok(experts)
}

/// A GGUF file's layout: each expert's `gate_proj` / `up_proj` `[I, d]` and `down_proj`
/// `[d, I]` (views of the stacked `ffn_*_exps`), the biases `[E, I]` / `[E, d]`.
fn split_experts(w: &Loader<'_>, cfg: &GptOssConfig, p: &str) -> Result<Vec<Mlp>, ModelError> {
    let (d, e_count, inter) = (cfg.base.hidden_size, cfg.num_experts, cfg.base.intermediate_size);
    let extra = format!("{p}.experts.{e_count}.gate_proj.weight");
    if w.store().info(&extra).is_some() {
        return Err(ModelError::Weights(WeightError::Tensor {
            path: w.store().path().to_path_buf(),
            name: extra,
            reason: format!("the config says {e_count} experts, the file holds more"),
        }));
    }
    let bias = |proj: &str, n: usize| w.store().f32(&gguf::expert_bias(p, proj), &[e_count, n]);
    let (gate_b, up_b, down_b) = (bias("gate", inter)?, bias("up", inter)?, bias("down", d)?);
    let mut experts = Vec::with_capacity(e_count);
    for e in 0..e_count {
        let mut mlp = Mlp::load(w, &format!("{p}.experts.{e}"), MLP_NAMES, d, inter, act(cfg))?;
        let mut gate_up_bias = gate_b[e * inter..(e + 1) * inter].to_vec();
        gate_up_bias.extend_from_slice(&up_b[e * inter..(e + 1) * inter]);
        mlp.gate_up_bias = Some(gate_up_bias);
        mlp.down_bias = Some(down_b[e * d..(e + 1) * d].to_vec());
        experts.push(mlp);
    }
    Ok(experts)
}

/// The gpt-oss family.
struct GptOssArch;

impl Architecture for GptOssArch {
    fn parse_config(&self, config: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError> {
        Ok(Arc::new(GptOssConfig::parse(config)?))
    }

    fn kv_geometry(&self, config: &ModelConfig, block_tokens: u32) -> Result<KvGeometry, ConfigError> {
        Ok(config.arch_config::<GptOssConfig>()?.base.kv_geometry(block_tokens))
    }

    fn kv_windows(&self, config: &ModelConfig) -> Result<Option<Vec<Option<usize>>>, ConfigError> {
        Ok(config.arch_config::<GptOssConfig>()?.base.kv_windows())
    }

    fn build(&self, ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
        let cfg = ctx.config.arch_config::<GptOssConfig>()?;
        let b = &cfg.base;
        let global = Attn::new(b.num_attention_heads, b.num_key_value_heads, b.head_dim);
        let stack = prenorm_stack(&ctx, b, "gpt-oss", |w, i| {
            let attn = Attn { window: b.layer_attn[i].window(), ..global };
            let spec = AttnSpec {
                attn,
                rope: 0,
                qkv_bias: true,
                o_bias: true,
                qk_norm: QkNormKind::None,
                sinks: true,
                out_gate: false,
            };
            Ok((spec, Ffn::Moe(moe(w, cfg, &format!("model.layers.{i}.mlp"))?)))
        })?;
        Ok(Box::new(stack))
    }
}

inventory::submit!(ArchRegistration { name: "gpt_oss", make: || Box::new(GptOssArch) });
inventory::submit!(GgufRegistration { architecture: "gpt-oss", make: || Box::new(gguf::GptOssGguf) });
// A Hugging Face config.json without `tl_arch` selects this crate by its `model_type`.
inventory::submit!(ModelTypeRegistration { model_type: "gpt_oss", arch: "gpt_oss" });
