//! The Llama forward, one step (docs/forward.md walks through it with every shape).
//!
//! A step is a batch of sequences, each a run of new tokens at absolute positions. The N
//! tokens of the step are laid out in batch order; the hidden state is a Candle tensor
//! `(N, d)`. Per layer: RMSNorm, q/k/v projections, RoPE at the absolute positions, K and V
//! of the new tokens into the pool as f16, attention of each new token over exactly its
//! visible keys read back from the pool, o projection + residual, RMSNorm, SwiGLU MLP +
//! residual. Then the final norm and the LM head, for each sequence's last token only.
//!
//! What runs on Candle: the row-wise parts (RMSNorm, RoPE, SiLU, products, residual adds,
//! row selection). What is ours: the projections (`tl_quant::Linear`, wrapped as a Candle
//! op), the K/V writes and the attention over the paged f16 pool.
//!
//! Batch invariance (bit for bit): every projection goes through `tl_quant::Linear`,
//! whose output elements each use one fixed summation order whatever the number of rows
//! or threads; the Candle ops used here compute each row (or element) by one function of
//! that row alone; attention of token t reads exactly keys `0..=pos(t)` of its own
//! sequence, in ascending order. So nothing a token computes depends on the other tokens
//! of the step, nor on how rayon splits the work.

use candle_core::{CpuStorage, CustomOp1, Device, Layout, Shape, Storage, Tensor};
use candle_nn::ops::rms_norm;
use candle_nn::rotary_emb::rope_thd;
use rayon::prelude::*;
use tl_core::{ForwardBatch, ForwardCtx, ForwardOutput, KvBackend, Logits, Model, ModelError};
use tl_quant::{f16_to_f32, f32_to_f16, Linear};

use crate::config::LlamaConfig;
use crate::weights::LlamaWeights;

/// A loaded Llama: immutable weights; per-sequence state lives in the KV pool.
pub struct Llama {
    cfg: LlamaConfig,
    w: LlamaWeights,
    /// `(1, D/2)` RoPE inverse frequencies `theta^(-2i/D)`, i ascending, as Hugging Face
    /// computes them in f32: `1 / theta^(f32(2i) / f32(D))`.
    inv_freq: Tensor,
    /// Where the step's tensors live (the CPU: the projections and attention are CPU code).
    device: Device,
}

impl Llama {
    pub(crate) fn new(cfg: LlamaConfig, w: LlamaWeights, device: &Device) -> Result<Llama, ModelError> {
        if !device.is_cpu() {
            return Err(ModelError::Other(format!("the Llama forward runs on the CPU, not {device:?}")));
        }
        let d = cfg.head_dim;
        let inv_freq: Vec<f32> = (0..d / 2).map(|i| 1.0 / cfg.rope_theta.powf((2 * i) as f32 / d as f32)).collect();
        let inv_freq = Tensor::from_vec(inv_freq, (1, d / 2), device)?;
        Ok(Llama { cfg, w, inv_freq, device: device.clone() })
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

/// A projection as a Candle op: `(N, in)` -> `(N, out)` through `tl_quant::Linear`. Not
/// `Tensor::matmul`: Candle's CPU matmul picks its kernel, and so its summation order, from
/// the number of rows, which would make a token's result depend on its neighbours.
struct Project<'a> {
    lin: &'a Linear,
    what: &'static str,
}

impl CustomOp1 for Project<'_> {
    fn name(&self) -> &'static str {
        "tl-linear"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, inp) = layout.shape().dims2()?;
        let x = match (storage, layout.contiguous_offsets()) {
            (CpuStorage::F32(x), Some((a, b))) => &x[a..b], // (N, in), borrowed
            _ => candle_core::bail!("{}: input is not contiguous f32", self.what),
        };
        if inp != self.lin.inp() {
            candle_core::bail!("{}: input has {inp} features, the weights {}", self.what, self.lin.inp());
        }
        let mut y = vec![0.0f32; n * self.lin.out()]; // (N, out)
        self.lin.forward(x, n, &mut y).map_err(|e| candle_core::Error::msg(format!("{}: {e}", self.what)))?;
        Ok((CpuStorage::F32(y), Shape::from((n, self.lin.out()))))
    }
}

/// `x W^T` for a `(N, in)` tensor.
fn project(x: &Tensor, lin: &Linear, what: &'static str) -> Result<Tensor, ModelError> {
    Ok(x.apply_op1_no_bwd(&Project { lin, what })?)
}

/// Run `f` over the data of a contiguous f32 CPU tensor, borrowed (no copy).
fn with_f32<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> Result<R, ModelError>) -> Result<R, ModelError> {
    let (storage, layout) = t.storage_and_layout();
    match (&*storage, layout.contiguous_offsets()) {
        (Storage::Cpu(CpuStorage::F32(v)), Some((a, b))) => f(&v[a..b]),
        _ => Err(ModelError::Other(format!("expected a contiguous f32 CPU tensor, got {:?}", t.shape()))),
    }
}

/// Write each token's K and V (`(N, H_kv * D)`, f32) into its sequence's blocks as f16:
/// position j goes to block `blocks[j / B]`, slot `j % B`, head h at `(h * B + slot) * D`.
fn write_kv(
    kv: &mut dyn KvBackend,
    layer: u32,
    batch: &ForwardBatch,
    plan: &Plan,
    k: &Tensor,
    v: &Tensor,
) -> Result<(), ModelError> {
    with_f32(k, |k| with_f32(v, |v| write_kv_rows(kv, layer, batch, plan, k, v)))
}

