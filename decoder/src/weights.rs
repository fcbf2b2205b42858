//! Loading a decoder's tensors (Hugging Face Llama names). Every matrix becomes one `tl_quant::Linear`, held as
//! `EngineConfig.weights` says: in the file's own format (`native`: F32/F16/BF16 and every
//! GGUF block type tl-quant reads, Q4_0 .. Q8_0, IQ4_NL and Q2_K .. Q6_K), widened to f32 (`f32`), or
//! with the projections quantized to int4 at load (`int4`). An int4 checkpoint's
//! projections stay int4. Native and f32 give the same logits bit for bit.

use candle_core::{Device, Tensor};
use tl_core::{BuildCtx, DType, ModelError, WeightError, WeightStore, Weights};
use tl_quant::{Format, Linear, QLinear, QuantError};

use crate::config::DecoderConfig;

/// One transformer layer's weights.
pub struct Layer {
    /// `(d,)` RMSNorm weight before attention.
    pub input_norm: Tensor,
    /// `(H*D + 2*H_kv*D,)` the q, k and v biases side by side, when the family has them.
    pub qkv_bias: Option<Vec<f32>>,
    /// `[H * D, d]`.
    pub q: Linear,
    /// `[H_kv * D, d]`.
    pub k: Linear,
    /// `[H_kv * D, d]`.
    pub v: Linear,
    /// `[d, H * D]`.
    pub o: Linear,
    /// `(d,)` RMSNorm weight before the MLP.
    pub post_norm: Tensor,
    /// `[I, d]`.
    pub gate: Linear,
    /// `[I, d]`.
    pub up: Linear,
    /// `[d, I]`.
    pub down: Linear,
}

/// Where the embedding table lives: its own matrix, or (tied) the LM head's weights,
/// kept once rather than copied.
pub enum Embedding {
    /// `(V, d)`, in its stored format.
    Own(Linear),
    /// The LM head's `[V, d]` weights.
    Tied,
}

/// All weights of a decoder.
pub struct DecoderWeights {
    /// Token embeddings.
    pub embed: Embedding,
    /// The layers, in order.
    pub layers: Vec<Layer>,
    /// `(d,)` final RMSNorm weight.
    pub norm: Tensor,
    /// `[V, d]`, never int4 (numbers.md keeps the LM head as stored: floating point, or
    /// a GGUF file's own blocks).
    pub lm_head: Linear,
}

impl DecoderWeights {
    /// The `(V, d)` embedding table: rows are widened to f32 on lookup.
    pub fn embedding(&self) -> &Linear {
        match &self.embed {
            Embedding::Own(e) => e,
            Embedding::Tied => &self.lm_head,
        }
    }
}

/// How the seven projections are stored or converted.
#[derive(Clone, Copy)]
enum ProjFormat {
    /// `<name>.weight`, widened to f32.
    Float,
    /// `<name>.weight`, kept as stored.
    Native,
    /// `<name>.weight`, widened and quantized at load with this group.
    QuantizeAtLoad(usize),
    /// `<name>.qweight` + `<name>.scales` from an int4 checkpoint with this group.
    Int4File(usize),
}

fn quant_err(store: &dyn WeightStore, name: &str, e: QuantError) -> ModelError {
    ModelError::Weights(WeightError::Tensor {
        path: store.path().to_path_buf(),
        name: name.to_string(),
        reason: e.to_string(),
    })
}

/// The group of an `"int4-g<g>-sym"` metadata value.
fn parse_quant_tag(store: &dyn WeightStore, tag: &str) -> Result<usize, ModelError> {
    tag.strip_prefix("int4-g")
        .and_then(|r| r.strip_suffix("-sym"))
        .and_then(|g| g.parse::<usize>().ok())
        .filter(|&g| g > 0)
        .ok_or_else(|| {
            ModelError::Weights(WeightError::Format {
                path: store.path().to_path_buf(),
                reason: format!("metadata quant = {tag:?}: expected \"int4-g<group>-sym\""),
            })
        })
}

fn le_u16s(bytes: &[u8]) -> Vec<u16> {
    bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()
}

fn projection(
    store: &dyn WeightStore,
    base: &str,
    out: usize,
    inp: usize,
    fmt: ProjFormat,
) -> Result<Linear, ModelError> {
    let weight = format!("{base}.weight");
    match fmt {
        ProjFormat::Int4File(group) => {
            let qname = format!("{base}.qweight");
            let sname = format!("{base}.scales");
            if !inp.is_multiple_of(group) || !group.is_multiple_of(2) {
                return Err(quant_err(store, &qname, QuantError::BadGroup { group, inp }));
            }
            let qweight = store.raw(&qname, DType::U8, &[out, inp / 2])?.to_vec();
            let scales = le_u16s(store.raw(&sname, DType::F16, &[out, inp / group])?);
            store.done_with(&qname);
            store.done_with(&sname);
            let q = QLinear::from_parts(out, inp, group, qweight, scales).map_err(|e| quant_err(store, &qname, e))?;
            Linear::from_int4(&q).map_err(|e| quant_err(store, &qname, e))
        }
        ProjFormat::QuantizeAtLoad(group) => {
            let w = store.f32(&weight, &[out, inp])?;
            store.done_with(&weight);
            let q = QLinear::quantize(&w, out, inp, group).map_err(|e| quant_err(store, &weight, e))?;
            Linear::from_int4(&q).map_err(|e| quant_err(store, &weight, e))
        }
        ProjFormat::Float => matrix(store, &weight, out, inp, false),
        ProjFormat::Native => matrix(store, &weight, out, inp, true),
    }
}

