//! tl-arch-qwen3: Qwen3, registered as `tl_arch = "qwen3"`, as Hugging Face
//! `model_type = "qwen3"` and as GGUF `general.architecture = "qwen3"`.
//!
//! A Qwen3 is Qwen2 without the q/k/v biases and with an RMSNorm over `head_dim` (its own
//! weight, the model's `rms_norm_eps`) on every query and key head before RoPE; its
//! `head_dim` is given in the config and need not be `hidden / heads` (Qwen3-0.6B: 1024 /
//! 16 = 64, head_dim 128). Its forward ([`forward`]) is its own file, composed of
//! tl-decoder's blocks over the same paged f16 KV pool and batch-invariant kernels.
//!
//! Sliding-window configs (`use_sliding_window: true`, or `layer_types` with a
//! `sliding_attention`) are refused: no released Qwen3 uses one. In GGUF files llama.cpp
//! does not permute Qwen3's Q/K rows, so names are all that is translated; Qwen3 reranker
//! GGUFs (a `cls_out` head, a pooling type) are refused. The vocabulary of a Qwen3 GGUF is
//! Qwen2's (`tokenizer.ggml.pre = "qwen2"`): this crate links tl-arch-qwen2, whose
//! registration serves it.
//!
//! Nothing names this crate from core: a binary or test that loads a Qwen3 writes
//! `use tl_arch_qwen3 as _;` so the registrations are linked.
#![deny(missing_docs)]

pub mod forward;

use std::any::Any;
use std::sync::Arc;

use serde_json::{json, Value};
use tl_core::{
    ArchRegistration, Architecture, BuildCtx, ConfigError, Gguf, GgufArch, GgufRegistration, KvGeometry, Model,
    ModelConfig, ModelError, ModelTypeRegistration, TensorInfo, TensorMap, WeightError,
};
use tl_decoder::gguf::{config_json, hf_name, Family};
use tl_decoder::{DecoderConfig, Variant};

// A Qwen3 GGUF's vocabulary needs the "qwen2" pre-tokenizer tl-arch-qwen2 registers.
use tl_arch_qwen2 as _;

/// A Qwen3's typed config: the shared decoder fields, no biases (the head norms are
/// always there, so nothing in the config says so).
pub type Qwen3Config = DecoderConfig;

/// What Qwen3 takes from the shared decoder's config: no biased projections (a config
/// with `attention_bias: true` is refused, naming it).
pub const QWEN3: Variant = Variant { qkv_bias: false };

/// The Qwen3 family.
struct Qwen3Arch;

impl Architecture for Qwen3Arch {
    fn parse_config(&self, config: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError> {
        Ok(Arc::new(DecoderConfig::parse(config, QWEN3)?))
    }

    fn kv_geometry(&self, config: &ModelConfig, block_tokens: u32) -> Result<KvGeometry, ConfigError> {
        tl_decoder::kv_geometry(config, block_tokens)
    }

    fn kv_windows(&self, config: &ModelConfig) -> Result<Option<Vec<Option<usize>>>, ConfigError> {
        tl_decoder::kv_windows(config)
    }

    fn build(&self, ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
        forward::build(ctx)
    }
}

const FAMILY: Family = Family { prefix: "qwen3", tl_arch: "qwen3", model_type: "qwen3", class: "Qwen3ForCausalLM" };

/// Qwen3 GGUF files: llama.cpp's names to HF's (rows as stored), `qwen3.*` metadata to a
/// config.json.
struct Qwen3Gguf;

impl GgufArch for Qwen3Gguf {
    fn config_json(&self, file: &Gguf) -> Result<Value, WeightError> {
        // A reranker's converter writes a two-row `cls_out` head and a pooling type in
        // place of the LM head: running it as a causal LM would be wrong, silently.
        if file.has_gguf_tensor("cls_out.weight") {
            return Err(file.meta_err("cls_out.weight", "a Qwen3 reranker (classifier head), not a causal LM"));
        }
        if let Some(p) = file.uint("qwen3.pooling_type")? {
            return Err(file.meta_err("qwen3.pooling_type", &format!("{p}: an embedding or reranker model")));
        }
        let mut cfg = config_json(file, &FAMILY)?;
        // llama.cpp's qwen3 graph: full attention in every layer, no biases.
        cfg.insert("use_sliding_window".into(), json!(false));
        cfg.insert("attention_bias".into(), json!(false));
        Ok(Value::Object(cfg))
    }

    fn tensor(&self, _file: &Gguf, gguf_name: &str, _info: &TensorInfo) -> Result<TensorMap, WeightError> {
        Ok(TensorMap { name: hf_name_qwen3(gguf_name).unwrap_or_else(|| gguf_name.to_string()), rows: None })
    }
}

/// The HF name of a Qwen3 GGUF tensor: the Llama names plus the two head norms.
pub fn hf_name_qwen3(gguf: &str) -> Option<String> {
    if let Some(name) = hf_name(gguf) {
        return Some(name);
    }
    let (layer, part) = gguf.strip_prefix("blk.")?.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let module = match part {
        "attn_q_norm.weight" => "q_norm",
        "attn_k_norm.weight" => "k_norm",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.self_attn.{module}.weight"))
}

inventory::submit!(ArchRegistration { name: "qwen3", make: || Box::new(Qwen3Arch) });
// A Hugging Face config.json without `tl_arch` selects this crate by its `model_type`.
inventory::submit!(ModelTypeRegistration { model_type: "qwen3", arch: "qwen3" });
inventory::submit!(GgufRegistration { architecture: "qwen3", make: || Box::new(Qwen3Gguf) });
