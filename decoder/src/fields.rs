//! Readers for config.json fields, shared by every family's typed config: each returns
//! the value or a `ConfigError` naming the field and what it holds (null counts as absent).

use serde_json::Value;
use tl_core::ConfigError;

/// The error for field `field` holding `v`, with why it is refused.
pub fn invalid(field: &str, v: &Value, reason: &str) -> ConfigError {
    ConfigError::invalid(field, v, reason)
}

/// A present, non-null field.
pub fn field<'a>(json: &'a Value, name: &str) -> Option<&'a Value> {
    json.get(name).filter(|v| !v.is_null())
}

/// An optional integer field in `1..=max`.
pub fn size(json: &Value, name: &'static str, max: usize) -> Result<Option<usize>, ConfigError> {
    let Some(v) = field(json, name) else { return Ok(None) };
    match v.as_u64() {
        Some(n) if n > 0 && n as usize <= max => Ok(Some(n as usize)),
        _ => Err(invalid(name, v, &format!("expected an integer in 1..={max}"))),
    }
}

/// A required integer field in `1..=max`.
pub fn required(json: &Value, name: &'static str, max: usize) -> Result<usize, ConfigError> {
    size(json, name, max)?.ok_or(ConfigError::Missing { field: name, hint: "" })
}

/// An optional positive finite number (finite and positive as f32 too).
pub fn positive_float(json: &Value, name: &str) -> Result<Option<f64>, ConfigError> {
    let Some(v) = field(json, name) else { return Ok(None) };
    match v.as_f64() {
        Some(x) if x.is_finite() && x > 0.0 && (x as f32).is_finite() && x as f32 > 0.0 => Ok(Some(x)),
        _ => Err(invalid(name, v, "expected a positive finite number")),
    }
}

/// An optional boolean field.
pub fn flag(json: &Value, name: &str) -> Result<Option<bool>, ConfigError> {
    let Some(v) = field(json, name) else { return Ok(None) };
    v.as_bool().map(Some).ok_or_else(|| invalid(name, v, "expected true or false"))
}

/// Caps on a mixture of experts: no released model comes near them.
const MAX_EXPERTS: usize = 1 << 12;

/// A mixture of experts' counts: `E` under the first of `keys` present (families spell
/// it `num_experts` or `num_local_experts`; else `default_experts`) and `k`
/// (`num_experts_per_tok`, else `default_k`), with `k <= E` (an error naming
/// `num_experts_per_tok` otherwise).
pub fn experts(
    json: &Value,
    keys: &[&'static str],
    default_experts: usize,
    default_k: usize,
) -> Result<(usize, usize), ConfigError> {
    let mut e = None;
    for &key in keys {
        if let Some(n) = size(json, key, MAX_EXPERTS)? {
            e = Some((key, n));
            break;
        }
    }
    let (key, e) = e.unwrap_or((keys.first().copied().unwrap_or("num_experts"), default_experts));
    let k = size(json, "num_experts_per_tok", MAX_EXPERTS)?.unwrap_or(default_k);
    if k > e {
        return Err(invalid(
            "num_experts_per_tok",
            &Value::from(k),
            &format!("more experts per token than the {e} experts ({key})"),
        ));
    }
    Ok((e, k))
}

/// Sizes above these are refused as absurd: no released model comes within a factor of
/// four, and a typo that large would otherwise surface as an allocation failure at load.
const MAX_HIDDEN: usize = 1 << 16;
const MAX_INTERMEDIATE: usize = 1 << 18;
const MAX_LAYERS: usize = 1 << 10;
const MAX_HEADS: usize = 1 << 10;
const MAX_HEAD_DIM: usize = 1 << 10;

/// The sizes every decoder family's config has, each checked and each error naming its
/// field: `hidden_size`, `intermediate_size`, `num_hidden_layers`, `num_attention_heads`,
/// `num_key_value_heads` (default: the heads; must divide them), `head_dim` (even: RoPE
/// rotates two halves).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Hidden size d.
    pub hidden: usize,
    /// MLP (or each expert's) width.
    pub intermediate: usize,
    /// Layers.
    pub layers: usize,
    /// Query heads H.
    pub heads: usize,
    /// KV heads H_kv.
    pub kv_heads: usize,
    /// Head size D.
    pub head_dim: usize,
}

/// [`Dims`] of a config; a missing `head_dim` is `default_head_dim`, or (`None`, Llama's
/// rule) `hidden_size / num_attention_heads`, which must then divide.
pub fn dims(json: &Value, default_head_dim: Option<usize>) -> Result<Dims, ConfigError> {
    let hidden = required(json, "hidden_size", MAX_HIDDEN)?;
    let intermediate = required(json, "intermediate_size", MAX_INTERMEDIATE)?;
    let layers = required(json, "num_hidden_layers", MAX_LAYERS)?;
    let heads = required(json, "num_attention_heads", MAX_HEADS)?;
    let kv_heads = size(json, "num_key_value_heads", MAX_HEADS)?.unwrap_or(heads);
    let head_dim = match (size(json, "head_dim", MAX_HEAD_DIM)?, default_head_dim) {
        (Some(d), _) | (None, Some(d)) => d,
        (None, None) if hidden % heads == 0 => hidden / heads,
        (None, None) => {
            return Err(invalid(
                "num_attention_heads",
                &json["num_attention_heads"],
                &format!("does not divide hidden_size {hidden} (and no head_dim is given)"),
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
    if heads % kv_heads != 0 {
        return Err(invalid(
            "num_key_value_heads",
            &json["num_key_value_heads"],
            &format!("does not divide num_attention_heads {heads}"),
        ));
    }
    Ok(Dims { hidden, intermediate, layers, heads, kv_heads, head_dim })
}
