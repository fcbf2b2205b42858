//! tl-arch-gemma3: Gemma 3 text models, registered as `tl_arch = "gemma3"`, as Hugging Face
//! `model_type = "gemma3_text"` and as GGUF `general.architecture = "gemma3"`.
//!
//! A Gemma 3 is a decoder with its own shape (forward.rs walks through it): the embedding
//! scaled by `sqrt(d)`, RMSNorms with `(1 + w)` before and after both sublayers, per-head
//! RMSNorm on q and k before RoPE, a GELU-tanh gated MLP, and two kinds of layers: windowed
//! ones (the last `sliding_window` keys, RoPE base `rope_local_base_freq`) and global ones
//! (every key, RoPE base `rope_theta`), five windowed to one global in the released models.
//! It is built from tl-decoder's blocks over the same paged f16 KV pool and batch-invariant
//! tl-quant kernels as every family.
//!
//! GGUF files (llama.cpp's converter): the norms are stored as `1 + w` already, Q/K rows
//! are not permuted, and the window pattern and local RoPE base are llama.cpp's defaults
//! (every sixth layer global; base 10000) unless `gemma3.attention.sliding_window_pattern`
//! or `gemma3.rope.freq_base_swa` say otherwise. The SentencePiece vocabulary converts as
//! transformers converts Gemma's, and a file without a chat template gets Gemma's.
//!
//! Nothing names this crate from core: a binary or test that loads a Gemma 3 writes
//! `use tl_arch_gemma3 as _;` so the registrations are linked.
#![deny(missing_docs)]

mod config;
mod forward;
mod weights;

use std::any::Any;
use std::sync::Arc;

use serde_json::{json, Value};
use tl_core::gguf_vocab::{sentencepiece_tokenizer_json_with, MergeRank, SpmOptions};
use tl_core::{
    ArchRegistration, Architecture, BuildCtx, ConfigError, Gguf, GgufArch, GgufRegistration, KvGeometry, Model,
    ModelConfig, ModelError, ModelTypeRegistration, TensorInfo, TensorMap, WeightError,
};
use tl_decoder::gguf::{config_json, Family};

pub use config::{Gemma3Config, LayerKind, NORMS_INCLUDE_ONE};
pub use forward::Gemma3Layer;

/// The Gemma 3 chat template (Google's, as its instruct checkpoints ship it), for GGUF
/// files that carry none (the base models).
pub const CHAT_TEMPLATE: &str = include_str!("gemma3_chat.jinja");

/// The Gemma 3 family.
struct Gemma3Arch;

