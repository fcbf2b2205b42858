//! nomic-bert's typed config, from the Hub's config.json (nomic's `NomicBertConfig`, GPT-2
//! style: `n_embd`, `n_head`, `n_layer`, `n_inner`, `n_positions`, `layer_norm_epsilon`,
//! `rotary_emb_*`, the bias flags) or transformers 5's `NomicBertConfig` (`hidden_size`,
//! ..., `rope_parameters`; no biases, full rotary), each field checked once at parse.

use serde_json::Value;
use tl_core::{ConfigError, ModelConfig};
use tl_decoder::fields::{field, flag, invalid, positive_float, size};

/// Caps: no released nomic-bert comes near them; a typo that large is refused at parse.
const MAX_WIDTH: usize = 1 << 16;
const MAX_LAYERS: usize = 1 << 10;
const MAX_POSITIONS: usize = 1 << 20;
const MAX_TYPES: usize = 1 << 16;

/// A nomic-bert's typed config.
#[derive(Clone, Debug, PartialEq)]
pub struct NomicBertConfig {
    /// Width of the hidden rows, d (`n_embd`).
    pub hidden_size: usize,
    /// Layers (`n_layer`).
    pub num_hidden_layers: usize,
    /// Attention heads (`n_head`).
    pub num_attention_heads: usize,
    /// The SwiGLU's width (`n_inner`): fc11 and fc12 are `[I, d]`.
    pub intermediate_size: usize,
    /// The longest input (`n_positions`).
    pub max_positions: usize,
    /// Token types (0: none).
    pub type_vocab_size: usize,
    /// Every LayerNorm's epsilon (`layer_norm_epsilon`).
    pub layer_norm_eps: f32,
    /// How many leading dims of each head RoPE rotates (`rotary_emb_fraction` of the head).
    pub rotary_dim: usize,
    /// RoPE's base (`rotary_emb_base`).
    pub rotary_base: f32,
    /// `Wqkv` and `out_proj` with biases (`qkv_proj_bias`).
    pub qkv_bias: bool,
    /// fc11 and fc12 with biases (`mlp_fc1_bias`).
    pub fc1_bias: bool,
    /// fc2 with a bias (`mlp_fc2_bias`).
    pub fc2_bias: bool,
}

