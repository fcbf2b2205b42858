//! The decoder forward (Llama, and Qwen2's q/k/v biases), one step (docs/forward.md walks through it with every shape).
//!
//! A step is a batch of sequences, each a run of new tokens at absolute positions. The N
//! tokens of the step are laid out in batch order; every per-token buffer is `(N, ...)`,
//! row-major, and lives in [`Buffers`], kept between steps. Per layer: RMSNorm, the fused
//! q/k/v projection, RoPE at the absolute positions, K and V of the new tokens into the
//! pool as f16, attention of each new token over exactly its visible keys read back from
//! the pool, o projection + residual, RMSNorm, fused gate/up projection, SwiGLU, down
//! projection + residual. Then the final norm and the LM head, for each sequence's last
//! token only.
//!
//! Everything is ours, on plain slices: the projections are `tl_quant::Linear`; RMSNorm,
//! RoPE, SwiGLU and the adds are `rowops`; the K/V writes and attention are `attention`.
//!
//! Batch invariance (bit for bit): every projection goes through `tl_quant::Linear`,
//! whose output elements each use one fixed summation order whatever the number of rows
//! or threads; the row-wise steps compute each row by one function of that row alone;
//! attention of token t reads exactly keys `0..=pos(t)` of its own sequence, in ascending
//! order. So nothing a token computes depends on the other tokens of the step, nor on
//! how rayon splits the work, nor (`crate::lanes`) on the instruction set.

use std::sync::Mutex;

use candle_core::{Device, Tensor};
use tl_core::{ForwardBatch, ForwardCtx, ForwardOutput, KvSlabs, Logits, Model, ModelError};
use tl_quant::Linear;

use crate::attention::{attention, write_kv};
use crate::config::DecoderConfig;
use crate::lanes::Path;
use crate::rowops::{add, rms_norm, rope, rope_tables, swiglu};
use crate::weights::{DecoderWeights, Layer};

/// Projections that read the same input, run as one product when they can be stacked.
enum Proj {
    /// `Linear::concat` of the parts: one product, outputs side by side.
    Fused(Linear),
    /// Parts that cannot be stacked (a part's outputs not a multiple of 16, or different
    /// storage): run one by one and copied side by side.
    Split(Vec<Linear>),
}

impl Proj {
    /// Stack `parts` when `Linear::concat` can; the results are the same bits either way,
    /// since each output element's FMA chain does not change.
    fn new(parts: Vec<Linear>) -> Proj {
        let refs: Vec<&Linear> = parts.iter().collect();
        match Linear::concat(&refs) {
            Ok(l) => Proj::Fused(l),
            Err(_) => Proj::Split(parts),
        }
    }

    /// Bytes the parts hold.
    fn packed_bytes(&self) -> usize {
        match self {
            Proj::Fused(l) => l.packed_bytes(),
            Proj::Split(ls) => ls.iter().map(Linear::packed_bytes).sum(),
        }
    }

    /// Total outputs.
    fn out(&self) -> usize {
        match self {
            Proj::Fused(l) => l.out(),
            Proj::Split(ls) => ls.iter().map(Linear::out).sum(),
        }
    }

    /// `y = x W^T` for `x` `(n, in)`, `y` `(n, out)` with the parts' outputs side by side;
    /// `tmp` is scratch for the split case.
    fn forward(&self, x: &[f32], n: usize, y: &mut [f32], tmp: &mut Vec<f32>, what: &str) -> Result<(), ModelError> {
        let err = |e| ModelError::Other(format!("{what}: {e}"));
        match self {
            Proj::Fused(l) => l.forward(x, n, y).map_err(err),
            Proj::Split(ls) => {
                let out = self.out();
                let mut col = 0;
                for l in ls {
                    let o = l.out();
                    tmp.resize(n * o, 0.0);
                    l.forward(x, n, tmp).map_err(err)?;
                    for (dst, src) in y.chunks_exact_mut(out).zip(tmp.chunks_exact(o)) {
                        dst[col..col + o].copy_from_slice(src);
                    }
                    col += o;
                }
                Ok(())
            }
        }
    }
}

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
    /// `(N, D/2)` RoPE tables of each token.
    cos: Vec<f32>,
    sin: Vec<f32>,
    /// Scratch for projections that could not be fused.
    tmp: Vec<f32>,
}

/// `v[..len]`, grown (never shrunk) to `len`; contents are overwritten by the caller.
fn grow(v: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if v.len() < len {
        v.resize(len, 0.0);
    }
    &mut v[..len]
}

/// A loaded decoder: immutable weights; per-sequence state lives in the KV pool.
pub struct Decoder {
    cfg: DecoderConfig,
    /// Embedding, final norm and LM head (the layers moved into `layers`).
    w: DecoderWeights,
    layers: Vec<LayerW>,
    /// `(d,)` final RMSNorm weight.
    norm: Vec<f32>,
    /// `(D/2,)` RoPE inverse frequencies `theta^(-2i/D)`, i ascending, as Hugging Face
    /// computes them in f32: `1 / theta^(f32(2i) / f32(D))`.
    inv_freq: Vec<f32>,
    /// The step's buffers; a lock because `forward` takes `&self` (steps do not overlap
    /// in practice; a second concurrent step would wait).
    bufs: Mutex<Buffers>,
}

