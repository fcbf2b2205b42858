//! nomic-bert GGUF files (`general.architecture = "nomic-bert"`, as llama.cpp's
//! `convert_hf_to_gguf.py` writes nomic-embed-text): the metadata becomes the Hub's
//! config.json names, the tensors the Hub's names (rows as stored: the converter keeps
//! `Wqkv` fused and the SwiGLU's `fc11` as `ffn_up`, `fc12` as `ffn_gate`).
//!
//! Read: `nomic-bert.block_count`, `.embedding_length`, `.attention.head_count`,
//! `.feed_forward_length`, `.context_length` (the converter's trained length, 2048 for
//! nomic-embed-text), `.rope.freq_base`, `.attention.layer_norm_epsilon`; the vocabulary
//! size and token types are the embedding tables' rows; the whole head rotates (the
//! converter refuses anything else); biases where the file has them. The vocabulary is
//! the WordPiece one arch-bert registers (`tokenizer.ggml.model = "bert"`), the pooling
//! arch-bert's reading of `nomic-bert.pooling_type` (docs/spec/model-dir.md, "GGUF
//! encoders"). The MoE variant (`nomic-bert-moe`) is not registered.

use serde_json::{json, Value};
use tl_arch_bert::gguf::{config_head, pooling, require, Meta, Names, POOLING_FIELD};
use tl_core::{Gguf, GgufArch, GgufRegistration, TensorInfo, TensorMap, WeightError};

/// The Hub names of nomic-bert's GGUF tensors.
const NAMES: Names = Names {
    top: &[
        ("token_embd", "embeddings.word_embeddings"),
        ("token_types", "embeddings.token_type_embeddings"),
        ("token_embd_norm", "emb_ln"),
    ],
    layers: "encoder.layers",
    layer: &[
        ("attn_qkv", "attn.Wqkv"),
        ("attn_output", "attn.out_proj"),
        ("attn_output_norm", "norm1"),
        ("ffn_up", "mlp.fc11"),
        ("ffn_gate", "mlp.fc12"),
        ("ffn_down", "mlp.fc2"),
        ("layer_output_norm", "norm2"),
    ],
};

/// The nomic-bert translation.
struct NomicBertGguf;

impl GgufArch for NomicBertGguf {
    fn config_json(&self, file: &Gguf) -> Result<Value, WeightError> {
        let m = Meta::encoder(file, "nomic-bert")?;
        let layers = m.required("block_count")?;
        let mut need: Vec<String> =
            ["token_embd.weight", "token_embd_norm.weight", "token_embd_norm.bias"].map(String::from).to_vec();
        for i in 0..layers {
            for p in ["attn_qkv", "attn_output", "ffn_up", "ffn_gate", "ffn_down"] {
                need.push(format!("blk.{i}.{p}.weight"));
            }
            for p in ["attn_output_norm", "layer_output_norm"] {
                need.extend(["weight", "bias"].map(|k| format!("blk.{i}.{p}.{k}")));
            }
        }
        require(file, need)?;
        // Biases as the file has them (the converter writes none for nomic-embed-text).
        let has = |p: &str| file.has_gguf_tensor(&format!("blk.0.{p}.bias"));
        let types = if file.has_gguf_tensor("token_types.weight") {
            m.rows("embeddings.token_type_embeddings.weight", "token_types.weight")?
        } else {
            0
        };
        let mut cfg = config_head("nomic_bert", "nomic_bert", "NomicBertModel");
        cfg.insert("activation_function".into(), json!("swiglu"));
        cfg.insert("n_layer".into(), json!(layers));
        cfg.insert("n_embd".into(), json!(m.required("embedding_length")?));
        cfg.insert("n_head".into(), json!(m.required("attention.head_count")?));
        cfg.insert("n_inner".into(), json!(m.required("feed_forward_length")?));
        cfg.insert("n_positions".into(), json!(m.required("context_length")?));
        cfg.insert("vocab_size".into(), json!(m.rows("embeddings.word_embeddings.weight", "token_embd.weight")?));
        cfg.insert("type_vocab_size".into(), json!(types));
        cfg.insert("rotary_emb_fraction".into(), json!(1.0));
        if let Some(base) = m.float("rope.freq_base")? {
            cfg.insert("rotary_emb_base".into(), json!(base));
        }
        if let Some(eps) = m.float("attention.layer_norm_epsilon")? {
            cfg.insert("layer_norm_epsilon".into(), json!(eps));
        }
        cfg.insert("qkv_proj_bias".into(), json!(has("attn_qkv")));
        cfg.insert("mlp_fc1_bias".into(), json!(has("ffn_up")));
        cfg.insert("mlp_fc2_bias".into(), json!(has("ffn_down")));
        cfg.insert(POOLING_FIELD.into(), pooling(&m)?);
        Ok(Value::Object(cfg))
    }

    fn tensor(&self, _file: &Gguf, gguf_name: &str, _info: &TensorInfo) -> Result<TensorMap, WeightError> {
        Ok(NAMES.map(gguf_name))
    }
}

inventory::submit!(GgufRegistration { architecture: "nomic-bert", make: || Box::new(NomicBertGguf) });
