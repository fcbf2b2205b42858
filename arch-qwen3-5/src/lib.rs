//! tl-arch-qwen3-5: Qwen3.5's text model, registered as `tl_arch = "qwen3_5"` and as
//! Hugging Face `model_type = "qwen3_5_text"` (`Qwen3_5ForCausalLM`), and its mixture of
//! experts, `tl_arch = "qwen3_5_moe"` / `model_type = "qwen3_5_moe_text"`
//! (`Qwen3_5MoeForCausalLM`): every layer's MLP is a sparse block (softmax top-k router
//! with the top-k renormalised, experts of `moe_intermediate_size`) plus a shared expert of
//! `shared_expert_intermediate_size` gated per token by `sigmoid(shared_expert_gate(h))`.
//!
//! A hybrid: of every `full_attention_interval` (4) layers, three are Gated DeltaNet
//! layers (tl-decoder's [`DeltaNet`]: a causal conv and a delta-rule matrix per value
//! head, kept per sequence in the pool's state column, docs/spec/kv.md) and one is gated
//! attention (a sigmoid output gate read from `q_proj`, per-head q/k RMSNorm, RoPE on the
//! first `partial_rotary_factor` of each head). Every norm but the DeltaNet's gated one is
//! applied as `x * (1 + w)` (transformers' zero-centred `Qwen3_5RMSNorm`); the 1 is added
//! here, once, in f32. The arithmetic of the recurrent layers is numbers.md's "Gated
//! DeltaNet" rule, so a sequence's bits do not depend on chunking, batching or resuming.
//!
//! GGUF files (`general.architecture` `qwen35` / `qwen35moe`, llama.cpp's converter) are
//! read by [`gguf`]: llama.cpp's names and layout back to these, each converter transform
//! undone (the table is in that module).
//!
//! The multimodal checkpoints (`Qwen3_5ForConditionalGeneration`, `model_type = "qwen3_5"`,
//! and `..._moe`: the text config under `text_config`, weights under `model.language_model.`)
//! run their text model through tl-core's generic nesting (the `NestedRegistration`s below);
//! the vision tower (`model.visual.*`) is not read.
//!
//! The MTP head (`mtp.*`) is a draft head ([`mtp`], `--speculate mtp`), loaded only when
//! asked for. Experts may be one tensor each or stacked
//! (`experts.gate_up_proj` `[E, 2I, d]`, `experts.down_proj`: tl-decoder's
//! [`tl_decoder::StackedExperts`]).
//!
//! Nothing names this crate from core: a binary or test that loads a Qwen3.5 writes
//! `use tl_arch_qwen3_5 as _;` so the registrations are linked.
#![deny(missing_docs)]

use std::any::Any;
use std::sync::Arc;

use serde_json::Value;
use tl_core::{
    ArchRegistration, Architecture, BuildCtx, ConfigError, DraftHead, KvGeometry, Model, ModelConfig, ModelError,
    ModelTypeRegistration, NestedRegistration, Recurrent,
};
use tl_decoder::fields::experts;
use tl_decoder::fields::{field, flag, invalid, size};
use tl_decoder::{
    rope_of, Act, Attn, AttnBlock, AttnSpec, Cx, DecoderConfig, DeltaLayer, DeltaNet, DeltaShape, Ends, Ffn, LayerAttn,
    LayerBody, Loader, Mlp, Moe, MoeSpec, PreNorm, QkNormKind, Routing, SharedExpert, Stack, StackParts, Variant,
    MLP_NAMES,
};

pub mod gguf;
pub mod mtp;

/// One layer's kind, from `layer_types`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// `linear_attention`: a Gated DeltaNet.
    Linear,
    /// `full_attention`: gated attention over every earlier key.
    Full,
}

