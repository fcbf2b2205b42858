//! The Llama forward (and Qwen2's q/k/v biases), one step, composed from the crate's
//! blocks; docs/forward.md walks through it with every shape.
//!
//! A step is a batch of sequences, each a run of new tokens at absolute positions. The N
//! tokens of the step are laid out in batch order ([`Plan`]); every per-token buffer is
//! `(N, ...)`, row-major, and lives in [`Buffers`], kept between steps. Per layer:
//! RMSNorm, the fused q/k/v projection (+ biases), RoPE at the absolute positions, K and V
//! of the new tokens into the pool as f16, attention of each new token over exactly its
//! visible keys read back from the pool, o projection + residual, RMSNorm, fused gate/up
//! projection, SwiGLU, down projection + residual. Then the final norm and the LM head,
//! for each sequence's last token only.
//!
//! Batch invariance (bit for bit): every projection goes through `tl_quant::Linear`,
//! whose output elements each use one fixed summation order whatever the number of rows
//! or threads; the row-wise blocks compute each row by one function of that row alone;
//! attention of token t reads exactly its visible keys of its own sequence, in ascending
//! order. So nothing a token computes depends on the other tokens of the step, nor on
//! how rayon splits the work, nor (`crate::lanes`) on the instruction set.

use std::sync::Mutex;

use candle_core::Device;
use tl_core::{ForwardBatch, ForwardCtx, ForwardOutput, Model, ModelError};
use tl_quant::Linear;

use crate::attention::{attention, write_kv, Attn, Step};
use crate::config::DecoderConfig;
use crate::head::{embed, LmHead};
use crate::lanes::Path;
use crate::plan::{Plan, StepShape};
use crate::proj::{f32_bytes, grow, linear, Proj};
use crate::rope::RopeTables;
use crate::rowops::{add, rms_norm, swiglu};
use crate::weights::{DecoderWeights, Embedding, Layer};

/// One layer's weights as the forward runs them.
struct LayerW {
    /// `(d,)`.
    input_norm: Vec<f32>,
    /// `[H*D + 2*H_kv*D, d]`: q, k, v stacked.
    qkv: Proj,
    /// `(H*D + 2*H_kv*D,)` their biases, when the family has them.
    qkv_bias: Option<Vec<f32>>,
    /// `[d, H*D]`.
    o: Linear,
    /// `(d,)`.
    post_norm: Vec<f32>,
    /// `[2*I, d]`: gate, up stacked.
    gate_up: Proj,
    /// `[d, I]`.
    down: Linear,
}

/// A step's buffers, kept between steps so a step allocates nothing once they have grown
/// to its size (the largest step seen so far).
#[derive(Default)]
struct Buffers {
    /// `(N, d)` the residual stream.
    x: Vec<f32>,
    /// `(N, d)` the RMSNorm of `x`, a sublayer's input.
    h: Vec<f32>,
    /// `(N, H*D + 2*H_kv*D)` queries, keys, values side by side.
    qkv: Vec<f32>,
    /// `(N, H*D)` attention output, heads concatenated.
    att: Vec<f32>,
    /// `(N, d)` the o and down projections' outputs, before the residual add.
    proj: Vec<f32>,
    /// `(N, 2*I)` gate and up side by side.
    gu: Vec<f32>,
    /// `(N, I)` `silu(gate) * up`.
    act: Vec<f32>,
    /// `(N, D/2)` cos and sin of each token's angles.
    rope: RopeTables,
    /// Scratch for projections that could not be fused.
    tmp: Vec<f32>,
}

/// A loaded decoder: immutable weights; per-sequence state lives in the KV pool.
pub struct Decoder {
    cfg: DecoderConfig,
    /// Embedding, final norm and LM head (the layers moved into `layers`).
    w: DecoderWeights,
    layers: Vec<LayerW>,
    /// `(D/2,)` RoPE inverse frequencies.
    inv_freq: Vec<f32>,
    /// `(L,)` each layer's attention: scale `1 / sqrt(D)`, global or windowed as the
    /// config says.
    attn: Vec<Attn>,
    /// The step's buffers; a lock because `forward` takes `&self` (steps do not overlap
    /// in practice; a second concurrent step would wait).
    bufs: Mutex<Buffers>,
}

