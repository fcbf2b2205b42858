//! Gemma 4 GGUF files (`general.architecture` `gemma4`), as llama.cpp's converter writes
//! them (conversion/gemma.py of the llama-cpp-python 0.3.36 sdist, `Gemma4Model` over
//! `Gemma3Model`; llama.cpp reads them in src/models/gemma4.cpp). The converter renames
//! and keeps every value (Gemma 4's norms are `x * w`: no `1 + w` baked in, and the
//! embeddings are stored unscaled), so an f32 file gives the safetensors checkpoint's
//! logits bit for bit.
//!
//! | GGUF | Hugging Face |
//! | --- | --- |
//! | `token_embd`, `per_layer_token_embd`, `per_layer_model_proj`, `per_layer_proj_norm`, `output_norm`, `output` | `embed_tokens`, `embed_tokens_per_layer`, `per_layer_model_projection`, `per_layer_projection_norm`, `model.norm`, `lm_head` |
//! | `attn_{q,k,v,output}`, `attn_{q,k}_norm` | `self_attn.{q,k,v,o}_proj`, `self_attn.{q,k}_norm` (a shared layer has no k/v, a `k_eq_v` full layer no v) |
//! | `attn_norm`, `post_attention_norm`, `ffn_norm`, `post_ffw_norm` | `input_layernorm`, `post_attention_layernorm`, `pre_feedforward_layernorm`, `post_feedforward_layernorm` |
//! | `ffn_{gate,up,down}` | `mlp.{gate,up,down}_proj` |
//! | `inp_gate`, `proj`, `post_norm`, `layer_output_scale` | `per_layer_input_gate`, `per_layer_projection`, `post_per_layer_input_norm`, `layer_scalar` |
//! | `rope_freqs` `[full head / 2]` | none: 1 for the rotated pairs, 1e30 (no rotation) for the rest: the full layers' `partial_rotary_factor` |
//! | `ffn_gate_inp.weight`, `ffn_gate_inp.scale`, `ffn_down_exps.scale` | `router.proj.weight`, `router.scale`, `router.per_expert_scale` |
//! | `ffn_gate_up_exps` `[E, 2 I, d]`, `ffn_down_exps` `[E, d, I]` | `experts.gate_up_proj`, `experts.down_proj` (stacked as transformers stores them) |
//! | `pre_ffw_norm_2`, `post_ffw_norm_1`, `post_ffw_norm_2` | `pre_feedforward_layernorm_2`, `post_feedforward_layernorm_1`, `post_feedforward_layernorm_2` |
//!
//! The metadata: `attention.sliding_window_pattern` (a boolean per layer: `layer_types`),
//! `attention.key_length` / `key_length_swa` (the full and sliding head sizes),
//! `attention.head_count_kv` and `feed_forward_length` (a number, or one per layer: the
//! full layers' KV heads, the shared layers' double-wide MLP), `attention.shared_kv_layers`,
//! `embedding_length_per_layer_input`, `rope.freq_base` / `freq_base_swa`,
//! `final_logit_softcapping`, `attention.sliding_window`. `attention_k_eq_v` is read off
//! the owning full layers' missing `attn_v`, as llama.cpp does. Refused, naming the key or
//! tensor: a partial sliding RoPE, another `rope_freqs` table, per-layer sizes that two
//! layers of one kind disagree on. The MoE block (`enable_moe_block`) comes from
//! `expert_count`, `expert_used_count` and `expert_feed_forward_length`.

use candle_core::quantized::gguf_file::Value as GValue;
use serde_json::{json, Map, Value};
use tl_core::{Gguf, GgufArch, GgufRegistration, TensorInfo, TensorMap, WeightError, WeightStore};
use tl_decoder::gguf::shared_fields;

const P: &str = "gemma4";

fn key(k: &str) -> String {
    format!("{P}.{k}")
}

/// A non-negative integer of any of GGUF's integer types (gguf-py writes a list of
/// Python ints as INT32).
fn count(v: &GValue) -> Option<u64> {
    match *v {
        GValue::U8(x) => Some(x.into()),
        GValue::U16(x) => Some(x.into()),
        GValue::U32(x) => Some(x.into()),
        GValue::U64(x) => Some(x),
        GValue::I8(x) => u64::try_from(x).ok(),
        GValue::I16(x) => u64::try_from(x).ok(),
        GValue::I32(x) => u64::try_from(x).ok(),
        GValue::I64(x) => u64::try_from(x).ok(),
        _ => None,
    }
}

