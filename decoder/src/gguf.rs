//! What the GGUF translations of Llama-style families share: llama.cpp's tensor names to
//! Hugging Face's, the row order that undoes its converter's Q/K permutation (for the
//! families it permutes), and `<arch>.*` metadata as a config.json.

use serde_json::{json, Map, Value};
use tl_core::{Gguf, TensorInfo, WeightError, WeightStore};

use crate::rope::{inv_freq_default, Llama3Scaling};

/// The HF name of a GGUF tensor name of the Llama family (`blk.N.attn_q.weight` ->
/// `model.layers.N.self_attn.q_proj.weight`), or `None` when it has no HF counterpart.
pub fn hf_name(gguf: &str) -> Option<String> {
    match gguf {
        "token_embd.weight" => return Some("model.embed_tokens.weight".into()),
        "output_norm.weight" => return Some("model.norm.weight".into()),
        "output.weight" => return Some("lm_head.weight".into()),
        _ => {}
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, part) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, kind) = part.rsplit_once('.')?;
    let hf = match module {
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        _ => return None,
    };
    matches!(kind, "weight" | "bias").then(|| format!("model.layers.{layer}.{hf}.{kind}"))
}

/// The row order that undoes llama.cpp's `permute(w, n_head)` over `rows` rows: HF row
/// `h*D + half*D/2 + i` is stored as row `h*D + 2*i + half` (the converter interleaves
/// the two RoPE halves of each head).
pub fn unpermute_order(rows: usize, n_head: usize) -> Option<Vec<u32>> {
    if n_head == 0 || !rows.is_multiple_of(2 * n_head) || rows > u32::MAX as usize {
        return None;
    }
    let d = rows / n_head;
    let mut order = vec![0u32; rows];
    for h in 0..n_head {
        for half in 0..2 {
            for i in 0..d / 2 {
                order[h * d + half * (d / 2) + i] = (h * d + 2 * i + half) as u32;
            }
        }
    }
    Some(order)
}

/// What distinguishes one Llama-like family's GGUF metadata from another's.
pub struct Family {
    /// The metadata key prefix and `general.architecture` value (`"llama"`).
    pub prefix: &'static str,
    /// `tl_arch` of the config written.
    pub tl_arch: &'static str,
    /// Hugging Face's `model_type` and class name.
    pub model_type: &'static str,
    /// Hugging Face's class name (`"LlamaForCausalLM"`).
    pub class: &'static str,
}

/// A config.json translated from the `<prefix>.*` and `tokenizer.ggml.*` metadata: the
/// Hugging Face fields a Llama-like config has, plus `tl_arch` and `tl_tokenizer` (`"hf"`
/// when the file carries a vocabulary, else `"byte"`). Anything the forward cannot honour
/// (partial or scaled RoPE, per-frequency factors) is refused, naming the key.
pub fn config_json(file: &Gguf, fam: &Family) -> Result<Map<String, Value>, WeightError> {
    let key = |k: &str| format!("{}.{k}", fam.prefix);
    let hidden = file.required(&key("embedding_length"))?;
    let heads = file.required(&key("attention.head_count"))?;
    let kv_heads = file.uint(&key("attention.head_count_kv"))?.unwrap_or(heads);
    if heads == 0 || !hidden.is_multiple_of(heads) {
        return Err(file.meta_err(&key("attention.head_count"), &format!("{heads} does not divide {hidden}")));
    }
    let head_dim = file.uint(&key("attention.key_length"))?.unwrap_or(hidden / heads);
    if let Some(v) = file.uint(&key("attention.value_length"))? {
        if v != head_dim {
            return Err(file.meta_err(&key("attention.value_length"), "differs from the key length"));
        }
    }
    if let Some(rot) = file.uint(&key("rope.dimension_count"))? {
        if rot != head_dim {
            return Err(file.meta_err(
                &key("rope.dimension_count"),
                &format!("{rot} != head size {head_dim}: partial rotary embeddings are not supported"),
            ));
        }
    }
    let mut yarn = None;
    if let Some(t) = file.string(&key("rope.scaling.type"))? {
        match t {
            "none" => {}
            "yarn" => yarn = Some(yarn_json(file, fam)?),
            _ => {
                return Err(file.meta_err(
                    &key("rope.scaling.type"),
                    &format!("{t:?}: only llama3 and yarn scaled RoPE are supported"),
                ))
            }
        }
    }
    let theta = file.float(&key("rope.freq_base"))?.unwrap_or(10000.0);
    let rope_scaling = if file.has_gguf_tensor("rope_freqs.weight") {
        Some(llama3_from_factors(file, fam, theta, head_dim as usize)?)
    } else {
        None
    };
    let tokens = file.strings("tokenizer.ggml.tokens")?;
    let vocab = match &tokens {
        Some(t) => t.len() as u64,
        None => file.required(&key("vocab_size"))?,
    };
    let mut cfg = Map::new();
    cfg.insert("architectures".into(), json!([fam.class]));
    cfg.insert("model_type".into(), json!(fam.model_type));
    cfg.insert("tl_arch".into(), json!(fam.tl_arch));
    // Without a vocabulary in the file, token ids can only be bytes.
    cfg.insert("tl_tokenizer".into(), json!(if tokens.is_some() { "hf" } else { "byte" }));
    cfg.insert("vocab_size".into(), json!(vocab));
    cfg.insert("hidden_size".into(), json!(hidden));
    cfg.insert("intermediate_size".into(), json!(file.required(&key("feed_forward_length"))?));
    cfg.insert("num_hidden_layers".into(), json!(file.required(&key("block_count"))?));
    cfg.insert("num_attention_heads".into(), json!(heads));
    cfg.insert("num_key_value_heads".into(), json!(kv_heads));
    cfg.insert("head_dim".into(), json!(head_dim));
    cfg.insert("hidden_act".into(), json!("silu"));
    if let Some(eps) = file.float(&key("attention.layer_norm_rms_epsilon"))? {
        cfg.insert("rms_norm_eps".into(), json!(eps));
    }
    cfg.insert("rope_theta".into(), json!(theta));
    if let Some(s) = rope_scaling {
        cfg.insert(
            "rope_scaling".into(),
            json!({
                "rope_type": "llama3",
                "factor": s.factor,
                "low_freq_factor": s.low_freq_factor,
                "high_freq_factor": s.high_freq_factor,
                "original_max_position_embeddings": s.original_max_position_embeddings,
            }),
        );
    }
    if let Some(y) = yarn {
        cfg.insert("rope_scaling".into(), y);
    }
    shared_fields(file, &key("context_length"), &mut cfg)?;
    Ok(cfg)
}

