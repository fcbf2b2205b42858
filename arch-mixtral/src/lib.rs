//! tl-arch-mixtral: Mixtral (Mixtral-8x7B, 8x22B), registered as `tl_arch = "mixtral"` and
//! as Hugging Face `model_type = "mixtral"`.
//!
//! A Mixtral layer is a Llama layer whose MLP is tl-decoder's [`Moe`]: a router `[E, d]`
//! (`num_local_experts`), a softmax over the experts, the top `num_experts_per_tok`
//! always renormalised to sum to one (transformers' `MixtralTopKRouter`), SwiGLU experts
//! of width `intermediate_size`, summed in ascending expert id. Attention is Llama's, with
//! `sliding_window` on every layer when the config sets one (`null` or absent: every key,
//! as transformers' `MixtralConfig` defaults). Tensors are the hub's:
//! `model.layers.N.block_sparse_moe.gate.weight` and
//! `block_sparse_moe.experts.E.{w1,w3,w2}.weight` (gate, up, down). GGUF files (llama.cpp's
//! `llama` architecture with `ffn_*_exps`) are not read yet.
//!
//! Nothing names this crate from core: a binary or test that loads a Mixtral writes
//! `use tl_arch_mixtral as _;` so the registrations are linked.
#![deny(missing_docs)]

use std::any::Any;
use std::sync::Arc;

use serde_json::Value;
use tl_core::{
    ArchRegistration, Architecture, BuildCtx, ConfigError, KvGeometry, Model, ModelConfig, ModelError,
    ModelTypeRegistration,
};
use tl_decoder::fields::{experts, invalid};
use tl_decoder::{
    prenorm_stack, Attn, AttnSpec, DecoderConfig, Ffn, LayerAttn, MlpNames, Moe, MoeSpec, QkNormKind, Routing, Variant,
};

/// `MixtralConfig`'s defaults (transformers 5.23) for absent fields.
const DEFAULT_EXPERTS: usize = 8;
const DEFAULT_TOP_K: usize = 2;
/// The largest window accepted (the decoder's own bound on positions is far below).
const MAX_WINDOW: u64 = u32::MAX as u64;

/// Mixtral's expert tensors: `w1` the gate, `w3` the up, `w2` the down projection.
const EXPERT_NAMES: MlpNames = MlpNames { gate: "w1", up: "w3", down: "w2" };

/// A Mixtral's typed config.
#[derive(Clone, Debug, PartialEq)]
pub struct MixtralConfig {
    /// The shared decoder fields; `intermediate_size` is each expert's width.
    pub base: DecoderConfig,
    /// Experts, E (`num_local_experts`).
    pub num_experts: usize,
    /// Experts per token, k (`num_experts_per_tok`).
    pub top_k: usize,
}

/// Mixtral's rule for the layers' attention: `sliding_window` on every layer when set,
/// else every key (transformers applies one mask to all layers).
fn mixtral_layers(json: &Value, n_layers: usize) -> Result<Vec<LayerAttn>, ConfigError> {
    let kind = match json.get("sliding_window") {
        None | Some(Value::Null) => LayerAttn::Global,
        Some(v) => match v.as_u64() {
            Some(w) if (1..=MAX_WINDOW).contains(&w) => LayerAttn::Windowed(w as usize),
            _ => return Err(invalid("sliding_window", v, &format!("expected null or 1..={MAX_WINDOW}"))),
        },
    };
    Ok(vec![kind; n_layers])
}

impl MixtralConfig {
    /// Parse and check `config`, each error naming its field.
    pub fn parse(config: &ModelConfig) -> Result<MixtralConfig, ConfigError> {
        let base = DecoderConfig::parse_with_layers(config, Variant { qkv_bias: false }, mixtral_layers)?;
        let (num_experts, top_k) = experts(config.json(), &["num_local_experts"], DEFAULT_EXPERTS, DEFAULT_TOP_K)?;
        Ok(MixtralConfig { base, num_experts, top_k })
    }
}

/// The Mixtral family.
struct MixtralArch;

impl Architecture for MixtralArch {
    fn parse_config(&self, config: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError> {
        Ok(Arc::new(MixtralConfig::parse(config)?))
    }

    fn kv_geometry(&self, config: &ModelConfig, block_tokens: u32) -> Result<KvGeometry, ConfigError> {
        Ok(config.arch_config::<MixtralConfig>()?.base.kv_geometry(block_tokens))
    }

    fn kv_windows(&self, config: &ModelConfig) -> Result<Option<Vec<Option<usize>>>, ConfigError> {
        Ok(config.arch_config::<MixtralConfig>()?.base.kv_windows())
    }

    fn build(&self, ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
        let cfg = ctx.config.arch_config::<MixtralConfig>()?;
        let b = &cfg.base;
        let global = Attn::new(b.num_attention_heads, b.num_key_value_heads, b.head_dim);
        let moe = MoeSpec {
            experts: cfg.num_experts,
            top_k: cfg.top_k,
            width: b.intermediate_size,
            routing: Routing::SoftmaxTopK { renorm: true },
            router: "gate",
            names: EXPERT_NAMES,
        };
        let stack = prenorm_stack(&ctx, b, "Mixtral", |w, i| {
            let attn = Attn { window: b.layer_attn[i].window(), ..global };
            let spec = AttnSpec {
                attn,
                rope: 0,
                qkv_bias: false,
                o_bias: false,
                qk_norm: QkNormKind::None,
                sinks: false,
                out_gate: false,
            };
            let p = format!("model.layers.{i}.block_sparse_moe");
            Ok((spec, Ffn::Moe(Moe::load(w, &p, b.hidden_size, moe)?)))
        })?;
        Ok(Box::new(stack))
    }
}

inventory::submit!(ArchRegistration { name: "mixtral", make: || Box::new(MixtralArch) });
// A Hugging Face config.json without `tl_arch` selects this crate by its `model_type`.
inventory::submit!(ModelTypeRegistration { model_type: "mixtral", arch: "mixtral" });
