//! gpt-oss GGUF files (`general.architecture = "gpt-oss"`), as llama.cpp's converter
//! writes them (conversion/gpt_oss.py): the hub's fused experts split back into
//! `ffn_gate_exps` / `ffn_up_exps` `[E, I, d]` and `ffn_down_exps` `[E, d, I]` (the
//! interleaved gate and up columns de-interleaved), their biases `[E, I]` / `[E, d]`, the
//! router as `ffn_gate_inp`, the sinks as `attn_sinks.weight`, the pre-MoE norm as
//! `post_attention_norm`; no Q/K permutation. The experts are usually MXFP4 (the hub's own
//! checkpoints, or `llama-quantize MXFP4_MOE`), kept in their blocks.
//!
//! The metadata becomes a gpt_oss config.json: llama.cpp's gpt-oss graph alternates
//! windowed and full layers (`swa pattern 2`: even layers windowed) and fixes the SwiGLU
//! clamp (7.0) and slope (1.702), the values of every released gpt-oss; YaRN's
//! `truncate: false` is gpt-oss's (its hub config; transformers' default would truncate).

use serde_json::{json, Value};
use tl_core::{Gguf, GgufArch, GgufPreTokenizer, TensorInfo, TensorMap, WeightError};
use tl_decoder::gguf::{config_json, expert_counts, hf_name, Family, MoeGguf};
use tl_decoder::MLP_NAMES;

const FAMILY: Family =
    Family { prefix: "gpt-oss", tl_arch: "gpt_oss", model_type: "gpt_oss", class: "GptOssForCausalLM" };

/// The experts below `model.layers.N.mlp`, per expert, under the hub's per-projection names.
const EXPERTS: MoeGguf = MoeGguf { module: "mlp", names: MLP_NAMES };

/// The name an expert-bias tensor `[E, n]` is read by (tl's own: the hub fuses gate and up).
pub(crate) fn expert_bias(p: &str, proj: &str) -> String {
    format!("{p}.experts.{proj}_bias")
}

/// The hub (or tl) name of one of gpt-oss's GGUF tensors beyond the Llama names.
fn gpt_oss_name(gguf: &str) -> Option<String> {
    let (layer, part) = gguf.strip_prefix("blk.")?.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let p = format!("model.layers.{layer}");
    Some(match part {
        "attn_sinks.weight" => format!("{p}.self_attn.sinks"),
        "post_attention_norm.weight" => format!("{p}.post_attention_layernorm.weight"),
        "ffn_gate_inp.weight" => format!("{p}.mlp.router.weight"),
        "ffn_gate_inp.bias" => format!("{p}.mlp.router.bias"),
        "ffn_gate_exps.bias" => expert_bias(&format!("{p}.mlp"), "gate"),
        "ffn_up_exps.bias" => expert_bias(&format!("{p}.mlp"), "up"),
        "ffn_down_exps.bias" => expert_bias(&format!("{p}.mlp"), "down"),
        _ => return None,
    })
}

/// gpt-oss GGUF files: llama.cpp's names to the hub's, `gpt-oss.*` metadata to a config.json.
pub(crate) struct GptOssGguf;

impl GgufArch for GptOssGguf {
    fn config_json(&self, file: &Gguf) -> Result<Value, WeightError> {
        let mut cfg = config_json(file, &FAMILY)?;
        let (count, used) = expert_counts(file, FAMILY.prefix)?;
        let layers = file.required("gpt-oss.block_count")?;
        let window = file.required("gpt-oss.attention.sliding_window")?;
        let width = file.required("gpt-oss.expert_feed_forward_length")?;
        let kinds: Vec<&str> =
            (0..layers).map(|i| if i % 2 == 0 { "sliding_attention" } else { "full_attention" }).collect();
        cfg.insert("num_local_experts".into(), json!(count));
        cfg.insert("num_experts_per_tok".into(), json!(used));
        cfg.insert("intermediate_size".into(), json!(width));
        cfg.insert("sliding_window".into(), json!(window));
        cfg.insert("layer_types".into(), json!(kinds));
        cfg.insert("attention_bias".into(), json!(true));
        cfg.insert("swiglu_limit".into(), json!(7.0));
        cfg.insert("swiglu_alpha".into(), json!(1.702));
        if let Some(Value::Object(y)) = cfg.get_mut("rope_scaling") {
            y.insert("truncate".into(), json!(false));
        }
        Ok(Value::Object(cfg))
    }

    fn tensor(&self, _file: &Gguf, gguf_name: &str, _info: &TensorInfo) -> Result<TensorMap, WeightError> {
        let name = gpt_oss_name(gguf_name).or_else(|| hf_name(gguf_name));
        Ok(TensorMap { name: name.unwrap_or_else(|| gguf_name.to_string()), rows: None })
    }

    fn stacked(&self, _file: &Gguf, gguf_name: &str, info: &TensorInfo) -> Result<Option<Vec<String>>, WeightError> {
        Ok(EXPERTS.stacked(gguf_name, info))
    }
}

/// gpt-oss's pre-tokenizer (`tokenizer.ggml.pre = "gpt-4o"`): tiktoken's o200k pattern
/// (tiktoken_ext/openai_public.py; gpt-oss's o200k_harmony keeps it) then GPT-2's byte
/// mapping. tiktoken looks a whole piece up before merging, which is tokenizers'
/// `ignore_merges`.
fn o200k_pre_tokenizer() -> Value {
    let pattern = concat!(
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    );
    tl_core::gguf_vocab::regex_byte_level(pattern, false)
}

inventory::submit!(GgufPreTokenizer {
    name: "gpt-4o",
    pre_tokenizer: o200k_pre_tokenizer,
    normalizer: None,
    ignore_merges: true,
});