/// A Qwen3.5's typed config: the shared decoder fields and what the hybrid adds.
#[derive(Clone, Debug)]
pub struct Qwen35Config {
    /// The Llama-shaped fields (hidden, heads, head_dim, RoPE theta, eps, vocabulary).
    pub base: DecoderConfig,
    /// Each layer's kind.
    pub kinds: Vec<LayerKind>,
    /// The DeltaNet layers' shape.
    pub delta: DeltaShape,
    /// The rotated part of each attention head, `head_dim * partial_rotary_factor`.
    pub rotary_dim: usize,
    /// Qwen3.5-MoE's sparse block (every layer), or `None` for the dense model.
    pub moe: Option<Qwen35Moe>,
    /// The tensors are llama.cpp's converter's (`tl_llama_cpp_layout`, which only the GGUF
    /// translation writes): norms hold `1 + w` already, and the DeltaNet's as
    /// [`gguf::delta`] reads them.
    pub llama_cpp: bool,
}

/// Qwen3.5-MoE's experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Qwen35Moe {
    /// Experts E (`num_experts`).
    pub experts: usize,
    /// Experts per token (`num_experts_per_tok`).
    pub top_k: usize,
    /// Each expert's width (`moe_intermediate_size`).
    pub width: usize,
    /// The shared expert's width (`shared_expert_intermediate_size`).
    pub shared_width: usize,
}

const MAX_DIM: usize = 1 << 16;

/// `layer_types`, or transformers' default: every `full_attention_interval`-th layer
/// (default 4) is full attention, the rest linear.
fn kinds(json: &Value, n: usize) -> Result<Vec<LayerKind>, ConfigError> {
    let Some(list) = field(json, "layer_types") else {
        let every = size(json, "full_attention_interval", n.max(1))?.unwrap_or(4);
        return Ok((0..n).map(|i| if (i + 1) % every == 0 { LayerKind::Full } else { LayerKind::Linear }).collect());
    };
    let items = list
        .as_array()
        .filter(|l| l.len() == n)
        .ok_or_else(|| invalid("layer_types", list, &format!("expected a list of {n} layer kinds")))?;
    items
        .iter()
        .enumerate()
        .map(|(i, t)| match t.as_str() {
            Some("linear_attention") => Ok(LayerKind::Linear),
            Some("full_attention") => Ok(LayerKind::Full),
            _ => Err(invalid(
                &format!("layer_types[{i}]"),
                t,
                "Qwen3.5 implements \"linear_attention\" and \"full_attention\" layers only",
            )),
        })
        .collect()
}

/// `partial_rotary_factor` from `rope_parameters` or the top level (transformers'
/// default 0.25), as the rotated width of a head: even, in `2..=head_dim`.
fn rotary_dim(json: &Value, head_dim: usize) -> Result<usize, ConfigError> {
    let nested = field(json, "rope_parameters").and_then(|p| field(p, "partial_rotary_factor"));
    let (name, v) = match (nested, field(json, "partial_rotary_factor")) {
        (Some(v), _) => ("rope_parameters.partial_rotary_factor", Some(v)),
        (None, v) => ("partial_rotary_factor", v),
    };
    let factor = match v {
        None => 0.25,
        Some(v) => v.as_f64().filter(|f| *f > 0.0 && *f <= 1.0).ok_or_else(|| invalid(name, v, "expected (0, 1]"))?,
    };
    // transformers: `int(head_dim * partial_rotary_factor)`.
    let dim = (head_dim as f64 * factor) as usize;
    if dim < 2 || !dim.is_multiple_of(2) {
        let v = v.cloned().unwrap_or(Value::Null);
        return Err(invalid(name, &v, &format!("rotates {dim} of {head_dim} values: need an even count >= 2")));
    }
    Ok(dim)
}

