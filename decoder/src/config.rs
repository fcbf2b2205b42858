//! The fields of a Llama-style config.json (docs/spec/model-dir.md), parsed and checked
//! once, for every family this crate runs ([`Variant`] says what a family adds).
//!
//! Hugging Face writes two generations of names: transformers 4.x puts `rope_theta` and
//! `rope_scaling` at the top level and the dtype in `torch_dtype`; transformers 5.x nests
//! `rope_parameters: {rope_theta, rope_type}` and writes `dtype`. Both load. RoPE `default`,
//! `llama3` and `yarn` are implemented; anything the forward would compute wrong (another
//! scaled RoPE, biases, another activation) is refused here, naming the field and the
//! value. Sliding windows: [`DecoderConfig::parse`] refuses any window in force; a family
//! that implements windows says which layers are windowed with
//! [`DecoderConfig::parse_with_layers`] (helpers: [`sliding_window`], [`layer_types`]).

use serde_json::Value;
use tl_core::{ConfigError, ModelConfig};

use crate::fields::{dims, field, flag, invalid, positive_float, Dims};
use crate::rope::{Llama3Scaling, Rope, RopeScaling, YarnScaling};

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

/// One layer's attention kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerAttn {
    /// Every earlier key: key j visible to query i iff `0 <= i - j`.
    Global,
    /// A sliding window of `w` keys: key j visible to query i iff `0 <= i - j < w`.
    Windowed(usize),
}

impl LayerAttn {
    /// The window, when there is one.
    pub fn window(self) -> Option<usize> {
        match self {
            LayerAttn::Global => None,
            LayerAttn::Windowed(w) => Some(w),
        }
    }
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
    /// Llama 3's or YaRN's RoPE scaling, or `None` for the default RoPE.
    pub rope_scaling: Option<RopeScaling>,
    /// `(num_hidden_layers,)` each layer's attention: all [`LayerAttn::Global`] unless the
    /// family parsed windows ([`DecoderConfig::parse_with_layers`]).
    pub layer_attn: Vec<LayerAttn>,
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

/// YaRN's fields of a `rope_scaling` / `rope_parameters` object, transformers' defaults
/// applied (`beta_fast` 32, `beta_slow` 1, `truncate` true); a missing `factor` is NaN
/// here, resolved from the context lengths by [`DecoderConfig::parse_with_layers`], which
/// also fills in the theta.
fn yarn(obj: &Value, name: &str) -> Result<YarnScaling, ConfigError> {
    let opt = |f: &str| -> Result<Option<f64>, ConfigError> {
        match field(obj, f) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite() && *x > 0.0)
                .map(Some)
                .ok_or_else(|| invalid(&format!("{name}.{f}"), v, "expected a positive finite number")),
        }
    };
    let original = opt("original_max_position_embeddings")?.ok_or_else(|| {
        invalid(&format!("{name}.original_max_position_embeddings"), &Value::Null, "required by rope_type \"yarn\"")
    })?;
    let factor = opt("factor")?;
    if let Some(f) = factor.filter(|&f| f < 1.0) {
        // transformers' validation: "factor field must be a float or int >= 1".
        return Err(invalid(&format!("{name}.factor"), &Value::from(f), "YaRN's factor must be at least 1"));
    }
    let truncate = match field(obj, "truncate") {
        None => true,
        Some(v) => v.as_bool().ok_or_else(|| invalid(&format!("{name}.truncate"), v, "expected true or false"))?,
    };
    let mscale = |f: &str| match field(obj, f) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite())
            .map(Some)
            .ok_or_else(|| invalid(&format!("{name}.{f}"), v, "expected a finite number")),
    };
    Ok(YarnScaling {
        theta: 0.0,
        factor: factor.unwrap_or(f64::NAN),
        beta_fast: opt("beta_fast")?.unwrap_or(32.0),
        beta_slow: opt("beta_slow")?.unwrap_or(1.0),
        original_max_position_embeddings: original,
        attention_factor: opt("attention_factor")?,
        mscale: mscale("mscale")?,
        mscale_all_dim: mscale("mscale_all_dim")?,
        truncate,
    })
}

