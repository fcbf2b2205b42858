//! The sublayer blocks a family's layer is composed of: the attention sublayer
//! ([`AttnBlock`], with the options the families need), the dense MLP ([`Mlp`]), the
//! feed-forward a layer runs ([`Ffn`]: dense, or a mixture of experts), and the pre-norm
//! layer most families are ([`PreNorm`]). Each reads its input rows from the step's
//! buffers and writes its output rows there; each row's output is a function of that row
//! alone (and, for attention, its own sequence's visible keys), so a layer composed of
//! them is batch-, chunk- and thread-invariant bit for bit.

use tl_core::ModelError;
use tl_quant::Linear;

use crate::attention::{attention_sinks, Attn};
use crate::cx::{Cx, LayerBody};
use crate::kv_write::write_kv;
use crate::loader::Loader;
use crate::lora::{self, Target, Targets};
use crate::mlp::{add_bias, Mlp};
use crate::moe::Moe;
use crate::proj::{f32_bytes, grow, linear, Proj};
use crate::rowops::{full_qk_rms_norm, head_rms_norm, sigmoid_gate};

/// Reads a norm weight `(len,)` by its tensor name, as the family's norms are applied
/// (Gemma adds its `1 +` here).
pub type NormReader<'r> = &'r dyn Fn(&str, usize) -> Result<Vec<f32>, ModelError>;

/// RMSNorms on the queries and keys after the q/k/v projection, before RoPE.
pub enum QkNorm {
    /// None (Llama, Qwen2, Mistral).
    None,
    /// Each head over its own `D` values, one `(D,)` weight for the query heads and one for
    /// the key heads (Qwen3, Gemma 3): `self_attn.q_norm` / `self_attn.k_norm`.
    PerHead {
        /// `(D,)`.
        q: Vec<f32>,
        /// `(D,)`.
        k: Vec<f32>,
    },
    /// The whole query row `(H*D,)` and the whole key row `(H_kv*D,)` (OLMoE).
    Full {
        /// `(H*D,)`.
        q: Vec<f32>,
        /// `(H_kv*D,)`.
        k: Vec<f32>,
    },
}

/// Which q/k norm a family's attention has (the weights are read by [`AttnBlock::load`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkNormKind {
    /// No q/k norm.
    None,
    /// Per head over `D`.
    PerHead,
    /// Over the whole q and k rows.
    Full,
}

/// What a family's attention sublayer is: its shape and options.
#[derive(Clone, Copy, Debug)]
pub struct AttnSpec {
    /// Heads, head size, scale, window.
    pub attn: Attn,
    /// Which of the model's RoPE tables the layer applies.
    pub rope: usize,
    /// `q_proj.bias`, `k_proj.bias`, `v_proj.bias` present.
    pub qkv_bias: bool,
    /// `o_proj.bias` present.
    pub o_bias: bool,
    /// The q/k norm.
    pub qk_norm: QkNormKind,
    /// `sinks` `(H,)`: one logit per query head in the softmax (gpt-oss).
    pub sinks: bool,
    /// An output gate in `q_proj` (Qwen3.5's gated attention): `q_proj` is `[H*2D, d]`,
    /// each head's `D` query rows then its `D` gate rows, and the attention output is
    /// multiplied by `sigmoid(gate)` before `o_proj`.
    pub out_gate: bool,
}

/// The attention sublayer: `proj = o(attention(rope(norm_qk(qkv(h) + b))))`, K and V of
/// the step's tokens written into the pool as f16 before any query reads them.
pub struct AttnBlock {
    /// `[H*D + 2*H_kv*D, d]`: q, k, v stacked.
    pub qkv: Proj,
    /// `(H*D + 2*H_kv*D,)` the q, k and v biases side by side, when the family has them.
    pub qkv_bias: Option<Vec<f32>>,
    /// The q/k norm.
    pub qk_norm: QkNorm,
    /// Heads, head size, scale, window.
    pub attn: Attn,
    /// Index of the RoPE table the layer applies.
    pub rope: usize,
    /// `[d, H*D]`.
    pub o: Linear,
    /// `(d,)` the o projection's bias, when the family has one.
    pub o_bias: Option<Vec<f32>>,
    /// `(H,)` the query heads' sink logits, or empty.
    pub sinks: Vec<f32>,
    /// `[H*D, d]` the output gate's rows of `q_proj`, when the family has one.
    pub gate: Option<Linear>,
    /// The projections a LoRA adapter may adapt: q (not a gated one: its rows interleave
    /// query and gate), k, v; o.
    pub lora: Targets,
}