impl Qwen35Config {
    /// Parse and check a Qwen3.5 text config (with `moe`, Qwen3.5-MoE's).
    pub fn parse(config: &ModelConfig, moe: bool) -> Result<Qwen35Config, ConfigError> {
        let json = config.json();
        let moe = if moe { Some(moe_fields(json)?) } else { None };
        // Qwen3.5-MoE has no dense MLP (every layer is sparse), so no `intermediate_size`
        // for the shared decoder's fields: the experts' width stands in, unused.
        let mut filled;
        let json_in = match moe.filter(|_| field(json, "intermediate_size").is_none()) {
            Some(m) => {
                filled = json.clone();
                filled["intermediate_size"] = m.width.into();
                &filled
            }
            None => json,
        };
        // The attention layers are global; the linear ones have no window either.
        let base = DecoderConfig::parse_json(config, json_in, Variant { qkv_bias: false }, |_, n| {
            Ok(vec![LayerAttn::Global; n])
        })?;
        let kinds = kinds(json, base.num_hidden_layers)?;
        let get =
            |name: &'static str, default: usize| Ok::<_, ConfigError>(size(json, name, MAX_DIM)?.unwrap_or(default));
        let delta = DeltaShape {
            k_heads: get("linear_num_key_heads", 16)?,
            v_heads: get("linear_num_value_heads", 32)?,
            k_dim: get("linear_key_head_dim", 128)?,
            v_dim: get("linear_value_head_dim", 128)?,
            kernel: get("linear_conv_kernel_dim", 4)?,
        };
        if kinds.contains(&LayerKind::Linear) {
            delta.check().map_err(|e| invalid("linear_num_value_heads", &json["linear_num_value_heads"], &e))?;
        }
        if !kinds.contains(&LayerKind::Full) {
            return Err(invalid("layer_types", &json["layer_types"], "no full_attention layer: not built yet"));
        }
        if let Some(act) = field(json, "hidden_act").filter(|a| a.as_str() != Some("silu")) {
            return Err(invalid("hidden_act", act, "Qwen3.5's MLP and conv use silu"));
        }
        let rotary_dim = rotary_dim(json, base.head_dim)?;
        let llama_cpp = flag(json, gguf::LAYOUT_KEY)?.unwrap_or(false);
        Ok(Qwen35Config { base, kinds, delta, rotary_dim, moe, llama_cpp })
    }

    fn recurrent_layers(&self) -> Vec<u32> {
        (0..self.kinds.len() as u32).filter(|&i| self.kinds[i as usize] == LayerKind::Linear).collect()
    }
}

/// Qwen3.5-MoE's expert fields, each error naming its field.
fn moe_fields(json: &Value) -> Result<Qwen35Moe, ConfigError> {
    // transformers' defaults: 256 experts, 8 per token, widths of 512.
    let (experts, top_k) = experts(json, &["num_experts"], 256, 8)?;
    let width = |name: &'static str| Ok::<_, ConfigError>(size(json, name, MAX_DIM)?.unwrap_or(512));
    Ok(Qwen35Moe {
        experts,
        top_k,
        width: width("moe_intermediate_size")?,
        shared_width: width("shared_expert_intermediate_size")?,
    })
}

/// A Qwen3.5 layer: gated attention or a Gated DeltaNet, each pre-norm with its MLP.
pub enum Qwen35Layer {
    /// A `full_attention` layer.
    Attention(PreNorm),
    /// A `linear_attention` layer.
    Delta(DeltaLayer),
}

impl LayerBody for Qwen35Layer {
    fn forward(&self, layer: u32, cx: &mut Cx<'_, '_>) -> Result<(), ModelError> {
        match self {
            Qwen35Layer::Attention(l) => l.forward(layer, cx),
            Qwen35Layer::Delta(l) => l.forward(layer, cx),
        }
    }

    fn weight_bytes(&self) -> usize {
        match self {
            Qwen35Layer::Attention(l) => l.weight_bytes(),
            Qwen35Layer::Delta(l) => l.weight_bytes(),
        }
    }

    fn adaptable(&self, out: &mut Vec<tl_core::Adaptable>) {
        match self {
            Qwen35Layer::Attention(l) => l.adaptable(out),
            Qwen35Layer::Delta(l) => l.adaptable(out),
        }
    }
}

