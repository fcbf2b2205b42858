//! tl-arch-olmoe: OLMoE (OLMoE-1B-7B), registered as `tl_arch = "olmoe"` and as Hugging
//! Face `model_type = "olmoe"`.
//!
//! An OLMoE layer is a Llama layer with two changes: after the q/k/v projection the whole
//! query row `(H*D,)` and the whole key row `(H_kv*D,)` are RMS-normed (`q_norm`,
//! `k_norm`, transformers' `OlmoeAttention`) before RoPE, and the MLP is tl-decoder's
//! [`Moe`]: a router `[E, d]` (`num_experts`), a softmax, the top `num_experts_per_tok`,
//! renormalised only when `norm_topk_prob` is true (false in the released models), SwiGLU
//! experts of width `intermediate_size`, summed in ascending expert id. `clip_qkv` (a
//! clamp of q, k and v) is not implemented and refused when set. Tensors are the hub's:
//! `model.layers.N.mlp.gate.weight`, `mlp.experts.E.{gate,up,down}_proj.weight`.
//!
//! Nothing names this crate from core: a binary or test that loads an OLMoE writes
//! `use tl_arch_olmoe as _;` so the registrations are linked.
#![deny(missing_docs)]

use std::any::Any;
use std::sync::Arc;

use tl_core::{
    ArchRegistration, Architecture, BuildCtx, ConfigError, KvGeometry, Model, ModelConfig, ModelError,
    ModelTypeRegistration,
};
use tl_decoder::fields::{experts, field, flag, invalid};
use tl_decoder::{
    prenorm_stack, Attn, AttnSpec, DecoderConfig, Ffn, Moe, MoeSpec, QkNormKind, Routing, Variant, MLP_NAMES,
};

/// `OlmoeConfig`'s defaults (transformers 5.23) for absent fields.
const DEFAULT_EXPERTS: usize = 64;
const DEFAULT_TOP_K: usize = 8;

/// An OLMoE's typed config.
#[derive(Clone, Debug, PartialEq)]
pub struct OlmoeConfig {
    /// The shared decoder fields; `intermediate_size` is each expert's width.
    pub base: DecoderConfig,
    /// Experts, E (`num_experts`).
    pub num_experts: usize,
    /// Experts per token, k (`num_experts_per_tok`).
    pub top_k: usize,
    /// Renormalise the k chosen weights to sum to one.
    pub norm_topk_prob: bool,
}

impl OlmoeConfig {
    /// Parse and check `config`, each error naming its field.
    pub fn parse(config: &ModelConfig) -> Result<OlmoeConfig, ConfigError> {
        let base = DecoderConfig::parse(config, Variant { qkv_bias: false })?;
        let json = config.json();
        if let Some(clip) = field(json, "clip_qkv") {
            return Err(invalid("clip_qkv", clip, "clamping q, k and v is not implemented"));
        }
        let (num_experts, top_k) = experts(json, &["num_experts"], DEFAULT_EXPERTS, DEFAULT_TOP_K)?;
        let norm_topk_prob = flag(json, "norm_topk_prob")?.unwrap_or(false);
        Ok(OlmoeConfig { base, num_experts, top_k, norm_topk_prob })
    }
}

/// The OLMoE family.
struct OlmoeArch;

impl Architecture for OlmoeArch {
    fn parse_config(&self, config: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError> {
        Ok(Arc::new(OlmoeConfig::parse(config)?))
    }

    fn kv_geometry(&self, config: &ModelConfig, block_tokens: u32) -> Result<KvGeometry, ConfigError> {
        Ok(config.arch_config::<OlmoeConfig>()?.base.kv_geometry(block_tokens))
    }

    fn kv_windows(&self, config: &ModelConfig) -> Result<Option<Vec<Option<usize>>>, ConfigError> {
        Ok(config.arch_config::<OlmoeConfig>()?.base.kv_windows())
    }

    fn build(&self, ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
        let cfg = ctx.config.arch_config::<OlmoeConfig>()?;
        let b = &cfg.base;
        let spec = AttnSpec {
            attn: Attn::new(b.num_attention_heads, b.num_key_value_heads, b.head_dim),
            rope: 0,
            qkv_bias: false,
            o_bias: false,
            qk_norm: QkNormKind::Full,
            sinks: false,
            out_gate: false,
        };
        let moe = MoeSpec {
            experts: cfg.num_experts,
            top_k: cfg.top_k,
            width: b.intermediate_size,
            routing: Routing::SoftmaxTopK { renorm: cfg.norm_topk_prob },
            router: "gate",
            names: MLP_NAMES,
        };
        let stack = prenorm_stack(&ctx, b, "OLMoE", |w, i| {
            Ok((spec, Ffn::Moe(Moe::load(w, &format!("model.layers.{i}.mlp"), b.hidden_size, moe)?)))
        })?;
        Ok(Box::new(stack))
    }
}

inventory::submit!(ArchRegistration { name: "olmoe", make: || Box::new(OlmoeArch) });
// A Hugging Face config.json without `tl_arch` selects this crate by its `model_type`.
inventory::submit!(ModelTypeRegistration { model_type: "olmoe", arch: "olmoe" });