/// The RoPE type of a `rope_scaling` / `rope_parameters` object: the plain rotation
/// (`None`), Llama 3's scaling with its four fields, or YaRN; anything else is refused.
fn rope_type(obj: &Value, name: &str) -> Result<Option<RopeScaling>, ConfigError> {
    if !obj.is_object() {
        return Err(invalid(name, obj, "expected an object"));
    }
    let key = if field(obj, "rope_type").is_some() { "rope_type" } else { "type" };
    match field(obj, key) {
        Some(Value::String(t)) if t == "default" => Ok(None),
        Some(Value::String(t)) if t == "llama3" => {
            // transformers requires all four; a missing one would be a guess.
            let get = |f: &str| -> Result<f64, ConfigError> {
                let path = format!("{name}.{f}");
                match field(obj, f) {
                    None => Err(invalid(&path, &Value::Null, "required by rope_type \"llama3\"")),
                    Some(v) => v
                        .as_f64()
                        .filter(|x| x.is_finite() && *x > 0.0)
                        .ok_or_else(|| invalid(&path, v, "expected a positive finite number")),
                }
            };
            let s = Llama3Scaling {
                factor: get("factor")?,
                low_freq_factor: get("low_freq_factor")?,
                high_freq_factor: get("high_freq_factor")?,
                original_max_position_embeddings: get("original_max_position_embeddings")?,
            };
            if s.high_freq_factor <= s.low_freq_factor {
                return Err(invalid(
                    &format!("{name}.high_freq_factor"),
                    &obj["high_freq_factor"],
                    "must exceed low_freq_factor (the smoothing divides by their difference)",
                ));
            }
            Ok(Some(RopeScaling::Llama3(s)))
        }
        Some(Value::String(t)) if t == "yarn" => Ok(Some(RopeScaling::Yarn(yarn(obj, name)?))),
        Some(t) => Err(invalid(
            &format!("{name}.{key}"),
            t,
            "only the default, llama3 and yarn RoPE are implemented; another scaled RoPE would be served wrong",
        )),
        None => Err(invalid(name, obj, "no rope_type: cannot tell whether the RoPE is scaled")),
    }
}

/// `rope_theta` and the RoPE scaling from either generation of names, refusing any
/// scaling but Llama 3's and YaRN's (whose theta and derived factor
/// [`DecoderConfig::parse_with_layers`] fills in).
fn rope(json: &Value) -> Result<(f64, Option<RopeScaling>), ConfigError> {
    let mut scaling = None;
    if let Some(s) = field(json, "rope_scaling") {
        scaling = rope_type(s, "rope_scaling")?;
    }
    let top = positive_float(json, "rope_theta")?;
    let Some(params) = field(json, "rope_parameters") else {
        return Ok((top.unwrap_or(DEFAULT_ROPE_THETA), scaling));
    };
    let nested_scaling = rope_type(params, "rope_parameters")?;
    if scaling.is_some() && nested_scaling != scaling {
        return Err(invalid("rope_parameters", params, "disagrees with rope_scaling"));
    }
    let scaling = scaling.or(nested_scaling);
    let nested = positive_float(params, "rope_theta").map_err(|_| {
        invalid("rope_parameters.rope_theta", &params["rope_theta"], "expected a positive finite number")
    })?;
    match (top, nested) {
        (Some(a), Some(b)) if a != b => Err(invalid(
            "rope_parameters.rope_theta",
            &params["rope_theta"],
            &format!("disagrees with the top-level rope_theta = {a}"),
        )),
        (a, b) => Ok((b.or(a).unwrap_or(DEFAULT_ROPE_THETA), scaling)),
    }
}

/// The `sliding_window` of a config when set (non-null) and in force (`use_sliding_window`
/// is not `false`), for a family that implements windows.
pub fn sliding_window(json: &Value) -> Result<Option<usize>, ConfigError> {
    let Some(w) = field(json, "sliding_window") else { return Ok(None) };
    if flag(json, "use_sliding_window")? == Some(false) {
        return Ok(None);
    }
    match w.as_u64() {
        Some(n) if n > 0 && n <= u32::MAX as u64 => Ok(Some(n as usize)),
        _ => Err(invalid("sliding_window", w, "expected a positive integer")),
    }
}