impl Decoder {
    pub(crate) fn new(cfg: DecoderConfig, mut w: DecoderWeights, device: &Device) -> Result<Decoder, ModelError> {
        if !device.is_cpu() {
            return Err(ModelError::Other(format!("the decoder forward runs on the CPU, not {device:?}")));
        }
        let inv_freq = cfg.inv_freq();
        let global = Attn::new(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim);
        let attn = cfg.layer_attn.iter().map(|k| Attn { window: k.window(), ..global }).collect();
        let layers = std::mem::take(&mut w.layers)
            .into_iter()
            .map(|l: Layer| LayerW {
                input_norm: l.input_norm,
                qkv: Proj::new(vec![l.q, l.k, l.v]),
                qkv_bias: l.qkv_bias,
                o: l.o,
                post_norm: l.post_norm,
                gate_up: Proj::new(vec![l.gate, l.up]),
                down: l.down,
            })
            .collect();
        Ok(Decoder { cfg, w, layers, inv_freq, attn, bufs: Mutex::new(Buffers::default()) })
    }
}

impl Model for Decoder {
    fn hidden_size(&self) -> usize {
        self.cfg.hidden_size
    }

    fn weight_bytes(&self) -> Option<usize> {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                l.qkv.packed_bytes()
                    + l.o.packed_bytes()
                    + l.gate_up.packed_bytes()
                    + l.down.packed_bytes()
                    + f32_bytes(&l.input_norm)
                    + l.qkv_bias.as_deref().map_or(0, f32_bytes)
                    + f32_bytes(&l.post_norm)
            })
            .sum();
        let embed = match &self.w.embed {
            Embedding::Own(t) => t.packed_bytes(),
            Embedding::Tied => 0,
        };
        Some(layers + embed + self.w.lm_head.packed_bytes() + f32_bytes(&self.w.norm) + f32_bytes(&self.inv_freq))
    }

    fn forward(&self, batch: &ForwardBatch, ctx: &mut ForwardCtx<'_>) -> Result<ForwardOutput, ModelError> {
        let cfg = &self.cfg;
        let shape = StepShape {
            n_layers: cfg.num_hidden_layers,
            n_kv_heads: cfg.num_key_value_heads,
            head_dim: cfg.head_dim,
            vocab_size: cfg.vocab_size,
        };
        let plan = Plan::new(batch, shape, &*ctx.kv)?;
        let step = Step { path: Path::best(), batch, plan: &plan };
        let path = step.path;
        let n = plan.n_tokens();
        let (dm, eps, inter) = (cfg.hidden_size, cfg.rms_norm_eps, cfg.intermediate_size);
        let (heads, kv_heads, hd) = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim);
        let (qkv_w, qw) = ((heads + 2 * kv_heads) * hd, heads * hd);

        // A panic elsewhere while holding the lock leaves only stale numbers, which every
        // step overwrites before reading.
        let mut guard = self.bufs.lock().unwrap_or_else(|e| e.into_inner());
        let b = &mut *guard;

        embed(self.w.embedding(), batch, grow(&mut b.x, n * dm))?; // (N, d) the residual stream
        b.rope.fill(&plan.pos, &self.inv_freq); // (N, D/2) cos, sin

        for (l, (layer, attn)) in self.layers.iter().zip(&self.attn).enumerate() {
            let li = l as u32;
            let x = &mut b.x[..n * dm];
            let h = grow(&mut b.h, n * dm); // (N, d)
            rms_norm(path, x, &layer.input_norm, eps, h);
            let qkv = grow(&mut b.qkv, n * qkv_w); // (N, H*D + 2*H_kv*D)
            layer.qkv.forward(h, n, qkv, &mut b.tmp, "qkv_proj")?;
            if let Some(bias) = &layer.qkv_bias {
                // After the product, one f32 add per element (as `x W^T + b`): a function
                // of the row alone, so batch invariance holds.
                for row in qkv.chunks_exact_mut(qkv_w) {
                    for (v, &b) in row.iter_mut().zip(bias) {
                        *v += b;
                    }
                }
            }
            b.rope.apply(qkv, qkv_w, 0, heads + kv_heads); // q and k heads
            write_kv(&step, &mut *ctx.kv, li, attn, qkv)?;
            let att = grow(&mut b.att, n * qw); // (N, H*D)
            attention(&step, &*ctx.kv, li, attn, qkv, att)?;
            let proj = grow(&mut b.proj, n * dm); // (N, d)
            linear(&layer.o, att, n, proj, "o_proj")?;
            add(x, proj, dm);

            rms_norm(path, x, &layer.post_norm, eps, h);
            let gu = grow(&mut b.gu, n * 2 * inter); // (N, 2I) gate | up
            layer.gate_up.forward(h, n, gu, &mut b.tmp, "gate_up_proj")?;
            let act = grow(&mut b.act, n * inter); // (N, I)
            swiglu(path, gu, act, inter);
            linear(&layer.down, act, n, proj, "down_proj")?;
            add(x, proj, dm);
        }

        let head = LmHead { norm: &self.w.norm, eps, head: &self.w.lm_head };
        head.run(path, &b.x, &plan, ctx, &mut b.h)
    }
}