impl Architecture for Gemma3Arch {
    fn parse_config(&self, config: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError> {
        Ok(Arc::new(Gemma3Config::parse(config)?))
    }

    fn kv_geometry(&self, config: &ModelConfig, block_tokens: u32) -> Result<KvGeometry, ConfigError> {
        let c = config.arch_config::<Gemma3Config>()?;
        // The config's caps keep these far below u32::MAX.
        Ok(KvGeometry {
            n_layers: c.n_layers() as u32,
            n_kv_heads: c.num_key_value_heads as u32,
            head_dim: c.head_dim as u32,
            block_tokens,
        })
    }

    fn kv_windows(&self, config: &ModelConfig) -> Result<Option<Vec<Option<usize>>>, ConfigError> {
        let c = config.arch_config::<Gemma3Config>()?;
        let w: Vec<Option<usize>> = c.layers.iter().map(|&k| c.window(k)).collect();
        Ok(w.iter().any(Option::is_some).then_some(w))
    }

    fn build(&self, ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
        let cfg = ctx.config.arch_config::<Gemma3Config>()?.clone();
        Ok(Box::new(weights::load(&cfg, &ctx)?))
    }
}

const FAMILY: Family =
    Family { prefix: "gemma3", tl_arch: "gemma3", model_type: "gemma3_text", class: "Gemma3ForCausalLM" };

/// llama.cpp's default window period for gemma3 files (`load_swa_pattern(ml, 6)`).
const GGUF_PATTERN: u64 = 6;
/// llama.cpp's default RoPE base of the windowed layers (`rope_freq_base_train_swa`).
const GGUF_LOCAL_THETA: f64 = 10_000.0;
/// The layer count llama.cpp treats as Gemma 3 27B, whose score scale is
/// `(d / H)^-0.5` rather than `D^-0.5` (gemma_pytorch's config; the GGUF carries no
/// `query_pre_attn_scalar`).
const LAYERS_27B: u64 = 62;

/// The HF name of a gemma3 GGUF tensor (`blk.N.ffn_norm.weight` is Gemma's
/// pre-feedforward norm, not Llama's post-attention one), or `None`.
fn hf_name(gguf: &str) -> Option<String> {
    match gguf {
        "token_embd.weight" => return Some("model.embed_tokens.weight".into()),
        "output_norm.weight" => return Some("model.norm.weight".into()),
        "output.weight" => return Some("lm_head.weight".into()),
        _ => {}
    }
    let (layer, part) = gguf.strip_prefix("blk.")?.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let hf = match part {
        "attn_q.weight" => "self_attn.q_proj",
        "attn_k.weight" => "self_attn.k_proj",
        "attn_v.weight" => "self_attn.v_proj",
        "attn_output.weight" => "self_attn.o_proj",
        "attn_q_norm.weight" => "self_attn.q_norm",
        "attn_k_norm.weight" => "self_attn.k_norm",
        "ffn_gate.weight" => "mlp.gate_proj",
        "ffn_up.weight" => "mlp.up_proj",
        "ffn_down.weight" => "mlp.down_proj",
        "attn_norm.weight" => "input_layernorm",
        "post_attention_norm.weight" => "post_attention_layernorm",
        "ffn_norm.weight" => "pre_feedforward_layernorm",
        "post_ffw_norm.weight" => "post_feedforward_layernorm",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}.weight"))
}

/// Each layer's kind as llama.cpp reads a gemma3 file: no (or a zero) window, every layer
/// global; else `sliding_window_pattern` as a per-layer list of booleans (true:
/// windowed), or as a period `n` (layer `i` windowed iff `n == 0 || i % n < n - 1`),
/// default 6.
fn gguf_layer_types(file: &Gguf, n_layers: u64) -> Result<Vec<&'static str>, WeightError> {
    let key = "gemma3.attention.sliding_window_pattern";
    let window = file.uint("gemma3.attention.sliding_window")?.unwrap_or(0);
    let kind = |windowed: bool| if windowed { "sliding_attention" } else { "full_attention" };
    if window == 0 {
        return Ok((0..n_layers).map(|_| kind(false)).collect());
    }
    if let Some(candle_core::quantized::gguf_file::Value::Array(items)) = file.value(key) {
        let flags: Vec<bool> = items.iter().filter_map(|v| v.to_bool().ok()).collect();
        if flags.len() != items.len() || flags.len() as u64 != n_layers {
            return Err(file.meta_err(key, &format!("expected {n_layers} booleans (one per layer)")));
        }
        return Ok(flags.into_iter().map(kind).collect());
    }
    let n = file.uint(key)?.unwrap_or(GGUF_PATTERN);
    Ok((0..n_layers).map(|i| kind(n == 0 || i % n < n - 1)).collect())
}

/// Gemma 3 GGUF files: llama.cpp's names to HF's (rows as stored), `gemma3.*` metadata to
/// a config.json, the vocabulary as transformers converts Gemma's.
struct Gemma3Gguf;

