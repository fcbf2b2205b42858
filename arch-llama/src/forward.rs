//! The Llama forward, one step (docs/forward.md walks through it with every shape).
//!
//! A step is a batch of sequences, each a run of new tokens at absolute positions. The N
//! tokens of the step are laid out in batch order; every per-token buffer is `(N, ...)`.
//! Per layer: RMSNorm, q/k/v projections, RoPE at the absolute positions, K and V of the
//! new tokens into the pool as f16, attention of each new token over exactly its visible
//! keys read back from the pool, o projection + residual, RMSNorm, SwiGLU MLP + residual.
//! Then the final norm and the LM head, for each sequence's last token only.
//!
//! Batch invariance (bit for bit): every projection goes through `tl_quant::Linear`,
//! whose output elements each use one fixed summation order whatever the number of rows
//! or threads; norms, RoPE and SwiGLU are per token; attention of token t reads exactly
//! keys `0..=pos(t)` of its own sequence, in ascending order. So nothing a token computes
//! depends on the other tokens of the step, nor on how rayon splits the work.

use rayon::prelude::*;
use tl_core::{ForwardBatch, ForwardCtx, ForwardOutput, KvBackend, Logits, Model, ModelError};
use tl_quant::{f16_to_f32, f32_to_f16, Linear};

use crate::config::LlamaConfig;
use crate::weights::LlamaWeights;

/// A loaded Llama: immutable weights; per-sequence state lives in the KV pool.
pub struct Llama {
    cfg: LlamaConfig,
    w: LlamaWeights,
    /// `(D/2,)` RoPE inverse frequencies `theta^(-2i/D)`, i ascending, as Hugging Face
    /// computes them in f32: `1 / theta^(f32(2i) / f32(D))`.
    inv_freq: Vec<f32>,
}

impl Llama {
    pub(crate) fn new(cfg: LlamaConfig, w: LlamaWeights) -> Llama {
        let d = cfg.head_dim;
        let inv_freq = (0..d / 2).map(|i| 1.0 / cfg.rope_theta.powf((2 * i) as f32 / d as f32)).collect();
        Llama { cfg, w, inv_freq }
    }
}

/// Where each token of the step sits, checked before anything is written.
struct Plan {
    /// `(N,)` the sequence of each token.
    seq_of: Vec<usize>,
    /// `(N,)` absolute position of each token.
    pos: Vec<usize>,
    /// `(S,)` index in the step of each sequence's last token.
    last: Vec<usize>,
    /// `(S,)` blocks each sequence reads: `ceil((start + n) / B)`.
    n_blocks: Vec<usize>,
}

fn bad(msg: String) -> ModelError {
    ModelError::BadBatch(msg)
}

impl Plan {
    /// The runner checks batches in full (context length, block references); this repeats
    /// only what the forward needs to index safely, and runs before any slab is touched,
    /// so a bad batch reaching the model directly is an `Err`, never a panic or half a
    /// write.
    fn new(batch: &ForwardBatch, cfg: &LlamaConfig, kv: &dyn KvBackend) -> Result<Plan, ModelError> {
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
                kv.refs(id)?; // an id outside the pool is an Err here, before any write
            }
            plan.seq_of.extend(std::iter::repeat(i).take(s.tokens.len()));
            plan.pos.extend(s.start..end);
            plan.last.push(plan.pos.len() - 1);
            plan.n_blocks.push(needed);
        }
        Ok(plan)
    }
}

/// A slab of the expected length (a backend's contract; checked so a broken backend is an
/// `Err` rather than an out-of-bounds panic).
fn checked(slab: &[u16], id: u32, len: usize) -> Result<&[u16], ModelError> {
    if slab.len() != len {
        return Err(ModelError::Other(format!("KV block {id}: slab holds {} values, expected {len}", slab.len())));
    }
    Ok(slab)
}

fn linear(lin: &Linear, x: &[f32], m: usize, y: &mut [f32], what: &str) -> Result<(), ModelError> {
    lin.forward(x, m, y).map_err(|e| ModelError::Other(format!("{what}: {e}")))
}

/// `out = x / sqrt(mean(x^2) + eps) * w`, row by row, in Hugging Face's f32 order.
fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    out.par_chunks_mut(d).zip(x.par_chunks(d)).for_each(|(o, x)| {
        let sum_sq = x.iter().fold(0.0f32, |a, &v| a + v * v);
        let r = 1.0 / (sum_sq / d as f32 + eps).sqrt();
        for ((o, &v), &wi) in o.iter_mut().zip(x).zip(w) {
            *o = wi * (v * r);
        }
    });
}

