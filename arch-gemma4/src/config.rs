//! Gemma 4's config.json (`model_type: "gemma4_text"`), parsed and checked once, with
//! transformers 5.23's `Gemma4TextConfig` defaults for absent fields. What the forward does
//! not implement (the MoE block, bidirectional attention, biases, another activation, a
//! scaled RoPE) is refused here, naming the field and the value.
//!
//! The full-attention layers have their own head size and (with `attention_k_eq_v`) KV
//! head count. transformers 5.23 writes them as `per_layer_config: {"<layer>": {head_dim,
//! num_key_value_heads}}`; Google's checkpoints as `global_head_dim` (default 512) and
//! `num_global_key_value_heads` (used only with `attention_k_eq_v`). Both are read; every
//! layer of one kind must have the same shape (one RoPE table and one pool row per kind).

use serde_json::Value;
use tl_core::{ConfigError, ModelConfig};
use tl_decoder::fields::{dims, field, flag, invalid, positive_float, required, size, Dims};

const MAX_WINDOW: usize = 1 << 24;
const MAX_DIM: usize = 1 << 16;
const MAX_VOCAB: usize = 1 << 24;

/// `Gemma4TextConfig`'s defaults (transformers 5.23).
const DEFAULT_HEAD_DIM: usize = 256;
const DEFAULT_GLOBAL_HEAD_DIM: usize = 512;
const DEFAULT_SLIDING_WINDOW: usize = 512;
const DEFAULT_PATTERN: usize = 6;
const DEFAULT_LOCAL_THETA: f64 = 10_000.0;
const DEFAULT_GLOBAL_THETA: f64 = 1_000_000.0;
const DEFAULT_GLOBAL_PARTIAL: f64 = 0.25;
const DEFAULT_RMS_EPS: f64 = 1e-6;
const DEFAULT_PLE_VOCAB: usize = 262_144;
const DEFAULT_PLE_DIM: usize = 256;

/// A layer's attention kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `sliding_attention`: the last `sliding_window` keys.
    Sliding,
    /// `full_attention`: every earlier key, the kind's own head size.
    Full,
}

/// One kind's attention shape and RoPE.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KindShape {
    /// Head size D of the kind's layers.
    pub head_dim: usize,
    /// KV heads of the kind's layers.
    pub kv_heads: usize,
    /// RoPE base.
    pub theta: f32,
    /// Rotated pairs of a head: `D/2` for `default`, `int(partial * D // 2)` for
    /// `proportional` (the rest pass unrotated; the exponent still divides by the whole D).
    pub rotated: usize,
}

/// A Gemma 4 text model's shape, every default applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Gemma4Config {
    /// Vocabulary size V.
    pub vocab_size: usize,
    /// Hidden size d.
    pub hidden_size: usize,
    /// MLP width I (doubled on the shared-KV layers with `use_double_wide_mlp`).
    pub intermediate_size: usize,
    /// Query heads H.
    pub heads: usize,
    /// Each layer's kind.
    pub layers: Vec<Kind>,
    /// The sliding layers' shape.
    pub sliding: KindShape,
    /// The full layers' shape.
    pub full: KindShape,
    /// Keys a sliding layer's query sees, its own included.
    pub sliding_window: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f32,
    /// `Some(c)`: logits are `c * tanh(logits / c)`.
    pub final_logit_softcapping: Option<f32>,
    /// The LM head is the embedding matrix.
    pub tie_word_embeddings: bool,
    /// Per-layer input size P (0: no per-layer embeddings).
    pub ple_dim: usize,
    /// Rows of the per-layer embedding table.
    pub ple_vocab: usize,
    /// The full layers' V is their K projection (before k_norm and RoPE).
    pub k_eq_v: bool,
    /// The last this many layers read an earlier layer's K/V.
    pub num_kv_shared_layers: usize,
    /// The shared-KV layers' MLP is `2 I` wide.
    pub double_wide_mlp: bool,
    /// The mixture of experts beside every layer's MLP (`enable_moe_block`).
    pub moe: Option<MoeShape>,
}

/// Gemma 4's mixture of experts (`enable_moe_block`): E experts of width I_e, k per token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeShape {
    /// `num_experts`.
    pub experts: usize,
    /// `top_k_experts`.
    pub top_k: usize,
    /// `moe_intermediate_size`.
    pub width: usize,
}