impl GgufArch for Gemma3Gguf {
    fn config_json(&self, file: &Gguf) -> Result<Value, WeightError> {
        let mut cfg = config_json(file, &FAMILY)?;
        cfg.remove("hidden_act");
        cfg.insert("hidden_activation".into(), json!("gelu_pytorch_tanh"));
        let n_layers = file.required("gemma3.block_count")?;
        let head_dim = cfg["head_dim"].as_u64().unwrap_or(0);
        let scalar = if n_layers == LAYERS_27B {
            let (d, h) = (file.required("gemma3.embedding_length")?, file.required("gemma3.attention.head_count")?);
            d / h.max(1)
        } else {
            head_dim
        };
        cfg.insert("query_pre_attn_scalar".into(), json!(scalar));
        let types = gguf_layer_types(file, n_layers)?;
        if let Some(w) = file.uint("gemma3.attention.sliding_window")?.filter(|&w| w > 0) {
            cfg.insert("sliding_window".into(), json!(w));
        }
        cfg.insert("layer_types".into(), json!(types));
        let local = file.float("gemma3.rope.freq_base_swa")?.unwrap_or(GGUF_LOCAL_THETA);
        cfg.insert("rope_local_base_freq".into(), json!(local));
        if let Some(cap) = file.float("gemma3.final_logit_softcapping")? {
            // Refused by the config parser (not implemented), naming the field.
            cfg.insert("final_logit_softcapping".into(), json!(cap));
        }
        cfg.insert(NORMS_INCLUDE_ONE.into(), json!(true));
        // Instruct checkpoints end a turn with `<end_of_turn>` (their generation config
        // stops at [1, 106]); llama.cpp treats it as end-of-generation by its text.
        if let Some(tokens) = file.strings("tokenizer.ggml.tokens")? {
            if let Some(eot) = tokens.iter().position(|&t| t == "<end_of_turn>") {
                let mut eos: Vec<Value> = match cfg.get("eos_token_id") {
                    Some(Value::Array(a)) => a.clone(),
                    Some(v) => vec![v.clone()],
                    None => Vec::new(),
                };
                if !eos.contains(&json!(eot)) {
                    eos.push(json!(eot));
                }
                cfg.insert("eos_token_id".into(), Value::Array(eos));
            }
        }
        Ok(Value::Object(cfg))
    }

    fn tensor(&self, _file: &Gguf, gguf_name: &str, _info: &TensorInfo) -> Result<TensorMap, WeightError> {
        Ok(TensorMap { name: hf_name(gguf_name).unwrap_or_else(|| gguf_name.to_string()), rows: None })
    }

    /// transformers' Gemma conversion (`gguf_tokenizer_mapping.gemma_tokenizer`): merges
    /// ranked by vocabulary order (Gemma's added pieces share the score -1000, so scores
    /// cannot order them), space runs respelled as "▁" runs; no space prefix, byte
    /// fallback and BOS as the metadata says.
    fn tokenizer_json(&self, file: &Gguf) -> Option<Result<Value, String>> {
        match file.string("tokenizer.ggml.model") {
            Ok(Some("llama")) => {}
            _ => return None, // anything else: the generic path names the key and value
        }
        let opts = SpmOptions { merge_rank: MergeRank::Position, respell_space_runs: true };
        Some(sentencepiece_tokenizer_json_with(file, opts))
    }

    /// Gemma's template, for a file whose vocabulary has its turn markers (a file
    /// without a vocabulary reads byte tokens, which the template's markers are not).
    fn default_chat_template(&self, file: &Gguf) -> Option<&'static str> {
        let tokens = file.strings("tokenizer.ggml.tokens").ok()??;
        let has = |t: &str| tokens.contains(&t);
        (has("<start_of_turn>") && has("<end_of_turn>")).then_some(CHAT_TEMPLATE)
    }
}

inventory::submit!(ArchRegistration { name: "gemma3", make: || Box::new(Gemma3Arch) });
// A Hugging Face config.json without `tl_arch` selects this crate by its `model_type`.
inventory::submit!(ModelTypeRegistration { model_type: "gemma3_text", arch: "gemma3" });
inventory::submit!(GgufRegistration { architecture: "gemma3", make: || Box::new(Gemma3Gguf) });
