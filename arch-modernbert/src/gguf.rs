//! ModernBERT GGUF files (`general.architecture = "modern-bert"`, as llama.cpp's
//! `convert_hf_to_gguf.py` writes `ModernBertModel`): the metadata becomes transformers'
//! `ModernBertConfig` names, the tensors its names (rows as stored: the converter keeps
//! `Wqkv` fused and `Wi` as one `ffn_up` of twice the intermediate width).
//!
//! Read: `modern-bert.block_count`, `.embedding_length`, `.attention.head_count`,
//! `.feed_forward_length`, `.context_length`, `.attention.layer_norm_rms_epsilon` (the
//! converter's name for `norm_eps`; the norms are LayerNorms all the same),
//! `.rope.freq_base` (the global layers' base) and `.rope.freq_base_swa` (the local
//! layers'), `.attention.sliding_window` (`local_attention`: keys within half of it on
//! either side), `.attention.sliding_window_pattern` (`global_attn_every_n_layers`),
//! `.hidden_activation`; biases where the file has them; the pooling as arch-bert reads
//! `modern-bert.pooling_type` (docs/spec/model-dir.md, "GGUF encoders"). Refused, naming
//! the key or tensor: a RoPE scaling type other than none, a classifier head.
//!
//! The vocabulary: the converter writes ModernBERT's byte-level BPE as
//! `tokenizer.ggml.model = "gpt2"` (tokens, token types, merges) with
//! `tokenizer.ggml.pre = "modern-bert"`, the name it gives answerdotai/ModernBERT-base's
//! tokenizer (OLMo's GPT-NeoX vocabulary with BERT's five specials). tl rebuilds that
//! tokenizer.json: core's byte-level BPE body
//! ([`tl_core::tokenizer::gguf_byte_level_bpe_json`]: tokens, merges, control tokens as
//! special added tokens, user-defined ones (the space runs, `|||EMAIL_ADDRESS|||`, ...)
//! as plain normalized ones, a ByteLevel decoder); for `"modern-bert"` the normalizer NFC
//! and the ByteLevel pre-tokenizer (no prefix space, GPT-2's regex, which llama.cpp maps
//! the name to), registered here, and `[MASK]` stripping the spaces on its left (its
//! tokenizer.json's `lstrip`, which llama.cpp sets too); and in place of core's BOS
//! template, BERT's `[CLS] $A [SEP]` / `[CLS] $A [SEP] $B [SEP]` (arch-bert's
//! [`cls_sep_template`]: cls from `tokenizer.ggml.bos_token_id`, sep from
//! `.seperator_token_id`, else `.eos_token_id`), whatever the `add_*_token` flags say
//! (the converter sets them all). A file whose normalizer keys ask for lowercasing or
//! stripping accents is refused, naming the key (ModernBERT's tokenizer does neither).
//! Checked on a tiny tokenizer of that structure against Hugging Face `tokenizers`
//! (arch-modernbert/tests/fixtures/README.md).

use serde_json::{json, Value};
use tl_arch_bert::gguf::{cls_sep_template, config_head, pooling, require, Meta, Names, POOLING_FIELD};
use tl_core::{Gguf, GgufArch, GgufPreTokenizer, GgufRegistration, TensorInfo, TensorMap, WeightError};

/// transformers' names of ModernBERT's GGUF tensors.
const NAMES: Names = Names {
    top: &[
        ("token_embd", "embeddings.tok_embeddings"),
        ("token_embd_norm", "embeddings.norm"),
        ("output_norm", "final_norm"),
    ],
    layers: "layers",
    layer: &[
        ("attn_norm", "attn_norm"),
        ("attn_qkv", "attn.Wqkv"),
        ("attn_output", "attn.Wo"),
        ("ffn_norm", "mlp_norm"),
        ("ffn_up", "mlp.Wi"),
        ("ffn_down", "mlp.Wo"),
    ],
};

/// The ModernBERT translation.
struct ModernBertGguf;