impl AttnBlock {
    /// The sublayer under Hugging Face's names below `p` (`model.layers.N.self_attn`):
    /// `q_proj`, `k_proj`, `v_proj`, `o_proj` (and their `.bias` where `spec` says),
    /// `q_norm`, `k_norm` read through `norm`.
    pub fn load(
        w: &Loader<'_>,
        p: &str,
        d: usize,
        spec: AttnSpec,
        norm: NormReader<'_>,
    ) -> Result<AttnBlock, ModelError> {
        let a = spec.attn;
        let (qw, kvw) = (a.heads * a.head_dim, a.kv_heads * a.head_dim);
        let proj = |name: &str, out, inp| w.proj(&format!("{p}.{name}"), out, inp);
        // A gated q_proj holds per head D query rows then D gate rows: read as two.
        let (q, gate) = if spec.out_gate {
            let rows =
                |off: usize| (0..a.heads).flat_map(move |h| (0..a.head_dim).map(move |i| h * 2 * a.head_dim + off + i));
            let name = format!("{p}.q_proj");
            let q: Vec<usize> = rows(0).collect();
            let g: Vec<usize> = rows(a.head_dim).collect();
            (w.proj_rows(&name, &q, 2 * qw, d)?, Some(w.proj_rows(&name, &g, 2 * qw, d)?))
        } else {
            (proj("q_proj", qw, d)?, None)
        };
        let qkv = Proj::new(vec![q, proj("k_proj", kvw, d)?, proj("v_proj", kvw, d)?]);
        let qkv_bias = if spec.qkv_bias {
            let mut b = w.vector(&format!("{p}.q_proj.bias"), qw)?;
            b.extend(w.vector(&format!("{p}.k_proj.bias"), kvw)?);
            b.extend(w.vector(&format!("{p}.v_proj.bias"), kvw)?);
            Some(b)
        } else {
            None
        };
        let (qn, kn) = (format!("{p}.q_norm.weight"), format!("{p}.k_norm.weight"));
        let qk_norm = match spec.qk_norm {
            QkNormKind::None => QkNorm::None,
            QkNormKind::PerHead => QkNorm::PerHead { q: norm(&qn, a.head_dim)?, k: norm(&kn, a.head_dim)? },
            QkNormKind::Full => QkNorm::Full { q: norm(&qn, qw)?, k: norm(&kn, kvw)? },
        };
        let o_bias = if spec.o_bias { Some(w.vector(&format!("{p}.o_proj.bias"), d)?) } else { None };
        let sinks = if spec.sinks { w.vector(&format!("{p}.sinks"), a.heads)? } else { Vec::new() };
        let o = proj("o_proj", d, qw)?;
        let t = |name: &str, inp, out, col| Target::new(format!("{p}.{name}"), inp, out, col);
        let mut inp = vec![t("k_proj", d, kvw, qw), t("v_proj", d, kvw, qw + kvw)];
        if !spec.out_gate {
            inp.insert(0, t("q_proj", d, qw, 0));
        }
        let lora = Targets { inp, out: Some(t("o_proj", qw, d, 0)) };
        Ok(AttnBlock { qkv, qkv_bias, qk_norm, attn: a, rope: spec.rope, o, o_bias, sinks, gate, lora })
    }

    /// `proj` `(N, d)` from `h` `(N, d)`, for layer `layer`.
    pub fn forward(&self, layer: u32, cx: &mut Cx<'_, '_>) -> Result<(), ModelError> {
        let Cx { step, kv, n, dm, eps, b } = cx;
        let (n, dm, eps, path) = (*n, *dm, *eps, step.path);
        let a = &self.attn;
        let (qkv_w, qw) = (a.qkv_width(), a.heads * a.head_dim);
        let qkv = grow(&mut b.qkv, n * qkv_w); // (N, H*D + 2*H_kv*D)
        self.qkv.forward(&b.h[..n * dm], n, qkv, &mut b.tmp, "qkv_proj")?;
        if let Some(bias) = &self.qkv_bias {
            add_bias(qkv, bias);
        }
        if !step.lora.is_empty() {
            for t in &self.lora.inp {
                lora::apply(step.lora, t, &b.h[..n * dm], qkv, qkv_w, &mut b.lora)?;
            }
        }
        match &self.qk_norm {
            QkNorm::None => {}
            QkNorm::PerHead { q, k } => head_rms_norm(path, qkv, qkv_w, (a.heads, q), (a.kv_heads, k), eps),
            QkNorm::Full { q, k } => full_qk_rms_norm(path, qkv, qkv_w, q, k, eps),
        }
        b.ropes[self.rope].apply(qkv, qkv_w, 0, a.heads + a.kv_heads, a.head_dim); // q and k heads
        write_kv(step, &mut **kv, layer, a, qkv)?;
        let att = grow(&mut b.att, n * qw); // (N, H*D)
        attention_sinks(step, &**kv, (layer, a, &self.sinks), qkv, att)?;
        if let Some(gate) = &self.gate {
            let g = grow(&mut b.mix, n * qw); // (N, H*D)
            linear(gate, &b.h[..n * dm], n, g, "q_proj (gate)")?;
            sigmoid_gate(path, att, g, qw);
        }
        let proj = grow(&mut b.proj, n * dm); // (N, d)
        linear(&self.o, att, n, proj, "o_proj")?;
        if let Some(bias) = &self.o_bias {
            add_bias(proj, bias);
        }
        if let (false, Some(t)) = (step.lora.is_empty(), &self.lora.out) {
            lora::apply(step.lora, t, att, proj, dm, &mut b.lora)?;
        }
        Ok(())
    }