/// The most experts a config may ask for (the router's logits are a row per token).
const MAX_EXPERTS: usize = 1 << 12;

fn moe_shape(json: &Value) -> Result<Option<MoeShape>, ConfigError> {
    if flag(json, "enable_moe_block")? != Some(true) {
        return Ok(None);
    }
    let experts = required(json, "num_experts", MAX_EXPERTS)?;
    let top_k = required(json, "top_k_experts", experts)?;
    let width = required(json, "moe_intermediate_size", MAX_DIM)?;
    Ok(Some(MoeShape { experts, top_k, width }))
}

fn kinds(json: &Value, n: usize) -> Result<Vec<Kind>, ConfigError> {
    let Some(list) = field(json, "layer_types") else {
        // transformers: every sixth layer full, and the last one full whatever the pattern.
        let full = |i: usize| (i + 1).is_multiple_of(DEFAULT_PATTERN) || i + 1 == n;
        return Ok((0..n).map(|i| if full(i) { Kind::Full } else { Kind::Sliding }).collect());
    };
    let items = list.as_array().filter(|l| l.len() == n).ok_or_else(|| {
        invalid("layer_types", list, &format!("expected a list of {n} layer types (num_hidden_layers)"))
    })?;
    let mut out = Vec::with_capacity(n);
    for (i, t) in items.iter().enumerate() {
        out.push(match t.as_str() {
            Some("sliding_attention") => Kind::Sliding,
            Some("full_attention") => Kind::Full,
            _ => {
                return Err(invalid(
                    &format!("layer_types[{i}]"),
                    t,
                    "expected \"sliding_attention\" or \"full_attention\"",
                ))
            }
        });
    }
    // transformers forces the last layer to full attention (with a warning); follow it.
    if let Some(last) = out.last_mut() {
        *last = Kind::Full;
    }
    Ok(out)
}

/// `(theta, rotated pairs)` of `rope_parameters.<kind>` for head size `d`.
fn rope(json: &Value, kind: &str, d: usize, default: (f64, &str, f64)) -> Result<(f32, usize), ConfigError> {
    let name = format!("rope_parameters.{kind}");
    let Some(obj) = field(json, "rope_parameters").and_then(|p| field(p, kind)) else {
        let (theta, ty, partial) = default;
        let rotated = if ty == "default" { d / 2 } else { (partial * d as f64) as usize / 2 };
        return Ok((theta as f32, rotated));
    };
    let theta = positive_float(obj, "rope_theta")
        .map_err(|_| invalid(&format!("{name}.rope_theta"), &obj["rope_theta"], "expected a positive number"))?
        .unwrap_or(default.0);
    if let Some(f) = field(obj, "factor").filter(|f| f.as_f64() != Some(1.0)) {
        return Err(invalid(&format!("{name}.factor"), f, "a scaled RoPE is not implemented"));
    }
    let rotated = match field(obj, "rope_type").and_then(Value::as_str) {
        None | Some("default") => d / 2,
        Some("proportional") => {
            let p = match field(obj, "partial_rotary_factor") {
                None => 1.0,
                Some(v) => v.as_f64().filter(|p| (0.0..=1.0).contains(p)).ok_or_else(|| {
                    invalid(&format!("{name}.partial_rotary_factor"), v, "expected a number in 0..=1")
                })?,
            };
            // transformers: `int(rope_proportion * head_dim // 2)`.
            ((p * d as f64) / 2.0).floor() as usize
        }
        Some(_) => {
            return Err(invalid(
                &format!("{name}.rope_type"),
                &obj["rope_type"],
                "only \"default\" and \"proportional\" are implemented",
            ))
        }
    };
    Ok((theta as f32, rotated))
}

/// Layer `i`'s `(head_dim, kv_heads)` overrides from `per_layer_config`, if any.
fn overrides(json: &Value, i: usize) -> Result<(Option<usize>, Option<usize>), ConfigError> {
    let Some(entry) = field(json, "per_layer_config").and_then(|p| field(p, &i.to_string())) else {
        return Ok((None, None));
    };
    let at = |key: &str| -> Result<Option<usize>, ConfigError> {
        match field(entry, key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if n > 0 && (n as usize) <= MAX_DIM => Ok(Some(n as usize)),
                _ => Err(invalid(&format!("per_layer_config.{i}.{key}"), v, "expected a positive integer")),
            },
        }
    };
    Ok((at("head_dim")?, at("num_key_value_heads")?))
}

