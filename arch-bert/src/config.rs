//! BERT's typed config: transformers' `BertConfig` fields, each checked once at parse.

use serde_json::Value;
use tl_core::{ConfigError, ModelConfig};
use tl_decoder::fields::{field, flag, invalid, positive_float, required, size};

/// Caps: no released BERT comes near them; a typo that large is refused at parse.
const MAX_WIDTH: usize = 1 << 16;
const MAX_LAYERS: usize = 1 << 10;
const MAX_POSITIONS: usize = 1 << 16;
const MAX_LABELS: usize = 1 << 16;

/// What follows the encoder, chosen by `architectures`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head {
    /// `BertModel` (or no `architectures`): the last hidden states, pooled by
    /// sentence-transformers' modules when the directory has them.
    None,
    /// `BertForSequenceClassification`: `tanh(pooler(h[CLS]))`, then `classifier` to
    /// `labels` outputs and the cross-encoder's activation.
    Classifier {
        /// `num_labels` (from `id2label` when absent).
        labels: usize,
        /// The activation applied to the logits.
        activation: Activation,
    },
}

/// A cross-encoder's activation on its logits: sentence-transformers' `CrossEncoder`
/// reads it from config.json, else sigmoid for one label and identity for more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// The logits as they are.
    Identity,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `tanh(x)`.
    Tanh,
}

/// A BERT's typed config.
#[derive(Clone, Debug, PartialEq)]
pub struct BertConfig {
    /// Width of the hidden rows, d.
    pub hidden_size: usize,
    /// Layers.
    pub num_hidden_layers: usize,
    /// Attention heads (each `d / heads` wide).
    pub num_attention_heads: usize,
    /// The feed-forward width.
    pub intermediate_size: usize,
    /// Positions (the longest input).
    pub max_position_embeddings: usize,
    /// Token types.
    pub type_vocab_size: usize,
    /// Every LayerNorm's epsilon.
    pub layer_norm_eps: f32,
    /// The head on top.
    pub head: Head,
}

/// A cross-encoder's activation as sentence-transformers reads it from config.json, for
/// a head of `labels` outputs.
pub fn activation(json: &Value, labels: usize) -> Result<Activation, ConfigError> {
    // sentence-transformers >= 4 writes {"sentence_transformers": {"activation_fn": ...}};
    // older cross-encoders `sbert_ce_default_activation_function`.
    let named = json
        .get("sentence_transformers")
        .and_then(|s| s.get("activation_fn"))
        .map(|v| ("sentence_transformers.activation_fn", v))
        .or_else(|| {
            field(json, "sbert_ce_default_activation_function").map(|v| ("sbert_ce_default_activation_function", v))
        });
    let Some((name, v)) = named else {
        return Ok(if labels == 1 { Activation::Sigmoid } else { Activation::Identity });
    };
    match v.as_str().map(|s| s.rsplit('.').next().unwrap_or(s)) {
        Some("Identity") => Ok(Activation::Identity),
        Some("Sigmoid") => Ok(Activation::Sigmoid),
        Some("Tanh") => Ok(Activation::Tanh),
        _ => Err(invalid(name, v, "expected torch.nn's Identity, Sigmoid or Tanh")),
    }
}

/// A `...ForSequenceClassification` head: `num_labels` (else `id2label`'s count, else
/// transformers' 2), `problem_type` checked, and the cross-encoder's activation.
pub fn classifier(json: &Value) -> Result<Head, ConfigError> {
    let labels = match size(json, "num_labels", MAX_LABELS)? {
        Some(n) => n,
        None => match field(json, "id2label").and_then(Value::as_object) {
            Some(m) if !m.is_empty() && m.len() <= MAX_LABELS => m.len(),
            // transformers' default.
            _ => 2,
        },
    };
    if let Some(p) = field(json, "problem_type").and_then(Value::as_str) {
        if p != "single_label_classification" && p != "regression" && p != "multi_label_classification" {
            return Err(invalid("problem_type", &json["problem_type"], "not a transformers problem type"));
        }
    }
    Ok(Head::Classifier { labels, activation: activation(json, labels)? })
}

fn head(json: &Value) -> Result<Head, ConfigError> {
    let arch = field(json, "architectures").and_then(Value::as_array).and_then(|a| a.first());
    match arch.and_then(Value::as_str) {
        None | Some("BertModel") => Ok(Head::None),
        Some("BertForSequenceClassification") => classifier(json),

        Some(_) => Err(invalid(
            "architectures",
            &json["architectures"],
            "tl runs BertModel and BertForSequenceClassification (other heads are not read)",
        )),
    }
}

impl BertConfig {
    /// Parse and check `config`'s BERT fields, each error naming its field.
    pub fn parse(config: &ModelConfig) -> Result<BertConfig, ConfigError> {
        let json = config.json();
        let hidden_size = required(json, "hidden_size", MAX_WIDTH)?;
        let num_attention_heads = required(json, "num_attention_heads", MAX_WIDTH)?;
        if !hidden_size.is_multiple_of(num_attention_heads) {
            return Err(invalid("num_attention_heads", &json["num_attention_heads"], "does not divide hidden_size"));
        }
        let act = field(json, "hidden_act").and_then(Value::as_str).unwrap_or("gelu");
        if act != "gelu" {
            return Err(invalid("hidden_act", &json["hidden_act"], "tl's BERT runs \"gelu\" (erf) only"));
        }
        if let Some(p) = field(json, "position_embedding_type") {
            if p.as_str() != Some("absolute") {
                return Err(invalid("position_embedding_type", p, "tl's BERT runs absolute positions only"));
            }
        }
        for name in ["is_decoder", "add_cross_attention"] {
            if flag(json, name)? == Some(true) {
                return Err(invalid(name, &json[name], "tl's BERT runs the encoder only"));
            }
        }
        // Refused rather than guessed: a smaller epsilon than f32 can hold is not BERT's.
        let eps = positive_float(json, "layer_norm_eps")?.unwrap_or(1e-12) as f32;
        Ok(BertConfig {
            hidden_size,
            num_hidden_layers: required(json, "num_hidden_layers", MAX_LAYERS)?,
            num_attention_heads,
            intermediate_size: required(json, "intermediate_size", MAX_WIDTH)?,
            max_position_embeddings: size(json, "max_position_embeddings", MAX_POSITIONS)?.unwrap_or(512),
            type_vocab_size: size(json, "type_vocab_size", MAX_LABELS)?.unwrap_or(2),
            layer_norm_eps: eps,
            head: head(json)?,
        })
    }

    /// Each head's width.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }
}
