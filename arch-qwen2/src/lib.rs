//! tl-arch-qwen2: Qwen2 and Qwen2.5, registered as `tl_arch = "qwen2"`, as Hugging Face
//! `model_type = "qwen2"` and as GGUF `general.architecture = "qwen2"`.
//!
//! A Qwen2 is the Llama decoder plus biases on the q, k and v projections, with its own
//! RoPE base (`rope_theta`, 1e6 for Qwen2.5) and a tied or untied LM head; it runs on the
//! shared tl-decoder (same paged f16 KV pool, same batch-invariant tl-quant kernels).
//! Sliding-window configs are refused, as for Llama. In GGUF files llama.cpp does not
//! permute Qwen2's Q/K rows, so the names are all that is translated.
//!
//! Nothing names this crate from core: a binary or test that loads a Qwen2 writes
//! `use tl_arch_qwen2 as _;` so the registrations are linked.
#![deny(missing_docs)]

use std::any::Any;
use std::sync::Arc;

use serde_json::{json, Value};
use tl_core::{
    ArchRegistration, Architecture, BuildCtx, ConfigError, Gguf, GgufArch, GgufPreTokenizer, GgufRegistration,
    KvGeometry, Model, ModelConfig, ModelError, ModelTypeRegistration, TensorInfo, TensorMap, WeightError,
};
use tl_decoder::gguf::{config_json, hf_name, Family};
use tl_decoder::{DecoderConfig, Variant};

/// A Qwen2's typed config: the shared decoder fields, `qkv_bias` set.
pub type Qwen2Config = DecoderConfig;

/// What Qwen2 adds to the shared decoder: biases on q, k and v.
pub const QWEN2: Variant = Variant { qkv_bias: true };

/// The Qwen2 family.
struct Qwen2Arch;

impl Architecture for Qwen2Arch {
    fn parse_config(&self, config: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError> {
        Ok(Arc::new(DecoderConfig::parse(config, QWEN2)?))
    }

    fn kv_geometry(&self, config: &ModelConfig, block_tokens: u32) -> Result<KvGeometry, ConfigError> {
        tl_decoder::kv_geometry(config, block_tokens)
    }

    fn kv_windows(&self, config: &ModelConfig) -> Result<Option<Vec<Option<usize>>>, ConfigError> {
        tl_decoder::kv_windows(config)
    }

    fn build(&self, ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
        tl_decoder::build(ctx)
    }
}

const FAMILY: Family = Family { prefix: "qwen2", tl_arch: "qwen2", model_type: "qwen2", class: "Qwen2ForCausalLM" };

/// Qwen2 GGUF files: llama.cpp's names to HF's (rows as stored: llama.cpp's converter
/// does not permute Qwen2's Q/K), `qwen2.*` metadata to a config.json.
struct Qwen2Gguf;

impl GgufArch for Qwen2Gguf {
    fn config_json(&self, file: &Gguf) -> Result<Value, WeightError> {
        let mut cfg = config_json(file, &FAMILY)?;
        // llama.cpp's qwen2 graph is full attention in every layer.
        cfg.insert("use_sliding_window".into(), json!(false));
        Ok(Value::Object(cfg))
    }

    fn tensor(&self, _file: &Gguf, gguf_name: &str, _info: &TensorInfo) -> Result<TensorMap, WeightError> {
        Ok(TensorMap { name: hf_name(gguf_name).unwrap_or_else(|| gguf_name.to_string()), rows: None })
    }
}

/// The pre-tokenizer of Qwen2's byte-level BPE (`tokenizer.ggml.pre = "qwen2"`), as
/// Qwen2's own tokenizer.json has it: a regex split (single digits, letters with an
/// optional leading non-letter, punctuation runs, newlines) then GPT-2's byte mapping.
fn qwen2_pre_tokenizer() -> Value {
    let pattern = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    tl_core::gguf_vocab::regex_byte_level(pattern, false)
}

inventory::submit!(ArchRegistration { name: "qwen2", make: || Box::new(Qwen2Arch) });
// A Hugging Face config.json without `tl_arch` selects this crate by its `model_type`.
inventory::submit!(ModelTypeRegistration { model_type: "qwen2", arch: "qwen2" });
inventory::submit!(GgufRegistration { architecture: "qwen2", make: || Box::new(Qwen2Gguf) });
/// Qwen2's tokenizer.json composes its input first (NFC): a decomposed "é" (e + U+0301)
/// tokenizes as the precomposed one.
fn qwen2_normalizer() -> Value {
    json!({"type": "NFC"})
}

inventory::submit!(GgufPreTokenizer {
    name: "qwen2",
    pre_tokenizer: qwen2_pre_tokenizer,
    normalizer: Some(qwen2_normalizer),
    ignore_merges: false,
});