impl Gemma4Config {
    /// Parse and validate `config`'s JSON.
    pub fn parse(config: &ModelConfig) -> Result<Gemma4Config, ConfigError> {
        let json = config.json();
        let Dims { hidden, intermediate, layers: n, heads, kv_heads, head_dim } = dims(json, Some(DEFAULT_HEAD_DIM))?;
        let layers = kinds(json, n)?;
        let k_eq_v = flag(json, "attention_k_eq_v")?.unwrap_or(false);
        // The full layers' defaults, as transformers derives per_layer_config without one.
        let global_d = size(json, "global_head_dim", MAX_DIM)?.unwrap_or(DEFAULT_GLOBAL_HEAD_DIM);
        let global_kv = match size(json, "num_global_key_value_heads", MAX_DIM)? {
            Some(h) if k_eq_v => h,
            _ => kv_heads,
        };
        let has_overrides = field(json, "per_layer_config").is_some();
        let mut shape: [Option<(usize, usize)>; 2] = [None, None];
        for (i, &k) in layers.iter().enumerate() {
            let (d, h) = overrides(json, i)?;
            let base = match (k, has_overrides) {
                (Kind::Full, false) => (global_d, global_kv),
                _ => (head_dim, kv_heads),
            };
            let s = (d.unwrap_or(base.0), h.unwrap_or(base.1));
            let slot = &mut shape[k as usize];
            match *slot {
                None => *slot = Some(s),
                Some(prev) if prev == s => {}
                Some(prev) => {
                    return Err(invalid(
                        "per_layer_config",
                        &Value::from(i),
                        &format!("layer {i} is {s:?} (head_dim, kv heads), another of its kind {prev:?}"),
                    ))
                }
            }
        }
        let [sliding, full] = shape.map(|s| s.unwrap_or((head_dim, kv_heads)));
        for (d, h) in [sliding, full] {
            if d % 2 != 0 || heads % h != 0 {
                return Err(invalid(
                    "per_layer_config",
                    &Value::from(d),
                    &format!("head_dim {d} must be even and kv heads {h} divide num_attention_heads {heads}"),
                ));
            }
        }
        let (local_theta, local_rot) =
            rope(json, "sliding_attention", sliding.0, (DEFAULT_LOCAL_THETA, "default", 1.0))?;
        let (global_theta, global_rot) =
            rope(json, "full_attention", full.0, (DEFAULT_GLOBAL_THETA, "proportional", DEFAULT_GLOBAL_PARTIAL))?;
        let sliding_window = size(json, "sliding_window", MAX_WINDOW)?.unwrap_or(DEFAULT_SLIDING_WINDOW);
        let shared = match field(json, "num_kv_shared_layers") {
            None => 0,
            Some(v) => match v.as_u64() {
                Some(s) if (s as usize) < n => s as usize,
                _ => {
                    return Err(invalid(
                        "num_kv_shared_layers",
                        v,
                        &format!("expected 0..{n} (num_hidden_layers): a shared layer reads an earlier one's KV"),
                    ))
                }
            },
        };
        let ple_dim = match field(json, "hidden_size_per_layer_input") {
            None if json.get("hidden_size_per_layer_input").is_some() => 0, // null: no PLE
            None => DEFAULT_PLE_DIM,
            Some(v) if v.as_u64() == Some(0) => 0,
            Some(_) => required(json, "hidden_size_per_layer_input", MAX_DIM)?,
        };
        let ple_vocab = size(json, "vocab_size_per_layer_input", MAX_VOCAB)?.unwrap_or(DEFAULT_PLE_VOCAB);
        if ple_dim > 0 && ple_vocab < config.vocab_size {
            return Err(invalid(
                "vocab_size_per_layer_input",
                &Value::from(ple_vocab),
                &format!(
                    "smaller than vocab_size {}: some tokens would have no per-layer embedding",
                    config.vocab_size
                ),
            ));
        }
        let moe = moe_shape(json)?;
        if let Some(v) = field(json, "use_bidirectional_attention") {
            return Err(invalid("use_bidirectional_attention", v, "only causal attention is implemented"));
        }
        if flag(json, "attention_bias")? == Some(true) {
            return Err(invalid("attention_bias", &json["attention_bias"], "biased projections are not implemented"));
        }
        for name in ["hidden_activation", "hidden_act"] {
            if let Some(act) = field(json, name).filter(|a| a.as_str() != Some("gelu_pytorch_tanh")) {
                return Err(invalid(name, act, "only gelu_pytorch_tanh (GELU, tanh approximation) is implemented"));
            }
        }
        let cfg = Gemma4Config {
            vocab_size: config.vocab_size,
            hidden_size: hidden,
            intermediate_size: intermediate,
            heads,
            layers,
            sliding: KindShape { head_dim: sliding.0, kv_heads: sliding.1, theta: local_theta, rotated: local_rot },
            full: KindShape { head_dim: full.0, kv_heads: full.1, theta: global_theta, rotated: global_rot },
            sliding_window,
            rms_norm_eps: positive_float(json, "rms_norm_eps")?.unwrap_or(DEFAULT_RMS_EPS) as f32,
            final_logit_softcapping: positive_float(json, "final_logit_softcapping")?.map(|c| c as f32),
            tie_word_embeddings: flag(json, "tie_word_embeddings")?.unwrap_or(true),
            ple_dim,
            ple_vocab,
            k_eq_v,
            num_kv_shared_layers: shared,
            double_wide_mlp: flag(json, "use_double_wide_mlp")?.unwrap_or(false),
            moe,
        };
        cfg.check_pool()?;
        cfg.sources()?;
        Ok(cfg)
    }

