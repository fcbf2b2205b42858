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
