//! tl-arch-qwen3-moe: Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B), registered as
//! `tl_arch = "qwen3_moe"` and as Hugging Face `model_type = "qwen3_moe"`.
//!
//! A Qwen3-MoE layer is a Qwen3 layer (per-head q/k norms, no biases) whose MLP is, in
//! the sparse layers, tl-decoder's [`Moe`]: a router `[E, d]`, a softmax over the `E`
//! experts, the top `num_experts_per_tok`, renormalised when `norm_topk_prob` is true
//! (transformers' `Qwen3MoeTopKRouter`), SwiGLU experts of width `moe_intermediate_size`,
//! summed in ascending expert id. Layer `i` is sparse iff it is not in `mlp_only_layers`
//! and `(i + 1) % decoder_sparse_step == 0`; the others have a dense MLP of width
//! `intermediate_size`. Absent fields take transformers' `Qwen3MoeConfig` defaults.
//!
//! Tensors are the hub's: `model.layers.N.mlp.gate.weight` (the router, kept as stored,
//! never int4: a coarser router would choose other experts) and one tensor per expert,
//! `model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight`. GGUF files
//! (`general.architecture = "qwen3moe"`, llama.cpp's converter) store the router as
//! `blk.N.ffn_gate_inp.weight` and the experts stacked (`ffn_gate_exps`, `ffn_up_exps`,
//! `ffn_down_exps`), served as the per-expert tensors without a copy; llama.cpp always
//! renormalises a qwen3moe file's weights, so its config says `norm_topk_prob: true`
//! (unless `qwen3moe.expert_weights_norm` says false), and a layer without a router is a
//! dense one (`mlp_only_layers`).
//!
//! Nothing names this crate from core: a binary or test that loads a Qwen3-MoE writes
//! `use tl_arch_qwen3_moe as _;` so the registrations are linked.
#![deny(missing_docs)]

use std::any::Any;
use std::sync::Arc;

use serde_json::{json, Value};
use tl_core::{
    ArchRegistration, Architecture, BuildCtx, ConfigError, Gguf, GgufArch, GgufRegistration, KvGeometry, Model,
    ModelConfig, ModelError, ModelTypeRegistration, TensorInfo, TensorMap, WeightError,
};
use tl_decoder::fields::{experts, field, flag, invalid, size};
use tl_decoder::gguf::{config_json, expert_counts, Family, MoeGguf};
use tl_decoder::{dense_mlp, prenorm_stack, DecoderConfig, Ffn, Moe, MoeSpec, Routing, MLP_NAMES};

/// Caps: no released MoE comes near them; a typo that large is refused at parse.
const MAX_WIDTH: usize = 1 << 18;

/// `Qwen3MoeConfig`'s defaults (transformers 5.23) for absent fields.
const DEFAULT_EXPERTS: usize = 128;
const DEFAULT_TOP_K: usize = 8;
const DEFAULT_MOE_WIDTH: usize = 768;

/// A Qwen3-MoE's typed config: Qwen3's fields and the experts'.
#[derive(Clone, Debug, PartialEq)]
pub struct Qwen3MoeConfig {
    /// The shared decoder fields (attention, dense MLP width, RoPE, ...).
    pub base: DecoderConfig,
    /// Experts per sparse layer, E (`num_experts`; transformers 5 also writes it as
    /// `num_local_experts`).
    pub num_experts: usize,
    /// Experts per token, k (`num_experts_per_tok`), `1..=E`.
    pub top_k: usize,
    /// Each expert's MLP width (`moe_intermediate_size`).
    pub moe_intermediate_size: usize,
    /// Renormalise the k chosen weights to sum to one.
    pub norm_topk_prob: bool,
    /// `(L,)` whether each layer is sparse.
    pub sparse: Vec<bool>,
}

impl Qwen3MoeConfig {
    /// Parse and check `config`: Qwen3's fields ([`tl_arch_qwen3::QWEN3`]) and the
    /// experts', each error naming its field.
    pub fn parse(config: &ModelConfig) -> Result<Qwen3MoeConfig, ConfigError> {
        let base = DecoderConfig::parse(config, tl_arch_qwen3::QWEN3)?;
        let json = config.json();
        let (experts, top_k) = experts(json, &["num_experts", "num_local_experts"], DEFAULT_EXPERTS, DEFAULT_TOP_K)?;
        let width = size(json, "moe_intermediate_size", MAX_WIDTH)?.unwrap_or(DEFAULT_MOE_WIDTH);
        let step = size(json, "decoder_sparse_step", base.num_hidden_layers.max(1))?.unwrap_or(1);
        let dense = match field(json, "mlp_only_layers") {
            None => Vec::new(),
            Some(v) => v
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .map(|x| x.as_u64().filter(|&i| (i as usize) < base.num_hidden_layers).map(|i| i as usize))
                        .collect::<Option<Vec<usize>>>()
                })
                .ok_or_else(|| {
                    invalid(
                        "mlp_only_layers",
                        v,
                        &format!("expected a list of layer indices below {}", base.num_hidden_layers),
                    )
                })?,
        };
        // transformers: sparse iff not listed and `num_experts > 0 and (i + 1) % step == 0`.
        let sparse = (0..base.num_hidden_layers).map(|i| !dense.contains(&i) && (i + 1) % step == 0).collect();
        Ok(Qwen3MoeConfig {
            base,
            num_experts: experts,
            top_k,
            moe_intermediate_size: width,
            norm_topk_prob: flag(json, "norm_topk_prob")?.unwrap_or(false),
            sparse,
        })
    }
}