/// A metadata value given once for every layer or as one number per layer.
fn per_layer(file: &Gguf, k: &str, n: usize) -> Result<Option<Vec<u64>>, WeightError> {
    let key = key(k);
    match file.value(&key) {
        None => Ok(None),
        Some(GValue::Array(items)) => {
            let v: Vec<u64> = items.iter().filter_map(count).collect();
            if v.len() != items.len() || v.len() != n {
                return Err(file.meta_err(&key, &format!("expected a number for each of {n} layers")));
            }
            Ok(Some(v))
        }
        Some(_) => Ok(file.uint(&key)?.map(|x| vec![x; n])),
    }
}

/// The one value `values` holds at every layer of `which`, or an error naming `k`.
fn one_of(file: &Gguf, k: &str, values: &[u64], which: impl Fn(usize) -> bool) -> Result<Option<u64>, WeightError> {
    let mut seen = None;
    for (i, &v) in values.iter().enumerate().filter(|(i, _)| which(*i)) {
        match seen {
            None => seen = Some(v),
            Some(s) if s == v => {}
            Some(s) => {
                return Err(file.meta_err(&key(k), &format!("layer {i} has {v} where a layer of its kind has {s}")))
            }
        }
    }
    Ok(seen)
}

/// The full layers' rotated pairs from `rope_freqs.weight` (1 for each, then 1e30 for the
/// pairs that pass unrotated), as transformers' `partial_rotary_factor` of `head_dim`.
fn partial_factor(file: &Gguf, head_dim: usize) -> Result<Option<f64>, WeightError> {
    let name = "rope_freqs.weight";
    if !file.has_gguf_tensor(name) {
        return Ok(None);
    }
    let f = file.f32(name, &[head_dim / 2])?;
    let rotated = f.iter().take_while(|&&x| x == 1.0).count();
    let bad = |why: &str| WeightError::Tensor { path: file.path_buf(), name: name.into(), reason: why.into() };
    if f[rotated..].iter().any(|&x| x != 1e30) {
        return Err(bad(
            "expected 1 for each rotated pair, then 1e30 (proportional RoPE); other factors are not supported",
        ));
    }
    let factor = 2.0 * rotated as f64 / head_dim as f64;
    // The config parser takes `floor(factor * head_dim / 2)` pairs, as transformers does.
    if ((factor * head_dim as f64) / 2.0).floor() as usize != rotated {
        return Err(bad(&format!("{rotated} rotated pairs of {head_dim} have no exact partial_rotary_factor")));
    }
    Ok(Some(factor))
}