/// A zero-centred norm's weight as the forward multiplies by it: `1 + w`, in f32; as
/// stored when the file already holds `1 + w` (`stored_plus_one`: llama.cpp's converter
/// adds the 1 in torch float32, the same single rounding, so both give the same bits).
fn norm_weight(w: &Loader<'_>, name: &str, len: usize, stored_plus_one: bool) -> Result<Vec<f32>, ModelError> {
    let v = w.vector(name, len)?;
    Ok(if stored_plus_one { v } else { v.into_iter().map(|x| 1.0 + x).collect() })
}

/// The gated attention every full-attention layer (and the MTP head's) runs.
fn attn_spec(b: &DecoderConfig) -> AttnSpec {
    AttnSpec {
        attn: Attn::new(b.num_attention_heads, b.num_key_value_heads, b.head_dim),
        rope: 0,
        qkv_bias: false,
        o_bias: false,
        qk_norm: QkNormKind::PerHead,
        sinks: false,
        out_gate: true,
    }
}

/// The layer of `kind` under `p` (`model.layers.N`, or the MTP head's `mtp.layers.0`):
/// its token mixer, norms and MLP (dense, or Qwen3.5-MoE's sparse block with its shared
/// expert).
fn layer(
    w: &Loader<'_>,
    ctx: &BuildCtx<'_>,
    cfg: &Qwen35Config,
    p: &str,
    kind: LayerKind,
) -> Result<Qwen35Layer, ModelError> {
    let b = &cfg.base;
    let d = b.hidden_size;
    let norm = |name: &str, len| norm_weight(w, name, len, cfg.llama_cpp);
    let input_norm = norm(&format!("{p}.input_layernorm.weight"), d)?;
    let post_norm = norm(&format!("{p}.post_attention_layernorm.weight"), d)?;
    let mp = format!("{p}.mlp");
    let ffn = match cfg.moe {
        None => Ffn::Dense(Mlp::load(w, &mp, MLP_NAMES, d, b.intermediate_size, Act::SwiGlu)?),
        Some(m) => {
            let spec = MoeSpec {
                experts: m.experts,
                top_k: m.top_k,
                width: m.width,
                routing: Routing::SoftmaxTopK { renorm: true }, // always, in Qwen3.5-MoE
                router: "gate",
                names: MLP_NAMES,
            };
            let shared = SharedExpert::load(w, &mp, d, m.shared_width)?;
            Ffn::Moe(Moe { shared: Some(shared), ..Moe::load(w, &mp, d, spec)? })
        }
    };
    Ok(match kind {
        LayerKind::Full => {
            let attn = AttnBlock::load(w, &format!("{p}.self_attn"), d, attn_spec(b), &norm)?;
            Qwen35Layer::Attention(PreNorm { input_norm, attn, post_norm, ffn })
        }
        LayerKind::Linear => {
            let lp = format!("{p}.linear_attn");
            let delta = if cfg.llama_cpp {
                gguf::delta(w, ctx, &lp, d, cfg.delta)?
            } else {
                DeltaNet::load(w, &lp, d, cfg.delta)?
            };
            Qwen35Layer::Delta(DeltaLayer { input_norm, delta, post_norm, ffn })
        }
    })
}

/// The Qwen3.5 `ctx` describes, every tensor loaded.
pub fn load(cfg: &Qwen35Config, ctx: &BuildCtx<'_>) -> Result<Stack<Qwen35Layer>, ModelError> {
    // Experts stacked as transformers 5 saves them are served per expert.
    let experts = tl_decoder::StackedExperts { inner: ctx.weights };
    let ctx = &BuildCtx { weights: &experts, ..*ctx };
    let w = Loader::new(ctx)?;
    let b = &cfg.base;
    let d = b.hidden_size;
    let layers = (cfg.kinds.iter().enumerate())
        .map(|(i, &kind)| layer(&w, ctx, cfg, &format!("model.layers.{i}"), kind))
        .collect::<Result<Vec<_>, _>>()?;
    let final_norm = norm_weight(&w, "model.norm.weight", d, cfg.llama_cpp)?;
    let ends = Ends::load(&w, b.vocab_size, d, b.tie_word_embeddings, final_norm)?;
    let parts = StackParts {
        family: "qwen3_5",
        shape: b.step_shape(),
        hidden: d,
        eps: b.rms_norm_eps,
        ends,
        ropes: vec![rope_of(b.rope_theta, cfg.rotary_dim, b.rope_scaling.as_ref())],
        layers,
    };
    Stack::new(parts, ctx.device)
}

