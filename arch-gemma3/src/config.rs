//! Gemma 3's config.json (`model_type: "gemma3_text"`), parsed and checked once, with
//! transformers' `Gemma3TextConfig` defaults for absent fields. What the forward does not
//! implement (scaled RoPE, logit softcapping, biases, another activation, bidirectional
//! attention) is refused here, naming the field and the value.
//!
//! Both generations of transformers' names load: 5.x nests per-layer-type RoPE in
//! `rope_parameters: {full_attention: {rope_theta, ..}, sliding_attention: {..}}`; 4.x
//! writes `rope_theta` (global layers), `rope_local_base_freq` (windowed layers) and
//! `rope_scaling` (global layers only). Layer kinds come from `layer_types`, or else from
//! the pattern: layer `i` is windowed iff `(i + 1) % sliding_window_pattern != 0`.

use serde_json::Value;
use tl_core::{ConfigError, ModelConfig};
use tl_decoder::fields::{dims, field, flag, invalid, positive_float, required, size, Dims};

/// Sizes above these are refused as absurd (a typo would otherwise surface as an
/// allocation failure at load).
const MAX_LAYERS: usize = 1 << 10;
const MAX_WINDOW: usize = 1 << 24;

/// `Gemma3TextConfig`'s defaults (transformers 5.23) for fields a config may leave out.
const DEFAULT_HEAD_DIM: usize = 256;
const DEFAULT_QUERY_PRE_ATTN_SCALAR: f64 = 256.0;
const DEFAULT_SLIDING_WINDOW: usize = 4096;
const DEFAULT_PATTERN: usize = 6;
const DEFAULT_GLOBAL_THETA: f64 = 1_000_000.0;
const DEFAULT_LOCAL_THETA: f64 = 10_000.0;
const DEFAULT_RMS_EPS: f64 = 1e-6;

/// The config key a GGUF translation sets: the file's norm weights already hold Gemma's
/// `1 + w` (llama.cpp's converter adds the 1), so the loader must not add it again.
pub const NORMS_INCLUDE_ONE: &str = "tl_norms_include_one";

/// A layer's attention kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// Every earlier key; RoPE base [`Gemma3Config::rope_theta`].
    Global,
    /// The last [`Gemma3Config::sliding_window`] keys (the query's own included); RoPE
    /// base [`Gemma3Config::rope_local_theta`].
    Windowed,
}

/// A Gemma 3 text model's shape, every default applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Gemma3Config {
    /// Vocabulary size V.
    pub vocab_size: usize,
    /// Hidden size d.
    pub hidden_size: usize,
    /// MLP width I.
    pub intermediate_size: usize,
    /// Query heads H.
    pub num_attention_heads: usize,
    /// KV heads H_kv (divides H).
    pub num_key_value_heads: usize,
    /// Head size D (even: RoPE rotates halves). `H * D` need not be `d`.
    pub head_dim: usize,
    /// RMSNorm epsilon (every norm, the per-head q/k norms included).
    pub rms_norm_eps: f32,
    /// Scores are `q . k * query_pre_attn_scalar^-0.5`.
    pub query_pre_attn_scalar: f64,
    /// Keys a windowed layer's query sees, its own included.
    pub sliding_window: usize,
    /// Each layer's kind, in order (its length is the layer count).
    pub layers: Vec<LayerKind>,
    /// RoPE base of the global layers.
    pub rope_theta: f32,
    /// RoPE base of the windowed layers.
    pub rope_local_theta: f32,
    /// Longest context, when given.
    pub max_position_embeddings: Option<usize>,
    /// The LM head is the embedding matrix (unscaled).
    pub tie_word_embeddings: bool,
    /// The stored norm weights are `1 + w` already (a GGUF); else `w` (Hugging Face).
    pub norms_include_one: bool,
}

/// The base of one RoPE parameter object (`rope_parameters.<kind>` or `rope_scaling`):
/// only the default (unscaled) rotation is implemented.
fn rope_object(obj: &Value, name: &str) -> Result<Option<f64>, ConfigError> {
    if !obj.is_object() {
        return Err(invalid(name, obj, "expected an object"));
    }
    let key = if field(obj, "rope_type").is_some() { "rope_type" } else { "type" };
    match field(obj, key) {
        None => {}
        Some(Value::String(t)) if t == "default" => {}
        Some(t) => {
            return Err(invalid(
                &format!("{name}.{key}"),
                t,
                "only the default (unscaled) RoPE is implemented; a scaled RoPE would be served wrong",
            ))
        }
    }
    positive_float(obj, "rope_theta")
        .map_err(|_| invalid(&format!("{name}.rope_theta"), &obj["rope_theta"], "expected a positive finite number"))
}