/// The config fields every family's GGUF file gives the same way: the context length
/// (`ctx_key`), tied embeddings (no `output.weight`), and the BOS, EOS and pad ids
/// (llama.cpp stops at every end-of-generation id: EOS and, when given, EOT).
pub fn shared_fields(file: &Gguf, ctx_key: &str, cfg: &mut Map<String, Value>) -> Result<(), WeightError> {
    if let Some(ctx) = file.uint(ctx_key)? {
        cfg.insert("max_position_embeddings".into(), json!(ctx));
    }
    cfg.insert("tie_word_embeddings".into(), json!(!file.has_gguf_tensor("output.weight")));
    if let Some(bos) = file.uint("tokenizer.ggml.bos_token_id")? {
        cfg.insert("bos_token_id".into(), json!(bos));
    }
    // llama.cpp stops at every end-of-generation id: EOS and, when given, EOT.
    let mut eos: Vec<u64> = Vec::new();
    for k in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"] {
        if let Some(id) = file.uint(k)? {
            if !eos.contains(&id) {
                eos.push(id);
            }
        }
    }
    match eos.as_slice() {
        [] => {}
        [one] => drop(cfg.insert("eos_token_id".into(), json!(one))),
        many => drop(cfg.insert("eos_token_id".into(), json!(many))),
    }
    if let Some(pad) = file.uint("tokenizer.ggml.padding_token_id")? {
        cfg.insert("pad_token_id".into(), json!(pad));
    }
    Ok(())
}