/// The Qwen3-MoE family.
struct Qwen3MoeArch;

impl Architecture for Qwen3MoeArch {
    fn parse_config(&self, config: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError> {
        Ok(Arc::new(Qwen3MoeConfig::parse(config)?))
    }

    fn kv_geometry(&self, config: &ModelConfig, block_tokens: u32) -> Result<KvGeometry, ConfigError> {
        Ok(config.arch_config::<Qwen3MoeConfig>()?.base.kv_geometry(block_tokens))
    }

    fn kv_windows(&self, config: &ModelConfig) -> Result<Option<Vec<Option<usize>>>, ConfigError> {
        Ok(config.arch_config::<Qwen3MoeConfig>()?.base.kv_windows())
    }

    fn build(&self, ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
        let cfg = ctx.config.arch_config::<Qwen3MoeConfig>()?;
        let attn = tl_arch_qwen3::forward::attn_spec(&cfg.base);
        let moe = MoeSpec {
            experts: cfg.num_experts,
            top_k: cfg.top_k,
            width: cfg.moe_intermediate_size,
            routing: Routing::SoftmaxTopK { renorm: cfg.norm_topk_prob },
            router: "gate",
            names: MLP_NAMES,
        };
        let stack = prenorm_stack(&ctx, &cfg.base, "Qwen3-MoE", |w, i| {
            let ffn = if cfg.sparse[i] {
                Ffn::Moe(Moe::load(w, &format!("model.layers.{i}.mlp"), cfg.base.hidden_size, moe)?)
            } else {
                dense_mlp(w, &cfg.base, i)?
            };
            Ok((attn, ffn))
        })?;
        Ok(Box::new(stack))
    }
}

const FAMILY: Family =
    Family { prefix: "qwen3moe", tl_arch: "qwen3_moe", model_type: "qwen3_moe", class: "Qwen3MoeForCausalLM" };

const EXPERTS: MoeGguf = MoeGguf { module: "mlp", names: MLP_NAMES };

/// Qwen3-MoE GGUF files: llama.cpp's names to the hub's, `qwen3moe.*` metadata to a
/// config.json.
struct Qwen3MoeGguf;

impl GgufArch for Qwen3MoeGguf {
    fn config_json(&self, file: &Gguf) -> Result<Value, WeightError> {
        let mut cfg = config_json(file, &FAMILY)?;
        let (count, used) = expert_counts(file, FAMILY.prefix)?;
        let width = file.required("qwen3moe.expert_feed_forward_length")?;
        let layers = file.required("qwen3moe.block_count")?;
        let dense: Vec<u64> =
            (0..layers).filter(|i| !file.has_gguf_tensor(&format!("blk.{i}.ffn_gate_inp.weight"))).collect();
        let norm = match file.value("qwen3moe.expert_weights_norm") {
            Some(v) => v.to_bool().map_err(|_| file.meta_err("qwen3moe.expert_weights_norm", "expected a bool"))?,
            None => true,
        };
        cfg.insert("num_experts".into(), json!(count));
        cfg.insert("num_experts_per_tok".into(), json!(used));
        cfg.insert("moe_intermediate_size".into(), json!(width));
        cfg.insert("norm_topk_prob".into(), json!(norm));
        cfg.insert("mlp_only_layers".into(), json!(dense));
        cfg.insert("decoder_sparse_step".into(), json!(1));
        cfg.insert("use_sliding_window".into(), json!(false));
        cfg.insert("attention_bias".into(), json!(false));
        Ok(Value::Object(cfg))
    }

    fn tensor(&self, _file: &Gguf, gguf_name: &str, _info: &TensorInfo) -> Result<TensorMap, WeightError> {
        let name = EXPERTS.router(gguf_name).or_else(|| tl_arch_qwen3::hf_name_qwen3(gguf_name));
        Ok(TensorMap { name: name.unwrap_or_else(|| gguf_name.to_string()), rows: None })
    }

    fn stacked(&self, _file: &Gguf, gguf_name: &str, info: &TensorInfo) -> Result<Option<Vec<String>>, WeightError> {
        Ok(EXPERTS.stacked(gguf_name, info))
    }
}

inventory::submit!(ArchRegistration { name: "qwen3_moe", make: || Box::new(Qwen3MoeArch) });
inventory::submit!(GgufRegistration { architecture: "qwen3moe", make: || Box::new(Qwen3MoeGguf) });
// A Hugging Face config.json without `tl_arch` selects this crate by its `model_type`.
inventory::submit!(ModelTypeRegistration { model_type: "qwen3_moe", arch: "qwen3_moe" });