impl GgufArch for ModernBertGguf {
    fn config_json(&self, file: &Gguf) -> Result<Value, WeightError> {
        let m = Meta::encoder(file, "modern-bert")?;
        let scaling = "modern-bert.rope.scaling.type";
        if let Some(s) = file.string(scaling)?.filter(|s| *s != "none") {
            return Err(file.meta_err(scaling, &format!("{s:?}: tl's ModernBERT runs the default RoPE only")));
        }
        let layers = m.required("block_count")?;
        let mut need: Vec<String> =
            ["token_embd.weight", "token_embd_norm.weight", "output_norm.weight"].map(String::from).to_vec();
        for i in 0..layers {
            // Layer 0 has no attn_norm: the embedding norm just ran.
            let norm = (i > 0).then_some("attn_norm");
            for p in norm.into_iter().chain(["attn_qkv", "attn_output", "ffn_norm", "ffn_up", "ffn_down"]) {
                need.push(format!("blk.{i}.{p}.weight"));
            }
        }
        require(file, need)?;
        let has = |name: &str| file.has_gguf_tensor(name);
        let mut cfg = config_head("modernbert", "modernbert", "ModernBertModel");
        cfg.insert("num_hidden_layers".into(), json!(layers));
        cfg.insert("hidden_size".into(), json!(m.required("embedding_length")?));
        cfg.insert("num_attention_heads".into(), json!(m.required("attention.head_count")?));
        cfg.insert("intermediate_size".into(), json!(m.required("feed_forward_length")?));
        cfg.insert("max_position_embeddings".into(), json!(m.required("context_length")?));
        cfg.insert("vocab_size".into(), json!(m.rows("embeddings.tok_embeddings.weight", "token_embd.weight")?));
        cfg.insert("local_attention".into(), json!(m.required("attention.sliding_window")?));
        if let Some(every) = file.uint("modern-bert.attention.sliding_window_pattern")? {
            cfg.insert("global_attn_every_n_layers".into(), json!(every));
        }
        for (key, field) in [("rope.freq_base", "global_rope_theta"), ("rope.freq_base_swa", "local_rope_theta")] {
            if let Some(theta) = m.float(key)? {
                cfg.insert(field.into(), json!(theta));
            }
        }
        let eps = match m.float("attention.layer_norm_rms_epsilon")? {
            Some(e) => Some(e),
            None => m.float("attention.layer_norm_epsilon")?,
        };
        if let Some(eps) = eps {
            cfg.insert("norm_eps".into(), json!(eps));
        }
        if let Some(act) = file.string("modern-bert.hidden_activation")? {
            cfg.insert("hidden_activation".into(), json!(act));
        }
        cfg.insert("norm_bias".into(), json!(has("token_embd_norm.bias")));
        cfg.insert("attention_bias".into(), json!(has("blk.0.attn_qkv.bias")));
        cfg.insert("mlp_bias".into(), json!(has("blk.0.ffn_up.bias")));
        cfg.insert(POOLING_FIELD.into(), pooling(&m)?);
        Ok(Value::Object(cfg))
    }

    fn tensor(&self, _file: &Gguf, gguf_name: &str, _info: &TensorInfo) -> Result<TensorMap, WeightError> {
        Ok(NAMES.map(gguf_name))
    }

    fn tokenizer_json(&self, file: &Gguf) -> Option<Result<Value, String>> {
        Some(tokenizer_json(file))
    }
}

/// The `tokenizer.ggml.pre` of ModernBERT's own vocabulary.
const PRE: &str = "modern-bert";

/// The tokenizer.json of a ModernBERT GGUF file's vocabulary (the module docs); `Err`
/// names the metadata key that is missing or wrong.
fn tokenizer_json(g: &Gguf) -> Result<Value, String> {
    let e = |e: WeightError| e.to_string();
    let model = "tokenizer.ggml.model";
    match g.string(model).map_err(e)? {
        Some("gpt2") => {}
        Some(m) => return Err(format!("metadata {model}: {m:?}: tl rebuilds ModernBERT's byte-level BPE (\"gpt2\")")),
        None => return Err(format!("metadata {model}: missing")),
    }
    for key in ["tokenizer.ggml.normalizer.lowercase", "tokenizer.ggml.normalizer.strip_accents"] {
        if let Some(v) = g.value(key) {
            match v.to_bool() {
                Ok(false) => {}
                Ok(true) => return Err(format!("metadata {key}: true: ModernBERT's tokenizer only applies NFC")),
                Err(_) => return Err(format!("metadata {key}: expected a bool")),
            }
        }
    }
    let tokens_key = "tokenizer.ggml.tokens";
    let tokens = g.strings(tokens_key).map_err(e)?.ok_or(format!("metadata {tokens_key}: missing"))?;
    // The template's ids first, so a missing one is named rather than core's BOS rule.
    let template = cls_sep_template(g, &tokens)?;
    let mut json = tl_core::tokenizer::gguf_byte_level_bpe_json(g)?;
    json["post_processor"] = template;
    if g.string("tokenizer.ggml.pre").map_err(e)? == Some(PRE) {
        let added = json["added_tokens"].as_array_mut().into_iter().flatten();
        if let Some(mask) = added.into_iter().find(|t| t["content"] == "[MASK]" && t["special"] == true) {
            mask["lstrip"] = json!(true);
        }
    }
    Ok(json)
}

inventory::submit!(GgufRegistration { architecture: "modern-bert", make: || Box::new(ModernBertGguf) });

// ModernBERT's tokenizer.json: NFC, then GPT-2's byte-level pre-tokenizer.
inventory::submit!(GgufPreTokenizer {
    name: PRE,
    pre_tokenizer: || json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}),
    normalizer: Some(|| json!({"type": "NFC"})),
    ignore_merges: false,
});