    /// Bytes its weights hold.
    pub fn weight_bytes(&self) -> usize {
        let norms = match &self.qk_norm {
            QkNorm::None => 0,
            QkNorm::PerHead { q, k } | QkNorm::Full { q, k } => f32_bytes(q) + f32_bytes(k),
        };
        self.qkv.packed_bytes()
            + self.o.packed_bytes()
            + self.qkv_bias.as_deref().map_or(0, f32_bytes)
            + self.o_bias.as_deref().map_or(0, f32_bytes)
            + f32_bytes(&self.sinks)
            + self.gate.as_ref().map_or(0, Linear::packed_bytes)
            + norms
    }
}

/// A layer's feed-forward sublayer.
pub enum Ffn {
    /// One MLP for every token.
    Dense(Mlp),
    /// A mixture of experts.
    Moe(Moe),
}

impl Ffn {
    /// `proj` `(N, d)` from `h` `(N, d)`.
    pub fn forward(&self, cx: &mut Cx<'_, '_>) -> Result<(), ModelError> {
        match self {
            Ffn::Dense(m) => m.forward(cx),
            Ffn::Moe(m) => m.forward(cx),
        }
    }

    /// Bytes its weights hold.
    pub fn weight_bytes(&self) -> usize {
        match self {
            Ffn::Dense(m) => m.weight_bytes(),
            Ffn::Moe(m) => m.weight_bytes(),
        }
    }

    /// The projections a LoRA adapter may adapt: a dense MLP's gate, up and down (a
    /// mixture's experts and router take none).
    pub fn adaptable(&self, out: &mut Vec<tl_core::Adaptable>) {
        if let Ffn::Dense(m) = self {
            m.lora.adaptable(out);
        }
    }
}

/// The pre-norm layer (Llama, Qwen2, Qwen3, Mistral and the mixtures of experts):
/// `x += attn(norm_in(x)); x += ffn(norm_post(x))`.
pub struct PreNorm {
    /// `(d,)` RMSNorm weight before attention (`input_layernorm`).
    pub input_norm: Vec<f32>,
    /// The attention sublayer.
    pub attn: AttnBlock,
    /// `(d,)` RMSNorm weight before the feed-forward (`post_attention_layernorm`).
    pub post_norm: Vec<f32>,
    /// The feed-forward sublayer.
    pub ffn: Ffn,
}

impl PreNorm {
    /// The two norms of layer prefix `p` (`model.layers.N`) under Hugging Face's names,
    /// around the given sublayers.
    pub fn load(w: &Loader<'_>, p: &str, d: usize, attn: AttnBlock, ffn: Ffn) -> Result<PreNorm, ModelError> {
        Ok(PreNorm {
            input_norm: w.vector(&format!("{p}.input_layernorm.weight"), d)?,
            attn,
            post_norm: w.vector(&format!("{p}.post_attention_layernorm.weight"), d)?,
            ffn,
        })
    }
}

impl LayerBody for PreNorm {
    fn forward(&self, layer: u32, cx: &mut Cx<'_, '_>) -> Result<(), ModelError> {
        cx.norm_x(&self.input_norm); // h = norm(x)
        self.attn.forward(layer, cx)?; // proj = attn(h)
        cx.add_proj(); // x += proj
        cx.norm_x(&self.post_norm);
        self.ffn.forward(cx)?;
        cx.add_proj();
        Ok(())
    }

    fn weight_bytes(&self) -> usize {
        f32_bytes(&self.input_norm) + self.attn.weight_bytes() + f32_bytes(&self.post_norm) + self.ffn.weight_bytes()
    }

    fn adaptable(&self, out: &mut Vec<tl_core::Adaptable>) {
        self.attn.lora.adaptable(out);
        self.ffn.adaptable(out);
    }
}