/// The kernel format of a stored type, when the kernels read it as it is.
fn native_format(dtype: &DType) -> Option<Format> {
    match dtype {
        DType::F32 => Some(Format::F32),
        DType::F16 => Some(Format::F16),
        DType::BF16 => Some(Format::BF16),
        DType::Other(t) => Format::from_ggml_name(t),
        DType::U8 => None,
    }
}

/// A `[out, inp]` matrix: as stored when `native` and the kernels read its type, else
/// widened to f32.
fn matrix(store: &dyn WeightStore, name: &str, out: usize, inp: usize, native: bool) -> Result<Linear, ModelError> {
    let format = store.info(name).and_then(|i| native_format(&i.dtype));
    let lin = match format {
        Some(format) if native => {
            let stored = store.stored(name, &[out, inp])?;
            Linear::from_stored(format, &stored.bytes, out, inp)
        }
        _ => Linear::new_f32(store.f32(name, &[out, inp])?, out, inp),
    };
    store.done_with(name);
    lin.map_err(|e| quant_err(store, name, e))
}

/// A `(d,)` norm weight as a tensor on `device`.
fn norm(store: &dyn WeightStore, name: &str, d: usize, device: &Device) -> Result<Tensor, ModelError> {
    Ok(Tensor::from_vec(store.f32(name, &[d])?, d, device)?)
}

/// Load every tensor of the model `ctx` describes.
pub fn load(cfg: &DecoderConfig, ctx: &BuildCtx<'_>) -> Result<DecoderWeights, ModelError> {
    let store = ctx.weights;
    let fmt = match (store.metadata("quant"), ctx.engine.weights) {
        // An int4 file cannot be requantized without loss; its own group wins.
        (Some(tag), _) => ProjFormat::Int4File(parse_quant_tag(store, &tag)?),
        (None, Weights::Int4 { group }) => ProjFormat::QuantizeAtLoad(group),
        (None, Weights::F32) => ProjFormat::Float,
        (None, Weights::Native) => ProjFormat::Native,
    };
    // Embedding and LM head: never int4; native unless everything is widened.
    let native = ctx.engine.weights != Weights::F32;
    let (d, v, inter) = (cfg.hidden_size, cfg.vocab_size, cfg.intermediate_size);
    let (qw, kvw) = (cfg.q_width(), cfg.kv_width());
    let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
    for i in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{i}");
        let proj = |name: &str, out, inp| projection(store, &format!("{p}.{name}"), out, inp, fmt);
        let qkv_bias = if cfg.qkv_bias {
            let mut b = store.f32(&format!("{p}.self_attn.q_proj.bias"), &[qw])?;
            b.extend(store.f32(&format!("{p}.self_attn.k_proj.bias"), &[kvw])?);
            b.extend(store.f32(&format!("{p}.self_attn.v_proj.bias"), &[kvw])?);
            Some(b)
        } else {
            None
        };
        layers.push(Layer {
            qkv_bias,
            input_norm: norm(store, &format!("{p}.input_layernorm.weight"), d, ctx.device)?,
            q: proj("self_attn.q_proj", qw, d)?,
            k: proj("self_attn.k_proj", kvw, d)?,
            v: proj("self_attn.v_proj", kvw, d)?,
            o: proj("self_attn.o_proj", d, qw)?,
            post_norm: norm(store, &format!("{p}.post_attention_layernorm.weight"), d, ctx.device)?,
            gate: proj("mlp.gate_proj", inter, d)?,
            up: proj("mlp.up_proj", inter, d)?,
            down: proj("mlp.down_proj", d, inter)?,
        });
    }
    let norm = norm(store, "model.norm.weight", d, ctx.device)?;
    let table = matrix(store, "model.embed_tokens.weight", v, d, native)?;
    // Tied: the embedding table is the LM head (Hugging Face ignores a stored
    // lm_head.weight then); untied, a missing lm_head.weight is an error naming it.
    let (embed, lm_head) = if cfg.tie_word_embeddings {
        (Embedding::Tied, table)
    } else {
        (Embedding::Own(table), matrix(store, "lm_head.weight", v, d, native)?)
    };
    Ok(DecoderWeights { embed, layers, norm, lm_head })
}
