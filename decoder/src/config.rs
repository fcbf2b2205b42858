//! The fields of a Llama-style config.json (docs/spec/model-dir.md), parsed and checked
//! once, for every family this crate runs ([`Variant`] says what a family adds).
//!
//! Hugging Face writes two generations of names: transformers 4.x puts `rope_theta` and
//! `rope_scaling` at the top level and the dtype in `torch_dtype`; transformers 5.x nests
//! `rope_parameters: {rope_theta, rope_type}` and writes `dtype`. Both load. Anything the
//! forward would compute wrong (scaled RoPE, a sliding window, biases, another
//! activation) is refused here, naming the field and the value.

use serde_json::Value;
use tl_core::{ConfigError, ModelConfig};

/// Sizes above these are refused as absurd: no released Llama comes within a factor of
/// four, and a typo that large would otherwise surface as an allocation failure at load.
const MAX_HIDDEN: usize = 1 << 16;
const MAX_INTERMEDIATE: usize = 1 << 18;
const MAX_LAYERS: usize = 1 << 10;
const MAX_HEADS: usize = 1 << 10;
const MAX_HEAD_DIM: usize = 1 << 10;

/// Hugging Face's default for a missing `rms_norm_eps`.
const DEFAULT_RMS_EPS: f64 = 1e-6;
/// Hugging Face's default for a missing `rope_theta`.
const DEFAULT_ROPE_THETA: f64 = 10000.0;

/// What a family adds to the Llama decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    /// The q, k and v projections carry biases (Qwen2), always; without it a config
    /// asking for biased projections (`attention_bias: true`) is refused.
    pub qkv_bias: bool,
}

/// The Llama shape fields, with every default applied.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderConfig {
    /// Vocabulary size V (rows of the embedding, columns of the logits).
    pub vocab_size: usize,
    /// Hidden size d.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Transformer layers.
    pub num_hidden_layers: usize,
    /// Query heads H.
    pub num_attention_heads: usize,
    /// Key/value heads H_kv (divides H).
    pub num_key_value_heads: usize,
    /// Head size D (even: RoPE rotates halves).
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f32,
    /// RoPE base.
    pub rope_theta: f32,
    /// Longest context, when given.
    pub max_position_embeddings: Option<usize>,
    /// The LM head is the embedding matrix.
    pub tie_word_embeddings: bool,
    /// Biases on the q, k and v projections (`<proj>.bias` tensors).
    pub qkv_bias: bool,
    /// The checkpoint's declared dtype (`dtype` or `torch_dtype`), informational only:
    /// the weights' own dtypes decide how they are read.
    pub dtype: Option<String>,
}

fn invalid(field: &str, v: &Value, reason: &str) -> ConfigError {
    ConfigError::invalid(field, v, reason)
}

/// A present, non-null field.
fn field<'a>(json: &'a Value, name: &str) -> Option<&'a Value> {
    json.get(name).filter(|v| !v.is_null())
}

fn size(json: &Value, name: &'static str, max: usize) -> Result<Option<usize>, ConfigError> {
    let Some(v) = field(json, name) else { return Ok(None) };
    match v.as_u64() {
        Some(n) if n > 0 && n as usize <= max => Ok(Some(n as usize)),
        _ => Err(invalid(name, v, &format!("expected an integer in 1..={max}"))),
    }
}

fn required(json: &Value, name: &'static str, max: usize) -> Result<usize, ConfigError> {
    size(json, name, max)?.ok_or(ConfigError::Missing { field: name, hint: "" })
}

fn positive_float(json: &Value, name: &str) -> Result<Option<f64>, ConfigError> {
    let Some(v) = field(json, name) else { return Ok(None) };
    match v.as_f64() {
        Some(x) if x.is_finite() && x > 0.0 && (x as f32).is_finite() && x as f32 > 0.0 => Ok(Some(x)),
        _ => Err(invalid(name, v, "expected a positive finite number")),
    }
}

fn flag(json: &Value, name: &str) -> Result<Option<bool>, ConfigError> {
    let Some(v) = field(json, name) else { return Ok(None) };
    v.as_bool().map(Some).ok_or_else(|| invalid(name, v, "expected true or false"))
}

/// The RoPE type of a `rope_scaling` / `rope_parameters` object: only the plain
/// (unscaled) rotation is implemented, so anything else is refused.
fn check_rope_type(obj: &Value, name: &str) -> Result<(), ConfigError> {
    if !obj.is_object() {
        return Err(invalid(name, obj, "expected an object"));
    }
    let key = if field(obj, "rope_type").is_some() { "rope_type" } else { "type" };
    match field(obj, key) {
        Some(Value::String(t)) if t == "default" => Ok(()),
        Some(t) => Err(invalid(
            &format!("{name}.{key}"),
            t,
            "only the default (unscaled) RoPE is implemented; a scaled RoPE would be served wrong",
        )),
        None => Err(invalid(name, obj, "no rope_type: cannot tell whether the RoPE is scaled")),
    }
}