/// The config.json a `gemma4` file's metadata describes: transformers' `Gemma4TextConfig`
/// fields, `tl_arch` and `tl_tokenizer`.
pub fn config_json(file: &Gguf) -> Result<Value, WeightError> {
    let n = file.required(&key("block_count"))? as usize;
    let pattern_key = key("attention.sliding_window_pattern");
    let swa: Vec<bool> = match file.value(&pattern_key) {
        Some(GValue::Array(items)) => items.iter().filter_map(|v| v.to_bool().ok()).collect(),
        Some(_) => return Err(file.meta_err(&pattern_key, "expected an array of booleans")),
        None => return Err(file.meta_err(&pattern_key, "missing")),
    };
    if swa.len() != n {
        return Err(file.meta_err(&pattern_key, &format!("expected a boolean for each of {n} layers")));
    }
    let shared = file.uint(&key("attention.shared_kv_layers"))?.unwrap_or(0) as usize;
    if shared >= n {
        return Err(file.meta_err(&key("attention.shared_kv_layers"), &format!("{shared} of {n} layers")));
    }
    let owns = |i: usize| i < n - shared;
    let heads = file.required(&key("attention.head_count"))?;
    let kv = per_layer(file, "attention.head_count_kv", n)?.unwrap_or_else(|| vec![heads; n]);
    let kv_swa = one_of(file, "attention.head_count_kv", &kv, |i| swa[i])?.unwrap_or(heads);
    let kv_full = one_of(file, "attention.head_count_kv", &kv, |i| !swa[i])?.unwrap_or(kv_swa);
    let ff_key = "feed_forward_length";
    let ff = per_layer(file, ff_key, n)?.ok_or_else(|| file.meta_err(&key(ff_key), "missing"))?;
    let n_ff = one_of(file, ff_key, &ff, owns)?.unwrap_or(ff[0]);
    let double_wide = match one_of(file, ff_key, &ff, |i| !owns(i))? {
        None => false,
        Some(w) if w == n_ff => false,
        Some(w) if w == 2 * n_ff => true,
        Some(w) => return Err(file.meta_err(&key(ff_key), &format!("shared layers of {w}, others of {n_ff}"))),
    };
    let dim = |k: &str, v: &str| -> Result<u64, WeightError> {
        let d = file.required(&key(k))?;
        match file.uint(&key(v))? {
            Some(x) if x != d => Err(file.meta_err(&key(v), &format!("{x} differs from {k} {d}"))),
            _ => Ok(d),
        }
    };
    let head_full = dim("attention.key_length", "attention.value_length")?;
    let head_swa = dim("attention.key_length_swa", "attention.value_length_swa")?;
    if head_full < 2 || head_swa < 2 {
        return Err(file.meta_err(&key("attention.key_length"), "head sizes below 2"));
    }
    let rot_key = key("rope.dimension_count_swa");
    if file.uint(&rot_key)?.is_some_and(|r| r != head_swa) {
        return Err(file.meta_err(&rot_key, "a partial RoPE on the sliding layers is not supported"));
    }
    let theta_full = file.float(&key("rope.freq_base"))?.unwrap_or(1_000_000.0);
    let theta_swa = file.float(&key("rope.freq_base_swa"))?.unwrap_or(10_000.0);
    let full_rope = match partial_factor(file, head_full as usize)? {
        Some(f) => json!({"rope_type": "proportional", "partial_rotary_factor": f, "rope_theta": theta_full}),
        None => json!({"rope_type": "default", "rope_theta": theta_full}),
    };
    // `attention_k_eq_v`: the owning full layers have no v projection (llama.cpp then
    // reads k as v); all of them or none.
    let owning_full: Vec<usize> = (0..n).filter(|&i| !swa[i] && owns(i)).collect();
    let missing = owning_full.iter().filter(|&&i| !file.has_gguf_tensor(&format!("blk.{i}.attn_v.weight"))).count();
    if missing != 0 && missing != owning_full.len() {
        return Err(file.meta_err("blk.N.attn_v.weight", "some owning full layers have a v projection, others not"));
    }
    let k_eq_v = missing != 0;
    let tokens = file.strings("tokenizer.ggml.tokens")?;
    let vocab = match &tokens {
        Some(t) => t.len() as u64,
        None => file.required(&key("vocab_size"))?,
    };
    let eps_key = key("attention.layer_norm_rms_epsilon");
    let eps = file.float(&eps_key)?.ok_or_else(|| file.meta_err(&eps_key, "missing"))?;
    let full: Map<String, Value> = (0..n)
        .filter(|&i| !swa[i])
        .map(|i| (i.to_string(), json!({"head_dim": head_full, "num_key_value_heads": kv_full})))
        .collect();
    let kind = |s: bool| if s { "sliding_attention" } else { "full_attention" };
    let mut cfg = Map::new();
    cfg.insert("architectures".into(), json!(["Gemma4ForCausalLM"]));
    cfg.insert("model_type".into(), json!("gemma4_text"));
    cfg.insert("tl_arch".into(), json!("gemma4"));
    // Without a vocabulary in the file, token ids can only be bytes.
    cfg.insert("tl_tokenizer".into(), json!(if tokens.is_some() { "hf" } else { "byte" }));
    cfg.insert("vocab_size".into(), json!(vocab));
    cfg.insert("vocab_size_per_layer_input".into(), json!(vocab));
    cfg.insert("hidden_size".into(), json!(file.required(&key("embedding_length"))?));
    cfg.insert("intermediate_size".into(), json!(n_ff));
    cfg.insert("use_double_wide_mlp".into(), json!(double_wide));
    cfg.insert("num_hidden_layers".into(), json!(n));
    cfg.insert("layer_types".into(), json!(swa.iter().map(|&s| kind(s)).collect::<Vec<_>>()));
    cfg.insert("num_attention_heads".into(), json!(heads));
    cfg.insert("num_key_value_heads".into(), json!(kv_swa));
    cfg.insert("head_dim".into(), json!(head_swa));
    cfg.insert("per_layer_config".into(), Value::Object(full));
    cfg.insert("attention_k_eq_v".into(), json!(k_eq_v));
    cfg.insert("num_kv_shared_layers".into(), json!(shared));
    let ple = file.uint(&key("embedding_length_per_layer_input"))?.unwrap_or(0);
    cfg.insert("hidden_size_per_layer_input".into(), json!(ple));
    cfg.insert("sliding_window".into(), json!(file.required(&key("attention.sliding_window"))?));
    if let Some(c) = file.float(&key("final_logit_softcapping"))? {
        cfg.insert("final_logit_softcapping".into(), json!(c));
    }
    cfg.insert("rms_norm_eps".into(), json!(eps));
    cfg.insert(
        "rope_parameters".into(),
        json!({"sliding_attention": {"rope_type": "default", "rope_theta": theta_swa}, "full_attention": full_rope}),
    );
    cfg.insert("hidden_activation".into(), json!("gelu_pytorch_tanh"));
    if let Some(e) = file.uint(&key("expert_count"))?.filter(|&e| e > 0) {
        cfg.insert("enable_moe_block".into(), json!(true));
        cfg.insert("num_experts".into(), json!(e));
        cfg.insert("top_k_experts".into(), json!(file.required(&key("expert_used_count"))?));
        cfg.insert("moe_intermediate_size".into(), json!(file.required(&key("expert_feed_forward_length"))?));
    }
    shared_fields(file, &key("context_length"), &mut cfg)?;
    Ok(Value::Object(cfg))
}