/// Llama 3's RoPE scaling from a GGUF file's `rope_freqs.weight`: llama.cpp's converter
/// stores per-frequency divisors (1 above the high-frequency wavelength, `factor` below the
/// low one, the blend between) instead of the config's four fields, and divides the base
/// frequencies by them, which is not transformers' arithmetic. So the fields are
/// recovered (`factor`: `<prefix>.rope.scaling.factor` or the largest divisor;
/// `low_freq_factor` 1 and `high_freq_factor` 4 as the converter defaults them;
/// `original_max_position_embeddings`: `<prefix>.rope.scaling.original_context_length` or
/// 8192), the converter's divisors are recomputed from them, and the file's must agree
/// (within 2 ulp); then the forward computes transformers' inverse frequencies from the
/// fields, the same bits as the safetensors checkpoint. Any other table is refused.
fn llama3_from_factors(file: &Gguf, fam: &Family, theta: f64, head_dim: usize) -> Result<Llama3Scaling, WeightError> {
    let name = "rope_freqs.weight";
    let stored = file.f32(name, &[head_dim / 2])?;
    let key = |k: &str| format!("{}.{k}", fam.prefix);
    let largest = stored.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let s = Llama3Scaling {
        factor: file.float(&key("rope.scaling.factor"))?.unwrap_or(largest as f64),
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: file.uint(&key("rope.scaling.original_context_length"))?.unwrap_or(8192)
            as f64,
    };
    let want = converter_factors(theta as f32, head_dim, &s);
    let ulps = |a: f32, b: f32| (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs();
    let agree = s.factor.is_finite()
        && s.factor > 0.0
        && want.len() == stored.len()
        && want.iter().zip(&stored).all(|(&a, &b)| a.is_finite() && b.is_finite() && ulps(a, b) <= 2);
    if !agree {
        return Err(file.meta_err(
            name,
            &format!(
                "per-frequency RoPE factors that are not Llama 3's (factor {}, low_freq_factor 1, high_freq_factor 4, \
                 original context {}): only llama3 scaling is supported",
                s.factor, s.original_max_position_embeddings
            ),
        ));
    }
    Ok(s)
}

/// The divisors llama.cpp's converter writes to `rope_freqs.weight` for Llama 3 scaling
/// (conversion/llama.py, `generate_extra_tensors`), in its torch f32 arithmetic.
fn converter_factors(theta: f32, head_dim: usize, s: &Llama3Scaling) -> Vec<f32> {
    let old = s.original_max_position_embeddings;
    let (low_w, high_w) = ((old / s.low_freq_factor) as f32, (old / s.high_freq_factor) as f32);
    let factor = s.factor as f32;
    let (low, span) = (s.low_freq_factor as f32, (s.high_freq_factor - s.low_freq_factor) as f32);
    let two_pi = (2.0 * std::f64::consts::PI) as f32;
    inv_freq_default(theta, head_dim)
        .into_iter()
        .map(|f| {
            let wavelen = (1.0 / f) * two_pi;
            if wavelen < high_w {
                1.0
            } else if wavelen > low_w {
                factor
            } else {
                let smooth = ((1.0 / wavelen) * old as f32 - low) / span;
                1.0 / ((1.0 - smooth) / factor + smooth)
            }
        })
        .collect()
}

/// YaRN's `rope_scaling` from `<prefix>.rope.scaling.*` (what llama.cpp's converter writes:
/// `factor`, `original_context_length`, and `yarn_beta_fast` / `yarn_beta_slow` when the
/// config had them); the keys it adds for other models' variants (`yarn_log_multiplier`,
/// `attn_factor`) change the arithmetic and are refused.
fn yarn_json(file: &Gguf, fam: &Family) -> Result<Value, WeightError> {
    let key = |k: &str| format!("{}.rope.scaling.{k}", fam.prefix);
    for k in ["yarn_log_multiplier", "attn_factor", "yarn_ext_factor", "yarn_attn_factor"] {
        if let Some(v) = file.float(&key(k))? {
            if v != 0.0 && !(k.ends_with("attn_factor") && v == 1.0) {
                return Err(
                    file.meta_err(&key(k), &format!("{v}: YaRN variants beyond transformers' are not supported"))
                );
            }
        }
    }
    let factor = file.float(&key("factor"))?.ok_or_else(|| file.meta_err(&key("factor"), "required by yarn"))?;
    let original = file.uint(&key("original_context_length"))?;
    let original = original.ok_or_else(|| file.meta_err(&key("original_context_length"), "required by yarn"))?;
    let mut y = json!({"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": original});
    for (k, hf) in [("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")] {
        if let Some(v) = file.float(&key(k))? {
            y[hf] = json!(v);
        }
    }
    Ok(y)
}

/// A mixture of experts' GGUF layout (llama.cpp's converter): the router
/// `blk.N.ffn_gate_inp.weight` `[E, d]` and the experts stacked, `blk.N.ffn_gate_exps`,
/// `ffn_up_exps` `[E, I, d]` and `ffn_down_exps` `[E, d, I]`, served as Hugging Face's
/// per-expert tensors below `model.layers.N.<module>` (`mlp`; Mixtral's
/// `block_sparse_moe`) without a copy.
pub struct MoeGguf {
    /// The HF module of the sparse block.
    pub module: &'static str,
    /// The HF names of an expert's gate, up and down projections.
    pub names: crate::MlpNames,
}

impl MoeGguf {
    /// The HF name of a router tensor, or `None`.
    pub fn router(&self, gguf: &str) -> Option<String> {
        let layer: usize = gguf.strip_prefix("blk.")?.strip_suffix(".ffn_gate_inp.weight")?.parse().ok()?;
        Some(format!("model.layers.{layer}.{}.gate.weight", self.module))
    }

    /// The per-expert HF names of a stacked expert tensor `[E, ...]`, or `None` for any
    /// other tensor.
    pub fn stacked(&self, gguf: &str, info: &TensorInfo) -> Option<Vec<String>> {
        let (layer, part) = gguf.strip_prefix("blk.")?.split_once('.')?;
        let layer: usize = layer.parse().ok()?;
        let proj = match part {
            "ffn_gate_exps.weight" => self.names.gate,
            "ffn_up_exps.weight" => self.names.up,
            "ffn_down_exps.weight" => self.names.down,
            _ => return None,
        };
        let experts = info.shape.first().copied().filter(|_| info.shape.len() == 3)?;
        Some((0..experts).map(|e| format!("model.layers.{layer}.{}.experts.{e}.{proj}.weight", self.module)).collect())
    }
}

/// The experts' config fields from `<prefix>.expert_count` and `expert_used_count`:
/// `(count, used)`, each an error naming its key when missing or zero.
pub fn expert_counts(file: &Gguf, prefix: &str) -> Result<(u64, u64), WeightError> {
    let count = file.required(&format!("{prefix}.expert_count"))?;
    let used = file.required(&format!("{prefix}.expert_used_count"))?;
    if count == 0 || used == 0 || used > count {
        return Err(file.meta_err(&format!("{prefix}.expert_used_count"), &format!("{used} of {count} experts")));
    }
    Ok((count, used))
}