/// `(global, local)` RoPE bases from either generation of names.
fn rope_bases(json: &Value) -> Result<(f64, f64), ConfigError> {
    if let Some(s) = field(json, "rope_scaling") {
        // transformers applies it to the global layers; any real scaling is refused.
        rope_object(s, "rope_scaling")?;
    }
    let mut global = positive_float(json, "rope_theta")?;
    let mut local = positive_float(json, "rope_local_base_freq")?;
    if let Some(params) = field(json, "rope_parameters") {
        if !params.is_object() {
            return Err(invalid("rope_parameters", params, "expected an object"));
        }
        for (kind, slot) in [("full_attention", &mut global), ("sliding_attention", &mut local)] {
            if let Some(obj) = field(params, kind) {
                if let Some(theta) = rope_object(obj, &format!("rope_parameters.{kind}"))? {
                    *slot = Some(theta);
                }
            }
        }
        if params.get("full_attention").is_none() && params.get("sliding_attention").is_none() {
            // A flat `{rope_type, rope_theta}` object: one RoPE for both kinds is not
            // what Gemma 3 means, and guessing would serve one kind wrong.
            return Err(invalid("rope_parameters", params, "expected full_attention and sliding_attention entries"));
        }
    }
    Ok((global.unwrap_or(DEFAULT_GLOBAL_THETA), local.unwrap_or(DEFAULT_LOCAL_THETA)))
}

fn layer_kinds(json: &Value, n_layers: usize) -> Result<Vec<LayerKind>, ConfigError> {
    if let Some(kinds) = field(json, "layer_types") {
        let list = kinds.as_array().filter(|l| l.len() == n_layers).ok_or_else(|| {
            invalid("layer_types", kinds, &format!("expected a list of {n_layers} layer types (num_hidden_layers)"))
        })?;
        return list
            .iter()
            .map(|t| match t.as_str() {
                Some("full_attention") => Ok(LayerKind::Global),
                Some("sliding_attention") => Ok(LayerKind::Windowed),
                _ => Err(invalid("layer_types", t, "expected \"full_attention\" or \"sliding_attention\"")),
            })
            .collect();
    }
    let name = if field(json, "sliding_window_pattern").is_some() {
        "sliding_window_pattern"
    } else {
        "_sliding_window_pattern"
    };
    let pattern = size(json, name, MAX_LAYERS)?.unwrap_or(DEFAULT_PATTERN);
    Ok((0..n_layers).map(|i| if (i + 1) % pattern != 0 { LayerKind::Windowed } else { LayerKind::Global }).collect())
}

impl Gemma3Config {
    /// Parse and validate `config`'s JSON.
    pub fn parse(config: &ModelConfig) -> Result<Gemma3Config, ConfigError> {
        let json = config.json();
        let Dims {
            hidden: hidden_size,
            intermediate: intermediate_size,
            layers: n_layers,
            heads: num_attention_heads,
            kv_heads: num_key_value_heads,
            head_dim,
        } = dims(json, Some(DEFAULT_HEAD_DIM))?;
        let rms_norm_eps = positive_float(json, "rms_norm_eps")?.unwrap_or(DEFAULT_RMS_EPS) as f32;
        let query_pre_attn_scalar =
            positive_float(json, "query_pre_attn_scalar")?.unwrap_or(DEFAULT_QUERY_PRE_ATTN_SCALAR);
        let layers = layer_kinds(json, n_layers)?;
        let sliding_window = match json.get("sliding_window") {
            None => DEFAULT_SLIDING_WINDOW,
            Some(Value::Null) if !layers.contains(&LayerKind::Windowed) => DEFAULT_SLIDING_WINDOW,
            Some(_) => required(json, "sliding_window", MAX_WINDOW)?,
        };
        let (global, local) = rope_bases(json)?;
        for (name, why) in [
            ("final_logit_softcapping", "final-logit softcapping is not implemented"),
            ("attn_logit_softcapping", "attention-logit softcapping is not implemented"),
        ] {
            if let Some(v) = field(json, name) {
                return Err(invalid(name, v, why));
            }
        }
        for name in ["attention_bias", "mlp_bias"] {
            if flag(json, name)? == Some(true) {
                return Err(invalid(name, &json[name], "biased projections are not implemented"));
            }
        }
        if flag(json, "use_bidirectional_attention")? == Some(true) {
            let v = &json["use_bidirectional_attention"];
            return Err(invalid("use_bidirectional_attention", v, "only causal attention is implemented"));
        }
        // Gemma's MLP reads `hidden_activation`; an old config's `hidden_act` is the same.
        for name in ["hidden_activation", "hidden_act"] {
            if let Some(act) = field(json, name) {
                if act.as_str() != Some("gelu_pytorch_tanh") {
                    return Err(invalid(name, act, "only gelu_pytorch_tanh (GELU, tanh approximation) is implemented"));
                }
            }
        }
        let tie_word_embeddings = flag(json, "tie_word_embeddings")?.unwrap_or(true);
        let norms_include_one = flag(json, NORMS_INCLUDE_ONE)?.unwrap_or(false);
        Ok(Gemma3Config {
            vocab_size: config.vocab_size,
            hidden_size,
            intermediate_size,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps,
            query_pre_attn_scalar,
            sliding_window,
            layers,
            rope_theta: global as f32,
            rope_local_theta: local as f32,
            max_position_embeddings: config.max_position_embeddings,
            tie_word_embeddings,
            norms_include_one,
        })
    }

    /// Layers.
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// Width of the query projection's output, `H * D`.
    pub fn q_width(&self) -> usize {
        self.num_attention_heads * self.head_dim
    }

    /// Width of the key and value projections' outputs, `H_kv * D`.
    pub fn kv_width(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }

    /// The window of layer kind `kind`: `Some(sliding_window)` for a windowed layer.
    pub fn window(&self, kind: LayerKind) -> Option<usize> {
        (kind == LayerKind::Windowed).then_some(self.sliding_window)
    }
}