/// The name tl reads a GGUF tensor by (transformers'), or `None`.
pub fn hf_name(gguf: &str) -> Option<String> {
    let top = match gguf {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "per_layer_token_embd.weight" => Some("model.embed_tokens_per_layer.weight"),
        "per_layer_model_proj.weight" => Some("model.per_layer_model_projection.weight"),
        "per_layer_proj_norm.weight" => Some("model.per_layer_projection_norm.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(t) = top {
        return Some(t.into());
    }
    let (layer, part) = gguf.strip_prefix("blk.")?.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let hf = match part {
        "attn_norm.weight" => "input_layernorm.weight",
        "attn_q.weight" => "self_attn.q_proj.weight",
        "attn_k.weight" => "self_attn.k_proj.weight",
        "attn_v.weight" => "self_attn.v_proj.weight",
        "attn_output.weight" => "self_attn.o_proj.weight",
        "attn_q_norm.weight" => "self_attn.q_norm.weight",
        "attn_k_norm.weight" => "self_attn.k_norm.weight",
        "post_attention_norm.weight" => "post_attention_layernorm.weight",
        "ffn_norm.weight" => "pre_feedforward_layernorm.weight",
        "post_ffw_norm.weight" => "post_feedforward_layernorm.weight",
        "ffn_gate.weight" => "mlp.gate_proj.weight",
        "ffn_up.weight" => "mlp.up_proj.weight",
        "ffn_down.weight" => "mlp.down_proj.weight",
        "inp_gate.weight" => "per_layer_input_gate.weight",
        "proj.weight" => "per_layer_projection.weight",
        "post_norm.weight" => "post_per_layer_input_norm.weight",
        "layer_output_scale.weight" => "layer_scalar",
        "ffn_gate_inp.weight" => "router.proj.weight",
        "ffn_gate_inp.scale" => "router.scale",
        "ffn_down_exps.scale" => "router.per_expert_scale",
        "ffn_gate_up_exps.weight" => "experts.gate_up_proj",
        "ffn_down_exps.weight" => "experts.down_proj",
        "pre_ffw_norm_2.weight" => "pre_feedforward_layernorm_2.weight",
        "post_ffw_norm_1.weight" => "post_feedforward_layernorm_1.weight",
        "post_ffw_norm_2.weight" => "post_feedforward_layernorm_2.weight",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}"))
}

/// Gemma 4 GGUF files.
struct Gemma4Gguf;

impl GgufArch for Gemma4Gguf {
    fn config_json(&self, file: &Gguf) -> Result<Value, WeightError> {
        config_json(file)
    }

    fn tensor(&self, _file: &Gguf, gguf_name: &str, _info: &TensorInfo) -> Result<TensorMap, WeightError> {
        Ok(TensorMap { name: hf_name(gguf_name).unwrap_or_else(|| gguf_name.to_string()), rows: None })
    }
}

inventory::submit!(GgufRegistration { architecture: "gemma4", make: || Box::new(Gemma4Gguf) });