/// The first of `names` present (the Hub's spelling, then transformers'), as a size.
fn either(json: &Value, names: [&'static str; 2], max: usize) -> Result<Option<usize>, ConfigError> {
    match size(json, names[0], max)? {
        Some(n) => Ok(Some(n)),
        None => size(json, names[1], max),
    }
}

fn required(json: &Value, names: [&'static str; 2], max: usize) -> Result<usize, ConfigError> {
    either(json, names, max)?.ok_or(ConfigError::Missing { field: names[0], hint: "" })
}

/// A setting tl does not run, refused when it is on (`off` says what "off" is).
fn refuse_on(json: &Value, name: &str, off: impl Fn(&Value) -> bool, reason: &str) -> Result<(), ConfigError> {
    match field(json, name) {
        Some(v) if !off(v) => Err(invalid(name, v, reason)),
        _ => Ok(()),
    }
}

impl NomicBertConfig {
    /// Parse and check `config`'s nomic-bert fields, each error naming its field.
    pub fn parse(config: &ModelConfig) -> Result<NomicBertConfig, ConfigError> {
        let json = config.json();
        // The Hub's form defaults every bias on (nomic's config class); transformers' has none.
        let hub = field(json, "n_embd").is_some();
        let hidden_size = required(json, ["n_embd", "hidden_size"], MAX_WIDTH)?;
        let heads = required(json, ["n_head", "num_attention_heads"], MAX_WIDTH)?;
        if !hidden_size.is_multiple_of(heads) {
            let name = if hub { "n_head" } else { "num_attention_heads" };
            return Err(invalid(name, &json[name], "does not divide the hidden size"));
        }
        let act = ["activation_function", "hidden_act"].into_iter().find_map(|k| field(json, k).map(|v| (k, v)));
        if let Some((k, v)) = act {
            // transformers names the gate's activation (silu); the Hub the whole block.
            if !matches!(v.as_str(), Some("swiglu") | Some("silu")) {
                return Err(invalid(k, v, "tl's nomic-bert runs the SwiGLU MLP (\"swiglu\") only"));
            }
        }
        let is_false = |v: &Value| v.as_bool() == Some(false);
        refuse_on(json, "prenorm", is_false, "tl's nomic-bert runs the post-norm layers only")?;
        refuse_on(json, "causal", is_false, "tl's nomic-bert is a bidirectional encoder")?;
        refuse_on(json, "parallel_block", is_false, "parallel attention and MLP blocks are not implemented")?;
        refuse_on(json, "use_rms_norm", is_false, "tl's nomic-bert runs LayerNorm only")?;
        refuse_on(json, "rotary_emb_interleaved", is_false, "interleaved rotary pairs are not implemented")?;
        refuse_on(json, "rotary_emb_scale_base", Value::is_null, "xPos rotary scaling is not implemented")?;
        refuse_on(json, "rotary_scaling_factor", Value::is_null, "dynamic NTK rotary scaling is not implemented")?;
        refuse_on(json, "moe_every_n_layers", |v| v.as_u64() == Some(0), "nomic-bert-moe is not implemented")?;
        if let Some(a) = field(json, "architectures").and_then(Value::as_array).and_then(|a| a.first()) {
            if a != "NomicBertModel" && a != "NomicBertForPreTraining" {
                return Err(invalid(
                    "architectures",
                    &json["architectures"],
                    "tl runs NomicBertModel (and NomicBertForPreTraining's encoder); other heads are not read",
                ));
            }
        }
        let hd = hidden_size / heads;
        let fraction = match field(json, "rotary_emb_fraction") {
            None => 1.0,
            Some(v) => match v.as_f64() {
                Some(f) if f > 0.0 && f <= 1.0 && ((hd as f64 * f) as usize).is_multiple_of(2) => f,
                _ => {
                    return Err(invalid(
                        "rotary_emb_fraction",
                        v,
                        "expected a fraction in (0, 1] of the head giving an even width (absolute positions are not implemented)",
                    ))
                }
            },
        };
        let rotary_dim = (hd as f64 * fraction) as usize;
        if rotary_dim == 0 {
            return Err(invalid("rotary_emb_fraction", &json["rotary_emb_fraction"], "rotates no dimension"));
        }
        let theta = field(json, "rope_parameters").and_then(|p| field(p, "rope_theta")).map(|_| "rope_parameters");
        let rotary_base = match theta {
            None => positive_float(json, "rotary_emb_base")?.unwrap_or(1000.0),
            Some(_) => {
                let p = &json["rope_parameters"];
                if let Some(t) = field(p, "rope_type").filter(|t| t.as_str() != Some("default")) {
                    return Err(invalid("rope_parameters.rope_type", t, "tl's nomic-bert runs the default RoPE only"));
                }
                positive_float(p, "rope_theta")?.unwrap_or(1000.0)
            }
        } as f32;
        let eps = match positive_float(json, "layer_norm_epsilon")? {
            Some(e) => e,
            None => positive_float(json, "layer_norm_eps")?.unwrap_or(1e-12),
        } as f32;
        let type_vocab_size = match field(json, "type_vocab_size") {
            Some(v) if v.as_u64() == Some(0) => 0,
            _ => size(json, "type_vocab_size", MAX_TYPES)?.unwrap_or(2),
        };
        Ok(NomicBertConfig {
            hidden_size,
            num_hidden_layers: required(json, ["n_layer", "num_hidden_layers"], MAX_LAYERS)?,
            num_attention_heads: heads,
            intermediate_size: required(json, ["n_inner", "intermediate_size"], MAX_WIDTH)?,
            max_positions: either(json, ["n_positions", "max_position_embeddings"], MAX_POSITIONS)?.unwrap_or(2048),
            type_vocab_size,
            layer_norm_eps: eps,
            rotary_dim,
            rotary_base,
            qkv_bias: flag(json, "qkv_proj_bias")?.unwrap_or(hub),
            fc1_bias: flag(json, "mlp_fc1_bias")?.unwrap_or(hub),
            fc2_bias: flag(json, "mlp_fc2_bias")?.unwrap_or(hub),
        })
    }
}
