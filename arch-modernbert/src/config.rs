//! ModernBERT's typed config: transformers' `ModernBertConfig` fields, in the Hub's form
//! (`global_rope_theta`, `local_rope_theta`, `global_attn_every_n_layers`) or transformers
//! 5's (`layer_types`, `rope_parameters`), each checked once at parse.

use serde_json::Value;
use tl_arch_bert::config::classifier;
use tl_arch_bert::Head;
use tl_core::{ConfigError, ModelConfig};
use tl_decoder::fields::{field, flag, invalid, positive_float, required, size};

/// Caps: no released ModernBERT comes near them; a typo that large is refused at parse.
const MAX_WIDTH: usize = 1 << 16;
const MAX_LAYERS: usize = 1 << 10;
const MAX_POSITIONS: usize = 1 << 20;

/// What the classifier pools before its head (`classifier_pooling`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The first row.
    Cls,
    /// The mean of the rows.
    Mean,
}

/// A ModernBERT's typed config.
#[derive(Clone, Debug, PartialEq)]
pub struct ModernBertConfig {
    /// Width of the hidden rows, d.
    pub hidden_size: usize,
    /// Layers.
    pub num_hidden_layers: usize,
    /// Attention heads (each `d / heads` wide, an even width for RoPE).
    pub num_attention_heads: usize,
    /// The GeGLU's width (`Wi` is twice as wide).
    pub intermediate_size: usize,
    /// The longest input.
    pub max_position_embeddings: usize,
    /// Every LayerNorm's epsilon (`norm_eps`).
    pub norm_eps: f32,
    /// LayerNorms with biases (`norm_bias`).
    pub norm_bias: bool,
    /// `Wqkv` and the attention's `Wo` with biases (`attention_bias`).
    pub attention_bias: bool,
    /// `Wi` and the MLP's `Wo` with biases (`mlp_bias`).
    pub mlp_bias: bool,
    /// The classifier head's dense layer with a bias (`classifier_bias`).
    pub classifier_bias: bool,
    /// `(L,)` whether each layer attends globally; the others see keys within `window`.
    pub global: Vec<bool>,
    /// A local layer's query sees keys `|i - j| <= window` (`local_attention / 2`).
    pub window: usize,
    /// RoPE base of the global layers.
    pub global_theta: f32,
    /// RoPE base of the local layers.
    pub local_theta: f32,
    /// The head on top.
    pub head: Head,
    /// What the classifier pools.
    pub pooling: Pooling,
}

/// An activation field that must be `gelu` (erf): the only one ModernBERT checkpoints use
/// and the one arch-bert's kernels compute.
fn gelu(json: &Value, name: &str) -> Result<(), ConfigError> {
    match field(json, name) {
        None => Ok(()),
        Some(v) if v.as_str() == Some("gelu") => Ok(()),
        Some(v) => Err(invalid(name, v, "tl's ModernBERT runs \"gelu\" (erf) only")),
    }
}

/// Which layers attend globally: `layer_types` when given, else every
/// `global_attn_every_n_layers`-th from layer 0 (transformers' rule).
fn layers(json: &Value, n: usize) -> Result<Vec<bool>, ConfigError> {
    if let Some(v) = field(json, "layer_types") {
        let types = v.as_array().filter(|a| a.len() == n).ok_or_else(|| {
            invalid("layer_types", v, &format!("expected a list of {n} layer types (num_hidden_layers)"))
        })?;
        return types
            .iter()
            .map(|t| match t.as_str() {
                Some("full_attention") => Ok(true),
                Some("sliding_attention") => Ok(false),
                _ => Err(invalid("layer_types", v, "expected \"full_attention\" or \"sliding_attention\" per layer")),
            })
            .collect();
    }
    let every = size(json, "global_attn_every_n_layers", MAX_LAYERS)?.unwrap_or(3);
    Ok((0..n).map(|i| i % every == 0).collect())
}