fn write_kv_rows(
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
/// `q` is `(N, H * D)` after RoPE; so is the result. Query head h reads KV head
/// `h / (H / H_kv)`. Keys are visited in ascending position, so the sums of token t are
/// the same whatever else shares the step.
fn attention(
    kv: &dyn KvBackend,
    layer: u32,
    batch: &ForwardBatch,
    plan: &Plan,
    cfg: &LlamaConfig,
    q: &Tensor,
) -> Result<Tensor, ModelError> {
    let mut out = vec![0.0f32; q.elem_count()]; // (N, H * D), heads concatenated
    with_f32(q, |q| attend(kv, layer, batch, plan, cfg, q, &mut out))?;
    Ok(Tensor::from_vec(out, q.shape(), q.device())?)
}

fn attend(
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

impl Model for Llama {
    fn hidden_size(&self) -> usize {
        self.cfg.hidden_size
    }

    fn forward(&self, batch: &ForwardBatch, ctx: &mut ForwardCtx<'_>) -> Result<ForwardOutput, ModelError> {
        let cfg = &self.cfg;
        let plan = Plan::new(batch, cfg, &*ctx.kv)?;
        let (n, dev) = (plan.pos.len(), &self.device);
        let (dm, hd, eps) = (cfg.hidden_size, cfg.head_dim, cfg.rms_norm_eps);
        let (heads, kv_heads) = (cfg.num_attention_heads, cfg.num_key_value_heads);

        // Embedding rows of the tokens. A plain gather: with tied embeddings the table is
        // the LM head's `Linear` weights, which a Candle `embedding` could only read from
        // a second copy of the (V, d) table.
        let table = self.w.embedding(); // (V, d), widened a row at a time
        let mut rows = vec![0.0f32; n * dm]; // (N, d)
        let ids = batch.seqs.iter().flat_map(|s| s.tokens.iter());
        for (row, &t) in rows.chunks_exact_mut(dm).zip(ids) {
            table.row(t as usize, row).map_err(|e| ModelError::Other(format!("embedding: {e}")))?;
        }
        let mut x = Tensor::from_vec(rows, (n, dm), dev)?; // (N, d) the residual stream

        // RoPE angles per token, (N, D/2): f32(pos) * inv_freq, in f32 as Hugging Face.
        let pos: Vec<f32> = plan.pos.iter().map(|&p| p as f32).collect();
        let angles = Tensor::from_vec(pos, (n, 1), dev)?.broadcast_mul(&self.inv_freq)?;
        // (N, 1, D/2): rope_thd's per-batch-row tables, so each token has its own position.
        let cos = angles.cos()?.reshape((n, 1, hd / 2))?;
        let sin = angles.sin()?.reshape((n, 1, hd / 2))?;
        // Each token is a "batch" of one position: (N, 1, heads, D) in, the same out.
        let rope = |t: Tensor, h: usize| -> Result<Tensor, ModelError> {
            Ok(rope_thd(&t.reshape((n, 1, h, hd))?, &cos, &sin)?.reshape((n, h * hd))?)
        };

        for (l, layer) in self.w.layers.iter().enumerate() {
            let li = l as u32;
            let h = rms_norm(&x, &layer.input_norm, eps)?; // (N, d)
            let q = rope(project(&h, &layer.q, "q_proj")?, heads)?; // (N, H * D)
            let k = rope(project(&h, &layer.k, "k_proj")?, kv_heads)?; // (N, H_kv * D)
            let v = project(&h, &layer.v, "v_proj")?; // (N, H_kv * D)
            write_kv(&mut *ctx.kv, li, batch, &plan, &k, &v)?;
            let att = attention(&*ctx.kv, li, batch, &plan, cfg, &q)?; // (N, H * D)
            x = (x + project(&att, &layer.o, "o_proj")?)?; // (N, d)

            let h = rms_norm(&x, &layer.post_norm, eps)?; // (N, d)
            let gate = project(&h, &layer.gate, "gate_proj")?; // (N, I)
            let up = project(&h, &layer.up, "up_proj")?; // (N, I)
            let act = (gate.silu()? * up)?; // (N, I) SwiGLU: silu(gate) * up
            x = (x + project(&act, &layer.down, "down_proj")?)?; // (N, d)
        }

        // Final norm: every token when the caller wants hidden states, else only each
        // sequence's last token (the only rows the LM head needs).
        let s_rows = plan.last.len();
        let last_ids: Vec<u32> = plan.last.iter().map(|&t| t as u32).collect();
        let last_ids = Tensor::from_vec(last_ids, s_rows, dev)?; // (S,)
        let (last, hidden) = if ctx.want_hidden {
            let normed = rms_norm(&x, &self.w.norm, eps)?; // (N, d)
            (normed.index_select(&last_ids, 0)?, Some(normed.flatten_all()?.to_vec1::<f32>()?))
        } else {
            (rms_norm(&x.index_select(&last_ids, 0)?, &self.w.norm, eps)?, None)
        }; // last: (S, d)
        let vocab = cfg.vocab_size;
        let mut logits = vec![0.0f32; s_rows * vocab]; // (S, V), straight into the output
        with_f32(&last, |last| {
            self.w.lm_head.forward(last, s_rows, &mut logits).map_err(|e| ModelError::Other(format!("lm_head: {e}")))
        })?;
        Ok(ForwardOutput { logits: Logits { vocab, data: logits }, hidden })
    }
}