/// transformers 5's `layer_types` (`"full_attention"` / `"sliding_attention"` per layer),
/// when present, with `window` the size of the sliding ones (an error naming
/// `sliding_window` when a layer slides and there is none).
pub fn layer_types(
    json: &Value,
    n_layers: usize,
    window: Option<usize>,
) -> Result<Option<Vec<LayerAttn>>, ConfigError> {
    let Some(kinds) = field(json, "layer_types") else { return Ok(None) };
    let list = kinds
        .as_array()
        .filter(|k| k.len() == n_layers)
        .ok_or_else(|| invalid("layer_types", kinds, &format!("expected a list of {n_layers} attention kinds")))?;
    list.iter()
        .map(|t| match t.as_str() {
            Some("full_attention") => Ok(LayerAttn::Global),
            Some("sliding_attention") => window.map(LayerAttn::Windowed).ok_or_else(|| {
                invalid("sliding_window", &json["sliding_window"], "layer_types has sliding layers but no window")
            }),
            _ => Err(invalid("layer_types", t, "expected \"full_attention\" or \"sliding_attention\"")),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// The attention kinds of a family without sliding windows: every layer global, and any
/// window in force refused, naming the field.
pub fn global_layers(json: &Value, n_layers: usize) -> Result<Vec<LayerAttn>, ConfigError> {
    // A window is in force unless the config says `use_sliding_window: false`
    // (Qwen2-style configs carry a window size they do not use).
    if let Some(w) = field(json, "sliding_window") {
        if flag(json, "use_sliding_window")? != Some(false) {
            return Err(invalid(
                "sliding_window",
                w,
                "sliding-window attention is not implemented for this architecture",
            ));
        }
    }
    // transformers 5 lists each layer's attention kind; only full attention runs here.
    if let Some(kinds) = field(json, "layer_types") {
        let all_full = kinds.as_array().is_some_and(|k| k.iter().all(|t| t.as_str() == Some("full_attention")));
        if !all_full {
            return Err(invalid(
                "layer_types",
                kinds,
                "only full attention is implemented for this architecture (no sliding window)",
            ));
        }
    }
    Ok(vec![LayerAttn::Global; n_layers])
}

impl DecoderConfig {
    /// Parse and validate the decoder fields of `config`'s JSON for a family `variant`;
    /// every layer global, a window in force refused ([`global_layers`]).
    pub fn parse(config: &ModelConfig, variant: Variant) -> Result<DecoderConfig, ConfigError> {
        DecoderConfig::parse_with_layers(config, variant, global_layers)
    }

    /// As [`DecoderConfig::parse`], with the family's rule for each layer's attention:
    /// `layers(json, num_hidden_layers)` (Mistral: `sliding_window` on every layer;
    /// transformers 5 configs: [`layer_types`]). The family decides; the decoder only
    /// runs what it is given.
    pub fn parse_with_layers(
        config: &ModelConfig,
        variant: Variant,
        layers: impl FnOnce(&Value, usize) -> Result<Vec<LayerAttn>, ConfigError>,
    ) -> Result<DecoderConfig, ConfigError> {
        DecoderConfig::parse_json(config, config.json(), variant, layers)
    }

    /// As [`DecoderConfig::parse_with_layers`], over `json` in place of `config.json()`
    /// (a family whose config lacks a field the shared decoder reads and whose rule says
    /// what it is: Qwen3.5-MoE, every layer sparse, has no dense `intermediate_size`).
    pub fn parse_json(
        config: &ModelConfig,
        json: &Value,
        variant: Variant,
        layers: impl FnOnce(&Value, usize) -> Result<Vec<LayerAttn>, ConfigError>,
    ) -> Result<DecoderConfig, ConfigError> {
        let Dims {
            hidden: hidden_size,
            intermediate: intermediate_size,
            layers: num_hidden_layers,
            heads: num_attention_heads,
            kv_heads: num_key_value_heads,
            head_dim,
        } = dims(json, None)?;
        let rms_norm_eps = positive_float(json, "rms_norm_eps")?.unwrap_or(DEFAULT_RMS_EPS) as f32;
        let (rope_theta, rope_scaling) = rope(json)?;
        let rope_scaling = match rope_scaling {
            Some(RopeScaling::Yarn(y)) => {
                // The correction range reads the f64 theta; transformers: a missing factor is
                // `max_position_embeddings / original_max_position_embeddings`.
                let factor = match (y.factor.is_nan(), config.max_position_embeddings) {
                    (false, _) => y.factor,
                    (true, Some(ctx)) => ctx as f64 / y.original_max_position_embeddings,
                    (true, None) => {
                        return Err(invalid(
                            "rope_parameters.factor",
                            &Value::Null,
                            "YaRN without a factor needs max_position_embeddings to derive it",
                        ))
                    }
                };
                Some(RopeScaling::Yarn(YarnScaling { theta: rope_theta, factor, ..y }))
            }
            s => s,
        };
        let rope_theta = rope_theta as f32;
        let layer_attn = layers(json, num_hidden_layers)?;
        if layer_attn.len() != num_hidden_layers {
            return Err(invalid("layer_types", &json["layer_types"], &format!("expected {num_hidden_layers} layers")));
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
            rope_scaling,
            layer_attn,
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

    /// The RoPE this config asks for: inverse frequencies and the cos/sin scale.
    pub fn rope(&self) -> Rope {
        crate::rope::rope_of(self.rope_theta, self.head_dim, self.rope_scaling.as_ref())
    }

    /// What a step is checked against: layers, KV heads, head size, vocabulary.
    pub fn step_shape(&self) -> crate::StepShape {
        crate::StepShape {
            n_layers: self.num_hidden_layers,
            n_kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            vocab_size: self.vocab_size,
        }
    }

    /// The KV block geometry of this config, blocks of `block_tokens` positions.
    pub fn kv_geometry(&self, block_tokens: u32) -> tl_core::KvGeometry {
        // The config's caps keep these far below u32::MAX.
        tl_core::KvGeometry {
            n_layers: self.num_hidden_layers as u32,
            n_kv_heads: self.num_key_value_heads as u32,
            head_dim: self.head_dim as u32,
            block_tokens,
        }
    }

    /// Each layer's window, when some layer has one (the KV layout's groups).
    pub fn kv_windows(&self) -> Option<Vec<Option<usize>>> {
        let w: Vec<Option<usize>> = self.layer_attn.iter().map(|a| a.window()).collect();
        w.iter().any(Option::is_some).then_some(w)
    }

    /// Width of the key and value projections' outputs, `H_kv * D`.
    pub fn kv_width(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }
}