/// Rotate each head of each token by its position (half-split layout, Hugging Face's
/// `x * cos + rotate_half(x) * sin`). `x` is `(N, heads * D)`, `cos`/`sin` `(N, D/2)`.
fn rope(x: &mut [f32], heads: usize, d: usize, cos: &[f32], sin: &[f32]) {
    let half = d / 2;
    x.par_chunks_mut(heads * d).enumerate().for_each(|(t, row)| {
        let (c, s) = (&cos[t * half..(t + 1) * half], &sin[t * half..(t + 1) * half]);
        for head in row.chunks_exact_mut(d) {
            let (lo, hi) = head.split_at_mut(half);
            for i in 0..half {
                let (a, b) = (lo[i], hi[i]);
                lo[i] = a * c[i] + (-b) * s[i];
                hi[i] = b * c[i] + a * s[i];
            }
        }
    });
}

/// Write each token's K and V (`(N, H_kv * D)`, f32) into its sequence's blocks as f16:
/// position j goes to block `blocks[j / B]`, slot `j % B`, head h at `(h * B + slot) * D`.
fn write_kv(
    kv: &mut dyn KvBackend,
    layer: u32,
    batch: &ForwardBatch,
    plan: &Plan,
    k: &[f32],
    v: &[f32],
) -> Result<(), ModelError> {
    let g = kv.geometry();
    let (b, hd) = (g.block_tokens as usize, g.head_dim as usize);
    let width = g.n_kv_heads as usize * hd;
    let slab_len = g.slab_elems().unwrap_or(0);
    for (t, (&s, &p)) in plan.seq_of.iter().zip(&plan.pos).enumerate() {
        let (id, slot) = (batch.seqs[s].blocks[p / b], p % b);
        for (src, is_v) in [(k, false), (v, true)] {
            let slab = kv.slab_mut(id, layer, is_v)?;
            if slab.len() != slab_len {
                return Err(ModelError::Other(format!(
                    "KV block {id}: slab holds {} values, expected {slab_len}",
                    slab.len()
                )));
            }
            for (h, row) in src[t * width..(t + 1) * width].chunks_exact(hd).enumerate() {
                let off = g.offset(h, slot);
                for (dst, &x) in slab[off..off + hd].iter_mut().zip(row) {
                    *dst = f32_to_f16(x);
                }
            }
        }
    }
    Ok(())
}

/// One sequence's K slabs and V slabs of one layer, in block-table order.
type KvSlabs<'a> = (Vec<&'a [u16]>, Vec<&'a [u16]>);

/// Attention of every new token over exactly its visible keys, read back from the pool.
/// `q` is `(N, H * D)` after RoPE; `out` is `(N, H * D)`. Query head h reads KV head
/// `h / (H / H_kv)`. Keys are visited in ascending position, so the sums of token t are
/// the same whatever else shares the step.
fn attention(
    kv: &dyn KvBackend,
    layer: u32,
    batch: &ForwardBatch,
    plan: &Plan,
    cfg: &LlamaConfig,
    q: &[f32],
    out: &mut [f32],
) -> Result<(), ModelError> {
    let g = kv.geometry();
    let b = g.block_tokens as usize;
    let (heads, d) = (cfg.num_attention_heads, cfg.head_dim);
    let group = heads / cfg.num_key_value_heads;
    let slab_len = g.slab_elems().unwrap_or(0);
    // Per sequence, the K and V slabs of the blocks it reads, in table order. The
    // backend is not Sync; its slabs are, so the workers share these slices.
    let mut slabs: Vec<KvSlabs> = Vec::with_capacity(batch.seqs.len());
    for (s, &n) in batch.seqs.iter().zip(&plan.n_blocks) {
        let mut ks = Vec::with_capacity(n);
        let mut vs = Vec::with_capacity(n);
        for &id in &s.blocks[..n] {
            ks.push(checked(kv.slab(id, layer, false)?, id, slab_len)?);
            vs.push(checked(kv.slab(id, layer, true)?, id, slab_len)?);
        }
        slabs.push((ks, vs));
    }
    let scale = 1.0 / (d as f32).sqrt();
    // One task per (token, query head); `scores` is per-worker scratch of (pos + 1,).
    out.par_chunks_mut(d).enumerate().for_each_init(Vec::new, |scores: &mut Vec<f32>, (i, o)| {
        let (t, h) = (i / heads, i % heads);
        let (ks, vs) = &slabs[plan.seq_of[t]];
        let qh = &q[i * d..(i + 1) * d];
        let at = |j: usize| (j / b, g.offset(h / group, j % b));
        scores.clear();
        for j in 0..=plan.pos[t] {
            let (blk, off) = at(j);
            let dot = qh.iter().zip(&ks[blk][off..off + d]).fold(0.0f32, |a, (&x, &k)| a + x * f16_to_f32(k));
            scores.push(dot * scale);
        }
        let max = scores.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        let mut sum = 0.0f32;
        for x in scores.iter_mut() {
            *x = (*x - max).exp();
            sum += *x;
        }
        o.fill(0.0);
        for (j, &e) in scores.iter().enumerate() {
            let p = e / sum;
            let (blk, off) = at(j);
            for (o, &v) in o.iter_mut().zip(&vs[blk][off..off + d]) {
                *o += p * f16_to_f32(v);
            }
        }
    });
    Ok(())
}

