//! Llama GGUF files (`general.architecture = "llama"`): the shared names and metadata
//! translation of tl-decoder, plus the Q/K row permutation llama.cpp's converter applies
//! to Llama (and only Llama), undone here.

use serde_json::{json, Value};
use tl_core::{Gguf, GgufArch, TensorInfo, TensorMap, WeightError};
use tl_decoder::gguf::{config_json, hf_name, unpermute_order, Family};

/// The Llama translation, registered for `general.architecture = "llama"`.
pub(crate) struct LlamaGguf;

const LLAMA: Family = Family { prefix: "llama", tl_arch: "llama", model_type: "llama", class: "LlamaForCausalLM" };

impl GgufArch for LlamaGguf {
    fn config_json(&self, file: &Gguf) -> Result<Value, WeightError> {
        let mut cfg = config_json(file, &LLAMA)?;
        cfg.insert("attention_bias".into(), json!(false));
        cfg.insert("mlp_bias".into(), json!(false));
        Ok(Value::Object(cfg))
    }

    fn tensor(&self, file: &Gguf, gguf_name: &str, info: &TensorInfo) -> Result<TensorMap, WeightError> {
        let name = hf_name(gguf_name).unwrap_or_else(|| gguf_name.to_string());
        // llama.cpp's converter permutes the rows of Q (over the query heads) and K (over
        // the KV heads) so its RoPE can rotate adjacent pairs; HF rotates halves.
        let heads_key = match gguf_name.rsplit('.').nth(1) {
            Some("attn_q") => "llama.attention.head_count",
            Some("attn_k") => "llama.attention.head_count_kv",
            _ => return Ok(TensorMap { name, rows: None }),
        };
        let heads = match file.uint(heads_key)? {
            Some(h) => h,
            None => file.required("llama.attention.head_count")?,
        } as usize;
        let rows = info.shape.first().copied().unwrap_or(0);
        let order = (info.shape.len() == 2).then(|| unpermute_order(rows, heads)).flatten().ok_or_else(|| {
            WeightError::Tensor {
                path: tl_core::WeightStore::path(file).to_path_buf(),
                name: gguf_name.to_string(),
                reason: format!("shape {:?} does not split into {heads} heads of even size", info.shape),
            }
        })?;
        Ok(TensorMap { name, rows: Some(order) })
    }
}