fn norm_vec(t: &Tensor) -> Result<Vec<f32>, ModelError> {
    Ok(t.to_vec1::<f32>()?)
}

impl Decoder {
    pub(crate) fn new(cfg: DecoderConfig, mut w: DecoderWeights, device: &Device) -> Result<Decoder, ModelError> {
        if !device.is_cpu() {
            return Err(ModelError::Other(format!("the decoder forward runs on the CPU, not {device:?}")));
        }
        let d = cfg.head_dim;
        let inv_freq: Vec<f32> = (0..d / 2).map(|i| 1.0 / cfg.rope_theta.powf((2 * i) as f32 / d as f32)).collect();
        let layers = std::mem::take(&mut w.layers)
            .into_iter()
            .map(|l: Layer| -> Result<LayerW, ModelError> {
                Ok(LayerW {
                    input_norm: norm_vec(&l.input_norm)?,
                    qkv: Proj::new(vec![l.q, l.k, l.v]),
                    qkv_bias: l.qkv_bias,
                    o: l.o,
                    post_norm: norm_vec(&l.post_norm)?,
                    gate_up: Proj::new(vec![l.gate, l.up]),
                    down: l.down,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let norm = norm_vec(&w.norm)?;
        Ok(Decoder { cfg, w, layers, norm, inv_freq, bufs: Mutex::new(Buffers::default()) })
    }
}

/// Where each token of the step sits, checked before anything is written.
pub(crate) struct Plan {
    /// `(N,)` the sequence of each token.
    pub(crate) seq_of: Vec<usize>,
    /// `(N,)` absolute position of each token.
    pub(crate) pos: Vec<usize>,
    /// `(S,)` index in the step of each sequence's last token.
    pub(crate) last: Vec<usize>,
    /// `(S,)` blocks each sequence reads: `ceil((start + n) / B)`.
    pub(crate) n_blocks: Vec<usize>,
}

fn bad(msg: String) -> ModelError {
    ModelError::BadBatch(msg)
}

impl Plan {
    /// The runner checks batches in full (context length, block references); this repeats
    /// only what the forward needs to index safely, and runs before any slab is touched,
    /// so a bad batch reaching the model directly is an `Err`, never a panic or half a
    /// write.
    fn new(batch: &ForwardBatch, cfg: &DecoderConfig, kv: &dyn KvSlabs) -> Result<Plan, ModelError> {
        let g = kv.geometry();
        let want = (cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim);
        if (g.n_layers as usize, g.n_kv_heads as usize, g.head_dim as usize) != want || g.block_tokens == 0 {
            return Err(ModelError::Other(format!(
                "KV pool geometry {g:?} does not fit the model (layers, kv heads, head dim) = {want:?}"
            )));
        }
        let b = g.block_tokens as usize;
        if batch.seqs.is_empty() {
            return Err(bad("no sequences".into()));
        }
        let mut plan = Plan { seq_of: Vec::new(), pos: Vec::new(), last: Vec::new(), n_blocks: Vec::new() };
        for (i, s) in batch.seqs.iter().enumerate() {
            if s.tokens.is_empty() {
                return Err(bad(format!("sequence {i} has no tokens")));
            }
            if let Some(&t) = s.tokens.iter().find(|&&t| t as usize >= cfg.vocab_size) {
                return Err(bad(format!("sequence {i}: token id {t} >= vocab_size {}", cfg.vocab_size)));
            }
            let end =
                s.start.checked_add(s.tokens.len()).ok_or_else(|| bad(format!("sequence {i}: start overflows")))?;
            let needed = end.div_ceil(b);
            if s.blocks.len() < needed {
                return Err(bad(format!("sequence {i}: {} blocks cannot hold position {}", s.blocks.len(), end - 1)));
            }
            for &id in &s.blocks[..needed] {
                kv.slab(id, 0, false)?; // an id the pool cannot serve is an Err here, before any write
            }
            plan.seq_of.extend(std::iter::repeat_n(i, s.tokens.len()));
            plan.pos.extend(s.start..end);
            plan.last.push(plan.pos.len() - 1);
            plan.n_blocks.push(needed);
        }
        Ok(plan)
    }
}

impl Model for Decoder {
    fn hidden_size(&self) -> usize {
        self.cfg.hidden_size
    }

    fn weight_bytes(&self) -> Option<usize> {
        let f32s = |v: &[f32]| std::mem::size_of_val(v);
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                l.qkv.packed_bytes()
                    + l.o.packed_bytes()
                    + l.gate_up.packed_bytes()
                    + l.down.packed_bytes()
                    + f32s(&l.input_norm)
                    + l.qkv_bias.as_deref().map_or(0, f32s)
                    + f32s(&l.post_norm)
            })
            .sum();
        let embed = match &self.w.embed {
            crate::weights::Embedding::Own(t) => t.packed_bytes(),
            crate::weights::Embedding::Tied => 0,
        };
        Some(layers + embed + self.w.lm_head.packed_bytes() + f32s(&self.norm) + f32s(&self.inv_freq))
    }

    fn forward(&self, batch: &ForwardBatch, ctx: &mut ForwardCtx<'_>) -> Result<ForwardOutput, ModelError> {
        let cfg = &self.cfg;
        let plan = Plan::new(batch, cfg, &*ctx.kv)?;
        let path = Path::best();
        let n = plan.pos.len();
        let (dm, hd, eps, inter) = (cfg.hidden_size, cfg.head_dim, cfg.rms_norm_eps, cfg.intermediate_size);
        let (heads, kv_heads) = (cfg.num_attention_heads, cfg.num_key_value_heads);
        let (qw, kvw) = (heads * hd, kv_heads * hd);
        let qkv_w = qw + 2 * kvw; // q at 0, k at qw, v at qw + kvw

        // A panic elsewhere while holding the lock leaves only stale numbers, which every
        // step overwrites before reading.
        let mut guard = self.bufs.lock().unwrap_or_else(|e| e.into_inner());
        let b = &mut *guard;

        // Embedding rows of the tokens: with tied embeddings the table is the LM head's
        // `Linear` weights, widened a row at a time.
        let table = self.w.embedding(); // (V, d)
        let x = grow(&mut b.x, n * dm); // (N, d) the residual stream
        let ids = batch.seqs.iter().flat_map(|s| s.tokens.iter());
        for (row, &t) in x.chunks_exact_mut(dm).zip(ids) {
            table.row(t as usize, row).map_err(|e| ModelError::Other(format!("embedding: {e}")))?;
        }
        rope_tables(&plan.pos, &self.inv_freq, &mut b.cos, &mut b.sin); // (N, D/2) each

        for (l, layer) in self.layers.iter().enumerate() {
            let li = l as u32;
            let x = &mut b.x[..n * dm];
            let h = grow(&mut b.h, n * dm);
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
            rope(qkv, qkv_w, 0, heads + kv_heads, hd, &b.cos, &b.sin); // q and k heads
            write_kv(path, &mut *ctx.kv, li, batch, &plan, qkv, qkv_w, (qw, qw + kvw))?;
            let att = grow(&mut b.att, n * qw); // (N, H*D)
            attention(path, &*ctx.kv, li, batch, &plan, (heads, kv_heads, hd), qkv, qkv_w, att)?;
            let proj = grow(&mut b.proj, n * dm); // (N, d)
            layer.o.forward(att, n, proj).map_err(|e| ModelError::Other(format!("o_proj: {e}")))?;
            add(x, proj, dm);

            rms_norm(path, x, &layer.post_norm, eps, h);
            let gu = grow(&mut b.gu, n * 2 * inter); // (N, 2I) gate | up
            layer.gate_up.forward(h, n, gu, &mut b.tmp, "gate_up_proj")?;
            let act = grow(&mut b.act, n * inter); // (N, I)
            swiglu(path, gu, act, inter);
            layer.down.forward(act, n, proj).map_err(|e| ModelError::Other(format!("down_proj: {e}")))?;
            add(x, proj, dm);
        }

        // Final norm: every token when the caller wants hidden states, else only the rows
        // the LM head needs (each sequence's last token, or every token with
        // `all_logits`). Each row is normed and projected by functions of that row alone,
        // so a token's logits are the same bits whichever rows are asked for.
        let x = &b.x[..n * dm];
        let all: Vec<usize>;
        let rows: &[usize] = if ctx.all_logits {
            all = (0..n).collect();
            &all
        } else {
            &plan.last
        };
        let s_rows = rows.len();
        let mut last = vec![0.0f32; s_rows * dm]; // (R, d)
        let hidden = if ctx.want_hidden {
            let mut normed = vec![0.0f32; n * dm]; // (N, d)
            rms_norm(path, x, &self.norm, eps, &mut normed);
            for (dst, &t) in last.chunks_exact_mut(dm).zip(rows) {
                dst.copy_from_slice(&normed[t * dm..(t + 1) * dm]);
            }
            Some(normed)
        } else {
            let h = grow(&mut b.h, s_rows * dm);
            for (dst, &t) in h.chunks_exact_mut(dm).zip(rows) {
                dst.copy_from_slice(&x[t * dm..(t + 1) * dm]);
            }
            rms_norm(path, h, &self.norm, eps, &mut last);
            None
        };
        let vocab = cfg.vocab_size;
        let mut logits = vec![0.0f32; s_rows * vocab]; // (R, V), straight into the output
        self.w.lm_head.forward(&last, s_rows, &mut logits).map_err(|e| ModelError::Other(format!("lm_head: {e}")))?;
        Ok(ForwardOutput { logits: Logits { vocab, data: logits }, hidden })
    }
}