/// One layer type's RoPE base: `rope_parameters[kind].rope_theta` (transformers 5), else
/// the Hub's `key`, else transformers' default; any scaling is refused.
fn theta(json: &Value, kind: &str, key: &str, default: f64) -> Result<f32, ConfigError> {
    if let Some(s) = field(json, "rope_scaling") {
        return Err(invalid("rope_scaling", s, "tl's ModernBERT runs the default RoPE only"));
    }
    if let Some(p) = field(json, "rope_parameters").and_then(|p| field(p, kind)) {
        let name = format!("rope_parameters.{kind}");
        if let Some(t) = field(p, "rope_type").filter(|t| t.as_str() != Some("default")) {
            return Err(invalid(&name, t, "tl's ModernBERT runs rope_type \"default\" only"));
        }
        if let Some(t) = field(p, "rope_theta") {
            return match t.as_f64() {
                Some(x) if x.is_finite() && x > 1.0 && (x as f32).is_finite() => Ok(x as f32),
                _ => Err(invalid(&name, t, "expected a rope_theta above 1")),
            };
        }
    }
    match field(json, key) {
        None => Ok(default as f32),
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() && x > 1.0 && (x as f32).is_finite() => Ok(x as f32),
            _ => Err(invalid(key, v, "expected a RoPE base above 1")),
        },
    }
}

impl ModernBertConfig {
    /// Parse and check `config`'s ModernBERT fields, each error naming its field.
    pub fn parse(config: &ModelConfig) -> Result<ModernBertConfig, ConfigError> {
        let json = config.json();
        let hidden_size = required(json, "hidden_size", MAX_WIDTH)?;
        let num_attention_heads = required(json, "num_attention_heads", MAX_WIDTH)?;
        if !hidden_size.is_multiple_of(num_attention_heads) || !(hidden_size / num_attention_heads).is_multiple_of(2) {
            return Err(invalid(
                "num_attention_heads",
                &json["num_attention_heads"],
                "must divide hidden_size into heads of an even width (RoPE rotates pairs)",
            ));
        }
        gelu(json, "hidden_activation")?;
        let head = match field(json, "architectures").and_then(Value::as_array).and_then(|a| a.first()) {
            // A masked-LM checkpoint (ModernBERT-base itself) is its encoder: the MLM head is
            // not read, as sentence-transformers loads it.
            None => Head::None,
            Some(a) if a == "ModernBertModel" || a == "ModernBertForMaskedLM" => Head::None,
            Some(a) if a == "ModernBertForSequenceClassification" => classifier(json)?,
            Some(_) => return Err(invalid(
                "architectures",
                &json["architectures"],
                "tl runs ModernBertModel, ModernBertForMaskedLM (its encoder) and ModernBertForSequenceClassification",
            )),
        };
        let pooling = match field(json, "classifier_pooling") {
            None => Pooling::Cls,
            Some(v) => match v.as_str() {
                Some("cls") => Pooling::Cls,
                Some("mean") => Pooling::Mean,
                _ => return Err(invalid("classifier_pooling", v, "expected \"cls\" or \"mean\"")),
            },
        };
        if head != Head::None {
            gelu(json, "classifier_activation")?;
        }
        let num_hidden_layers = required(json, "num_hidden_layers", MAX_LAYERS)?;
        // transformers' `sliding_window` is `local_attention // 2`.
        let local = size(json, "local_attention", MAX_POSITIONS)?.unwrap_or(128);
        let eps = positive_float(json, "norm_eps")?.unwrap_or(1e-5) as f32;
        Ok(ModernBertConfig {
            hidden_size,
            num_hidden_layers,
            num_attention_heads,
            intermediate_size: required(json, "intermediate_size", MAX_WIDTH)?,
            max_position_embeddings: size(json, "max_position_embeddings", MAX_POSITIONS)?.unwrap_or(8192),
            norm_eps: eps,
            norm_bias: flag(json, "norm_bias")?.unwrap_or(false),
            attention_bias: flag(json, "attention_bias")?.unwrap_or(false),
            mlp_bias: flag(json, "mlp_bias")?.unwrap_or(false),
            classifier_bias: flag(json, "classifier_bias")?.unwrap_or(false),
            global: layers(json, num_hidden_layers)?,
            window: local / 2,
            global_theta: theta(json, "full_attention", "global_rope_theta", 160_000.0)?,
            local_theta: theta(json, "sliding_attention", "local_rope_theta", 10_000.0)?,
            head,
            pooling,
        })
    }

    /// Each head's width.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }
}