fn add(x: &mut [f32], y: &[f32]) {
    x.par_iter_mut().zip(y.par_iter()).for_each(|(x, &y)| *x += y);
}

/// `gate = silu(gate) * up`, element by element.
fn swiglu(gate: &mut [f32], up: &[f32]) {
    gate.par_iter_mut().zip(up.par_iter()).for_each(|(g, &u)| *g = *g / (1.0 + (-*g).exp()) * u);
}

impl Model for Llama {
    fn hidden_size(&self) -> usize {
        self.cfg.hidden_size
    }

    fn forward(&self, batch: &ForwardBatch, ctx: &mut ForwardCtx<'_>) -> Result<ForwardOutput, ModelError> {
        let cfg = &self.cfg;
        let plan = Plan::new(batch, cfg, &*ctx.kv)?;
        let n = plan.pos.len();
        let (dm, hd, eps) = (cfg.hidden_size, cfg.head_dim, cfg.rms_norm_eps);
        let (qw, kvw, inter) = (cfg.q_width(), cfg.kv_width(), cfg.intermediate_size);

        // Embedding lookup: (N, d).
        let table = self.w.embedding()?;
        let mut x = Vec::with_capacity(n * dm);
        for s in &batch.seqs {
            for &t in s.tokens {
                x.extend_from_slice(&table[t as usize * dm..(t as usize + 1) * dm]);
            }
        }

        // RoPE angles per token: inv_freq * pos in f32, as Hugging Face. (N, D/2) each.
        let half = hd / 2;
        let mut cos = vec![0.0f32; n * half];
        let mut sin = vec![0.0f32; n * half];
        for (t, &p) in plan.pos.iter().enumerate() {
            for (i, &f) in self.inv_freq.iter().enumerate() {
                let angle = f * p as f32;
                cos[t * half + i] = angle.cos();
                sin[t * half + i] = angle.sin();
            }
        }

        let mut h = vec![0.0f32; n * dm]; // (N, d) normed input of a sublayer
        let mut q = vec![0.0f32; n * qw]; // (N, H * D)
        let mut k = vec![0.0f32; n * kvw]; // (N, H_kv * D)
        let mut v = vec![0.0f32; n * kvw]; // (N, H_kv * D)
        let mut att = vec![0.0f32; n * qw]; // (N, H * D) attention output, heads concatenated
        let mut o = vec![0.0f32; n * dm]; // (N, d) a sublayer's output before the residual
        let mut gate = vec![0.0f32; n * inter]; // (N, I)
        let mut up = vec![0.0f32; n * inter]; // (N, I)

        for (l, layer) in self.w.layers.iter().enumerate() {
            let li = l as u32;
            rms_norm(&x, &layer.input_norm, eps, &mut h);
            linear(&layer.q, &h, n, &mut q, "q_proj")?;
            linear(&layer.k, &h, n, &mut k, "k_proj")?;
            linear(&layer.v, &h, n, &mut v, "v_proj")?;
            rope(&mut q, cfg.num_attention_heads, hd, &cos, &sin);
            rope(&mut k, cfg.num_key_value_heads, hd, &cos, &sin);
            write_kv(&mut *ctx.kv, li, batch, &plan, &k, &v)?;
            attention(&*ctx.kv, li, batch, &plan, cfg, &q, &mut att)?;
            linear(&layer.o, &att, n, &mut o, "o_proj")?;
            add(&mut x, &o);

            rms_norm(&x, &layer.post_norm, eps, &mut h);
            linear(&layer.gate, &h, n, &mut gate, "gate_proj")?;
            linear(&layer.up, &h, n, &mut up, "up_proj")?;
            swiglu(&mut gate, &up);
            linear(&layer.down, &gate, n, &mut o, "down_proj")?;
            add(&mut x, &o);
        }

        // Final norm: every token when the caller wants hidden states, else only each
        // sequence's last token (the only rows the LM head needs).
        let s_rows = plan.last.len();
        let mut last = vec![0.0f32; s_rows * dm]; // (S, d)
        let hidden = if ctx.want_hidden {
            rms_norm(&x, &self.w.norm, eps, &mut h);
            for (r, &t) in plan.last.iter().enumerate() {
                last[r * dm..(r + 1) * dm].copy_from_slice(&h[t * dm..(t + 1) * dm]);
            }
            Some(h)
        } else {
            let mut rows = vec![0.0f32; s_rows * dm]; // (S, d) pre-norm
            for (r, &t) in plan.last.iter().enumerate() {
                rows[r * dm..(r + 1) * dm].copy_from_slice(&x[t * dm..(t + 1) * dm]);
            }
            rms_norm(&rows, &self.w.norm, eps, &mut last);
            None
        };
        let vocab = cfg.vocab_size;
        let mut logits = vec![0.0f32; s_rows * vocab]; // (S, V)
        linear(&self.w.lm_head, &last, s_rows, &mut logits, "lm_head")?;
        Ok(ForwardOutput { logits: Logits { vocab, data: logits }, hidden })
    }
}
