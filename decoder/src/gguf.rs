//! What the GGUF translations of Llama-style families share: llama.cpp's tensor names to
//! Hugging Face's, the row order that undoes its converter's Q/K permutation (for the
//! families it permutes), and `<arch>.*` metadata as a config.json.

use serde_json::{json, Map, Value};
use tl_core::{Gguf, WeightError};

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
    if let Some(t) = file.string(&key("rope.scaling.type"))? {
        if t != "none" {
            return Err(file.meta_err(&key("rope.scaling.type"), &format!("{t:?}: scaled RoPE is not supported")));
        }
    }
    if file.has_gguf_tensor("rope_freqs.weight") {
        return Err(file.meta_err("rope_freqs.weight", "per-frequency RoPE factors are not supported"));
    }
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
    cfg.insert("rope_theta".into(), json!(file.float(&key("rope.freq_base"))?.unwrap_or(10000.0)));
    if let Some(ctx) = file.uint(&key("context_length"))? {
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
    Ok(cfg)
}