/// The Qwen3.5 family: `Qwen35Arch(false)` dense, `Qwen35Arch(true)` the MoE.
struct Qwen35Arch(bool);

impl Architecture for Qwen35Arch {
    fn parse_config(&self, config: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError> {
        Ok(Arc::new(Qwen35Config::parse(config, self.0)?))
    }

    fn kv_geometry(&self, config: &ModelConfig, block_tokens: u32) -> Result<KvGeometry, ConfigError> {
        Ok(config.arch_config::<Qwen35Config>()?.base.kv_geometry(block_tokens))
    }

    fn recurrent(&self, config: &ModelConfig) -> Result<Option<Recurrent>, ConfigError> {
        let cfg = config.arch_config::<Qwen35Config>()?;
        let layers = cfg.recurrent_layers();
        Ok((!layers.is_empty()).then(|| Recurrent { layers, floats: cfg.delta.state_floats() as u32 }))
    }

    fn build(&self, ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
        let cfg = ctx.config.arch_config::<Qwen35Config>()?.clone();
        Ok(Box::new(load(&cfg, &ctx)?))
    }

    fn draft_head(&self, ctx: BuildCtx<'_>) -> Result<Option<DraftHead>, ModelError> {
        let cfg = ctx.config.arch_config::<Qwen35Config>()?.clone();
        mtp::load(&cfg, &ctx)
    }
}

/// The pre-tokenizer of Qwen3.5's byte-level BPE (`tokenizer.ggml.pre = "qwen35"`, as
/// llama.cpp's converter names it), as transformers' `Qwen3_5Tokenizer` builds it: Qwen2's
/// regex with combining marks (`\p{M}`) kept with their letters, then GPT-2's byte mapping;
/// NFC first.
fn qwen35_pre_tokenizer() -> Value {
    let pattern = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    tl_core::gguf_vocab::regex_byte_level(pattern, false)
}

fn nfc() -> Value {
    serde_json::json!({"type": "NFC"})
}

inventory::submit!(tl_core::GgufPreTokenizer {
    name: "qwen35",
    pre_tokenizer: qwen35_pre_tokenizer,
    normalizer: Some(nfc),
    ignore_merges: false,
});

inventory::submit!(ArchRegistration { name: "qwen3_5", make: || Box::new(Qwen35Arch(false)) });
inventory::submit!(ArchRegistration { name: "qwen3_5_moe", make: || Box::new(Qwen35Arch(true)) });
// `Qwen3_5ForCausalLM.save_pretrained` and `Qwen3_5MoeForCausalLM`'s write these.
inventory::submit!(ModelTypeRegistration { model_type: "qwen3_5_text", arch: "qwen3_5" });
inventory::submit!(ModelTypeRegistration { model_type: "qwen3_5_moe_text", arch: "qwen3_5_moe" });
// `Qwen3_5ForConditionalGeneration` / `Qwen3_5MoeForConditionalGeneration` (the released
// checkpoints): the text model under `text_config` and `model.language_model.`.
inventory::submit!(NestedRegistration {
    model_type: "qwen3_5",
    text_config: "text_config",
    weights: "model.language_model.",
    text_weights: "model.",
    arch: "qwen3_5",
});
inventory::submit!(NestedRegistration {
    model_type: "qwen3_5_moe",
    text_config: "text_config",
    weights: "model.language_model.",
    text_weights: "model.",
    arch: "qwen3_5_moe",
});