    /// Layers.
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// The shape of `kind`'s layers.
    pub fn shape(&self, kind: Kind) -> &KindShape {
        match kind {
            Kind::Sliding => &self.sliding,
            Kind::Full => &self.full,
        }
    }

    /// The window of `kind`'s layers.
    pub fn window(&self, kind: Kind) -> Option<usize> {
        (kind == Kind::Sliding).then_some(self.sliding_window)
    }

    /// The pool's row shape `(KV heads, head size)`: the largest of both kinds. A layer of
    /// fewer KV heads repeats each (query head h still reads its own KV head), one of a
    /// smaller head size pads with zeros, which leave every score and value chain
    /// unchanged (tl-decoder's attention kernel pads to 16 lanes the same way).
    pub fn pool_shape(&self) -> (usize, usize) {
        let kv = self.sliding.kv_heads.max(self.full.kv_heads);
        (kv, self.sliding.head_dim.max(self.full.head_dim))
    }

    fn check_pool(&self) -> Result<(), ConfigError> {
        let (kv, _) = self.pool_shape();
        for s in [&self.sliding, &self.full] {
            if !kv.is_multiple_of(s.kv_heads) || !self.heads.is_multiple_of(kv) {
                return Err(invalid(
                    "num_key_value_heads",
                    &Value::from(s.kv_heads),
                    &format!(
                        "the kinds' KV heads ({} and {}) must divide each other and the heads",
                        self.sliding.kv_heads, self.full.kv_heads
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Each layer's K/V source: `None` for a layer that owns its KV, `Some(l)` for a shared
    /// layer (the last `num_kv_shared_layers`): the last owning layer of its kind
    /// (transformers' `kv_sharing_modes`).
    pub fn sources(&self) -> Result<Vec<Option<u32>>, ConfigError> {
        let first = self.n_layers() - self.num_kv_shared_layers;
        let mut out = vec![None; self.n_layers()];
        for (i, slot) in out.iter_mut().enumerate().skip(first) {
            let kind = self.layers[i];
            let src = (0..first).rev().find(|&j| self.layers[j] == kind).ok_or_else(|| {
                invalid(
                    "num_kv_shared_layers",
                    &Value::from(self.num_kv_shared_layers),
                    &format!("shared layer {i} ({kind:?}) has no earlier unshared layer of its kind to read"),
                )
            })?;
            *slot = Some(src as u32);
        }
        Ok(out)
    }
}
