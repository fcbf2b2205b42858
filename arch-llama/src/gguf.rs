//! Llama GGUF files (`general.architecture = "llama"`): the shared names and metadata
//! translation of tl-decoder, plus the Q/K row permutation llama.cpp's converter applies
//! to Llama (and only Llama), undone here. A file with experts (`llama.expert_count`) is
//! a Mixtral (llama.cpp writes Mixtral as `llama`): its config says `tl_arch: "mixtral"`
//! (tl-arch-mixtral must be linked to run it) with no window, as llama.cpp runs it.

use serde_json::{json, Value};
use tl_core::{Gguf, GgufArch, TensorInfo, TensorMap, WeightError};
use tl_decoder::gguf::{config_json, expert_counts, hf_name, unpermute_order, Family, MoeGguf};
use tl_decoder::MlpNames;

/// The Llama translation, registered for `general.architecture = "llama"`.
pub(crate) struct LlamaGguf;

const LLAMA: Family = Family { prefix: "llama", tl_arch: "llama", model_type: "llama", class: "LlamaForCausalLM" };

/// llama.cpp writes Mixtral as `llama` with experts (`llama.expert_count`): the router
/// `ffn_gate_inp` and the stacked `ffn_*_exps`, served as Mixtral's hub names.
const MIXTRAL: Family =
    Family { prefix: "llama", tl_arch: "mixtral", model_type: "mixtral", class: "MixtralForCausalLM" };
const MIXTRAL_EXPERTS: MoeGguf =
    MoeGguf { module: "block_sparse_moe", names: MlpNames { gate: "w1", up: "w3", down: "w2" } };

impl GgufArch for LlamaGguf {
    fn config_json(&self, file: &Gguf) -> Result<Value, WeightError> {
        let experts = file.uint("llama.expert_count")?.filter(|&e| e > 0).is_some();
        let mut cfg = config_json(file, if experts { &MIXTRAL } else { &LLAMA })?;
        cfg.insert("attention_bias".into(), json!(false));
        cfg.insert("mlp_bias".into(), json!(false));
        if experts {
            // llama.cpp's llama graph: every key visible, the chosen weights renormalised.
            let (count, used) = expert_counts(file, "llama")?;
            cfg.insert("num_local_experts".into(), json!(count));
            cfg.insert("num_experts_per_tok".into(), json!(used));
            cfg.insert("sliding_window".into(), Value::Null);
        }
        Ok(Value::Object(cfg))
    }

    fn stacked(&self, _file: &Gguf, gguf_name: &str, info: &TensorInfo) -> Result<Option<Vec<String>>, WeightError> {
        Ok(MIXTRAL_EXPERTS.stacked(gguf_name, info))
    }

    fn tensor(&self, file: &Gguf, gguf_name: &str, info: &TensorInfo) -> Result<TensorMap, WeightError> {
        let name =
            MIXTRAL_EXPERTS.router(gguf_name).or_else(|| hf_name(gguf_name)).unwrap_or_else(|| gguf_name.to_string());
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