/// `rope_theta` from either generation of names, refusing any scaled RoPE.
fn rope_theta(json: &Value) -> Result<f64, ConfigError> {
    if let Some(scaling) = field(json, "rope_scaling") {
        check_rope_type(scaling, "rope_scaling")?;
    }
    let top = positive_float(json, "rope_theta")?;
    let Some(params) = field(json, "rope_parameters") else {
        return Ok(top.unwrap_or(DEFAULT_ROPE_THETA));
    };
    check_rope_type(params, "rope_parameters")?;
    let nested = positive_float(params, "rope_theta").map_err(|_| {
        invalid("rope_parameters.rope_theta", &params["rope_theta"], "expected a positive finite number")
    })?;
    match (top, nested) {
        (Some(a), Some(b)) if a != b => Err(invalid(
            "rope_parameters.rope_theta",
            &params["rope_theta"],
            &format!("disagrees with the top-level rope_theta = {a}"),
        )),
        (a, b) => Ok(b.or(a).unwrap_or(DEFAULT_ROPE_THETA)),
    }
}

impl DecoderConfig {
    /// Parse and validate the decoder fields of `config`'s JSON for a family `variant`.
    pub fn parse(config: &ModelConfig, variant: Variant) -> Result<DecoderConfig, ConfigError> {
        let json = config.json();
        let hidden_size = required(json, "hidden_size", MAX_HIDDEN)?;
        let intermediate_size = required(json, "intermediate_size", MAX_INTERMEDIATE)?;
        let num_hidden_layers = required(json, "num_hidden_layers", MAX_LAYERS)?;
        let num_attention_heads = required(json, "num_attention_heads", MAX_HEADS)?;
        let num_key_value_heads = size(json, "num_key_value_heads", MAX_HEADS)?.unwrap_or(num_attention_heads);
        let head_dim = match size(json, "head_dim", MAX_HEAD_DIM)? {
            Some(d) => d,
            None if hidden_size % num_attention_heads == 0 => hidden_size / num_attention_heads,
            None => {
                return Err(invalid(
                    "num_attention_heads",
                    &json["num_attention_heads"],
                    &format!("does not divide hidden_size {hidden_size} (and no head_dim is given)"),
                ))
            }
        };
        if head_dim % 2 != 0 || head_dim > MAX_HEAD_DIM {
            return Err(invalid(
                "head_dim",
                &Value::from(head_dim),
                &format!("expected an even size in 2..={MAX_HEAD_DIM} (RoPE rotates two halves)"),
            ));
        }
        if num_attention_heads % num_key_value_heads != 0 {
            return Err(invalid(
                "num_key_value_heads",
                &json["num_key_value_heads"],
                &format!("does not divide num_attention_heads {num_attention_heads}"),
            ));
        }
        let rms_norm_eps = positive_float(json, "rms_norm_eps")?.unwrap_or(DEFAULT_RMS_EPS) as f32;
        let rope_theta = rope_theta(json)? as f32;
        // A window is in force unless the config says `use_sliding_window: false`
        // (Qwen2-style configs carry a window size they do not use).
        if let Some(w) = field(json, "sliding_window") {
            if flag(json, "use_sliding_window")? != Some(false) {
                return Err(invalid("sliding_window", w, "sliding-window attention is not implemented"));
            }
        }
        // transformers 5 lists each layer's attention kind; only full attention runs here.
        if let Some(kinds) = field(json, "layer_types") {
            let all_full = kinds.as_array().is_some_and(|k| k.iter().all(|t| t.as_str() == Some("full_attention")));
            if !all_full {
                return Err(invalid("layer_types", kinds, "only full attention is implemented (no sliding window)"));
            }
        }
        // A family with q/k/v biases has them whatever `attention_bias` says (Qwen2's
        // o projection never has one); elsewhere a bias would be served wrong.
        let biases: &[&str] = if variant.qkv_bias { &["mlp_bias"] } else { &["attention_bias", "mlp_bias"] };
        for &bias in biases {
            if flag(json, bias)? == Some(true) {
                return Err(invalid(bias, &json[bias], "biased projections are not implemented"));
            }
        }
        if let Some(act) = field(json, "hidden_act") {
            if act.as_str() != Some("silu") {
                return Err(invalid("hidden_act", act, "only silu (SwiGLU) is implemented"));
            }
        }
        let tie_word_embeddings = flag(json, "tie_word_embeddings")?.unwrap_or(false);
        let dtype = match field(json, "dtype").or_else(|| field(json, "torch_dtype")) {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(v) => return Err(invalid("dtype", v, "expected a string")),
        };
        Ok(DecoderConfig {
            vocab_size: config.vocab_size,
            hidden_size,
            intermediate_size,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps,
            rope_theta,
            max_position_embeddings: config.max_position_embeddings,
            tie_word_embeddings,
            qkv_bias: variant.qkv_bias,
            dtype,
        })
    }

    /// Width of the query projection's output, `H * D`.
    pub fn q_width(&self) -> usize {
        self.num_attention_heads * self.head_dim
    }

    /// Width of the key and value projections' outputs, `H_kv * D`.
    pub fn kv_width(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }
}
