//! Attention over the paged KV pool (f16 or q8 values), and the K/V writes into it.
//!
//! Layout (core/src/kv.rs): position `j` of a sequence lives in block `table[j / B]`, slot
//! `j % B`; KV head `g`'s key is the `D` values of row `g * B + slot` of the layer's K
//! slab (V likewise). So within a block one head's keys are consecutive rows of `D`, and
//! the kernel reads them in place, widening 16 at a time in registers (F16C for f16; for
//! q8, codes widened and times the row's scale, [`crate::kv_rows`]): `k_j[i]` and `v_j[i]`
//! below are the stored values, exact in f32 for either element type.
//!
//! One task per (token, KV head): the `G = H / H_kv` query heads sharing that KV head run
//! together (up to [`MAX_G`] per pass, their accumulators in registers), so each key and
//! value is read and widened once for all of them, not once per query head.
//!
//! The arithmetic, the same on every path ([`crate::lanes`]), for query head `h`, its
//! visible keys `j = lo .. n` (`n = pos + 1`; `lo = 0`, or `max(0, n - window)` on a
//! windowed layer: key j is visible to query i iff `0 <= i - j < window`) in ascending
//! position (the lane and tree indices below count from `lo`):
//!
//! - `s_j = hsum(acc) * scale` (16 keys' trees at once on AVX-512), where lane `l` of `acc` is the FMA chain over
//!   `i = l, l + 16, ...` of `q[i] * k_j[i]` from +0.0 (a `D` that is not a multiple of 16
//!   is padded with zeros, which leave the chains unchanged), and `hsum` is the fixed
//!   pairwise tree; `scale` is [`Attn::scale`], `1 / sqrt(D)` unless the family says.
//! - `m = max_j s_j`; `e_j = exp(s_j - m)` with [`crate::lanes::exp`];
//!   `sum = hsum` of 16 lane sums, lane `l` adding `e_j` for `j = l, l + 16, ...`.
//! - `out[i] = (FMA chain over j ascending of e_j * v_j[i], from +0.0) / sum`.
//! - With a sink logit `z` for the head (gpt-oss): `m = max(max_j s_j, z)` and `sum`
//!   gains `exp(z - m)` after the tree; nothing else changes (without one, nothing does).
//!
//! Token `t` reads exactly its visible keys of its own sequence and nothing is split
//! across threads, so its result does not depend on the batch, the chunking or the
//! thread count.

use std::cell::RefCell;

use rayon::prelude::*;
use tl_core::{ForwardBatch, KvElem, KvSlabs, ModelError, Q8Slab};

use crate::kv_rows::Rows;
use crate::lanes::{exp, simd_entry, st_part, Isa, Path, W};
use crate::plan::Plan;

/// One layer's attention: the head counts, the score scale and the window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Attn {
    /// Query heads H.
    pub heads: usize,
    /// KV heads H_kv (divides H); query head `h` reads KV head `h / (H / H_kv)`.
    pub kv_heads: usize,
    /// Head size D.
    pub head_dim: usize,
    /// Scores are `q . k * scale`: `1 / sqrt(D)` by default ([`Attn::new`]); Gemma 3
    /// uses `query_pre_attn_scalar^-0.5`.
    pub scale: f32,
    /// `Some(w)`: a sliding window, key j visible to query i iff `0 <= i - j < w`;
    /// `None`: every earlier key (`0 <= i - j`).
    pub window: Option<usize>,
}

impl Attn {
    /// Global attention with the default scale `1 / sqrt(D)`.
    pub fn new(heads: usize, kv_heads: usize, head_dim: usize) -> Attn {
        Attn { heads, kv_heads, head_dim, scale: 1.0 / (head_dim as f32).sqrt(), window: None }
    }

    /// Width of a `(N, H*D + 2*H_kv*D)` q/k/v row: q at column 0, k at `H*D`, v at
    /// `H*D + H_kv*D`.
    pub fn qkv_width(&self) -> usize {
        (self.heads + 2 * self.kv_heads) * self.head_dim
    }

    /// The keys a query at position `pos` sees: `lo .. pos + 1`.
    pub fn visible(&self, pos: usize) -> std::ops::Range<usize> {
        let n = pos + 1;
        match self.window {
            Some(w) => n.saturating_sub(w)..n,
            None => 0..n,
        }
    }

    /// Whether this layer shape is valid and fits the pool's geometry `g`.
    pub(crate) fn check(&self, g: &tl_core::KvGeometry) -> Result<(), ModelError> {
        let ok = g.n_kv_heads as usize == self.kv_heads
            && g.head_dim as usize == self.head_dim
            && self.heads > 0
            && self.kv_heads > 0
            && self.heads.is_multiple_of(self.kv_heads)
            && self.head_dim > 0
            && self.scale.is_finite()
            && self.window != Some(0);
        if ok {
            Ok(())
        } else {
            Err(ModelError::Other(format!("attention: {self:?} is not a valid layer shape for the KV pool {g:?}")))
        }
    }
}

/// What every block of a step shares: the instruction set, the batch and its plan.
#[derive(Clone, Copy)]
pub struct Step<'a> {
    /// The vector path ([`Path::best`] in production).
    pub path: Path,
    /// The step's sequences.
    pub batch: &'a ForwardBatch<'a>,
    /// Where each token sits.
    pub plan: &'a Plan,
}

/// Query heads per kernel pass: their accumulators (and the score rows) stay in registers.
/// A larger group runs in passes of up to this many heads.
pub const MAX_G: usize = 4;

/// Where one task's keys and values are: its sequence's K and V slabs of one layer, in
/// block-table order, and the row where its KV head's rows start in each slab.
#[derive(Clone, Copy)]
pub struct KvView<'a, S = &'a [u16]> {
    /// K slabs, `(H_kv, B, D)` values each (f16, or q8 [`Q8Slab`]s).
    pub k: &'a [S],
    /// V slabs, likewise.
    pub v: &'a [S],
    /// `g * B`: this KV head's first row.
    pub base: usize,
    /// Positions per block (B).
    pub b: usize,
}

impl<S: Rows> KvView<'_, S> {
    /// Whether keys `lo .. n` of rows of `d` lie inside the slabs (checked once per task,
    /// so the kernel's raw reads are in bounds). Blocks before `lo`'s are never read (a
    /// windowed layer's, possibly given back: empty placeholders).
    fn holds(&self, lo: usize, n: usize, d: usize) -> bool {
        let blocks = n.div_ceil(self.b.max(1));
        let first = lo / self.b.max(1);
        let end = self.base + self.b;
        self.b > 0
            && d > 0
            && first <= blocks
            && self.k.len() >= blocks
            && self.v.len() >= blocks
            && self.k[first..blocks].iter().chain(&self.v[first..blocks]).all(|s| s.rows(d) >= end)
    }
}

/// What a group of query heads attends over: keys `lo .. n` of `d` values in `kv`,
/// scores scaled by `scale`.
#[derive(Clone, Copy)]
pub struct Keys<'a, S> {
    kv: KvView<'a, S>,
    lo: usize,
    n: usize,
    d: usize,
    scale: f32,
    /// The pass's query heads' sink logits (gpt-oss), one per head, or empty: none.
    sinks: &'a [f32],
}

/// Keys `lo .. n` in ascending position, as `(j - lo, key row, value row)`. An iterator
/// rather than a callback: the kernels' vector code must be inlined into its
/// `target_feature` function, and a closure cannot be marked `inline(always)` (one LLVM
/// declines to inline is compiled without the features: a call per intrinsic).
struct KeyRows<'a, S> {
    kv: KvView<'a, S>,
    d: usize,
    lo: usize,
    n: usize,
    /// The next key: its position, block and slot in the block.
    pos: usize,
    blk: usize,
    slot: usize,
}

impl<'a, S: Rows> KeyRows<'a, S> {
    /// Caller: `kv.holds(n, d)` (checked once per task), so every row read is in bounds.
    #[inline(always)]
    fn new(kv: &KvView<'a, S>, lo: usize, n: usize, d: usize) -> KeyRows<'a, S> {
        KeyRows { kv: *kv, d, lo, n, pos: lo, blk: lo / kv.b, slot: lo % kv.b }
    }
}

impl<S: Rows> Iterator for KeyRows<'_, S> {
    type Item = (usize, S::Row, S::Row);

    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.n {
            return None;
        }
        let r = self.kv.base + self.slot;
        // SAFETY: pos < n and `holds(n, d)`: block `pos / b` exists in both slab lists and
        // holds `base + b` rows of `d`.
        let row = unsafe {
            (
                self.pos - self.lo,
                self.kv.k.get_unchecked(self.blk).row(r, self.d),
                self.kv.v.get_unchecked(self.blk).row(r, self.d),
            )
        };
        self.pos += 1;
        self.slot += 1;
        if self.slot == self.kv.b {
            (self.blk, self.slot) = (self.blk + 1, 0);
        }
        Some(row)
    }
}

/// `G` query heads `q` `(G, D)` over keys `lo .. n`, into `out` `(G, D)`.
/// `scratch` holds `(G, Dp)` zero-padded queries then `(G, Np)` scores (`Dp`, `Np`: `D`
/// and `m = n - lo` rounded up to 16). Below, `j` counts keys from `lo`.
#[inline(always)]
unsafe fn heads<L: Isa, S: Rows, const G: usize>(
    q: &[f32],
    keys: &Keys<'_, S>,
    scratch: &mut Vec<f32>,
    out: &mut [f32],
) {
    let Keys { kv, lo, n, d, scale, sinks } = *keys;
    let kv = &kv;
    let m = n - lo;
    let (dp, np) = (d.div_ceil(W) * W, m.div_ceil(W) * W);
    let (full, tail) = (d / W, d % W);
    if scratch.len() < G * (dp + np) {
        scratch.resize(G * (dp + np), 0.0);
    }
    let (qs, sc) = scratch.split_at_mut(G * dp);
    for (dst, src) in qs.chunks_exact_mut(dp).zip(q.chunks_exact(d)) {
        dst[..d].copy_from_slice(src);
        dst[d..].fill(0.0);
    }
    let (qs, sc) = (qs.as_ptr(), sc.as_mut_ptr());

    // Scores: one pass over the keys, each widened once for the G heads. Each head's
    // lane accumulators are kept for 16 keys and reduced together (`hsum16`), into the
    // score row at `j0 .. j0 + 16` (inside the padded row: j0 is a multiple of 16).
    let mut tile = [[L::zero(); W]; G];
    let sv = L::splat(scale);
    for (j, kr, _) in KeyRows::new(kv, lo, n, d) {
        let mut acc = [L::zero(); G];
        for c in 0..full {
            let kx = S::ld::<L>(kr, c * W);
            for (h, a) in acc.iter_mut().enumerate() {
                *a = L::fma(L::ld(qs.add(h * dp + c * W)), kx, *a);
            }
        }
        if tail > 0 {
            let kx = S::ld_part::<L>(kr, full * W, tail);
            for (h, a) in acc.iter_mut().enumerate() {
                *a = L::fma(L::ld(qs.add(h * dp + full * W)), kx, *a);
            }
        }
        let k = j % W;
        for (t, a) in tile.iter_mut().zip(acc) {
            t[k] = a;
        }
        if k == W - 1 || j + 1 == m {
            for (h, t) in tile.iter().enumerate() {
                L::st(sc.add(h * np + j - k), L::mul(L::hsum16(t), sv));
            }
        }
    }

    // Softmax numerators e_j = exp(s_j - max) in place, and their sums.
    let mut sums = [0.0f32; G];
    for (h, sum) in sums.iter_mut().enumerate() {
        let row = std::slice::from_raw_parts_mut(sc.add(h * np), np);
        let mut mx = row[..m].iter().fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
        // A sink (gpt-oss) is one more logit in the softmax whose value is dropped: it
        // joins the max, and its exp is added to the sum after the lanes' tree.
        let sink = sinks.get(h).copied();
        if let Some(s) = sink {
            if s > mx {
                mx = s;
            }
        }
        let mv = L::splat(mx);
        for c in row.chunks_exact_mut(W) {
            L::st(c.as_mut_ptr(), exp::<L>(L::sub(L::ld(c.as_ptr()), mv)));
        }
        row[m..].fill(0.0); // padding adds +0.0 to its lane
        let mut acc = L::zero();
        for c in row.chunks_exact(W) {
            acc = L::add(acc, L::ld(c.as_ptr()));
        }
        *sum = L::hsum(acc);
        if let Some(s) = sink {
            let mut e = [0.0f32; W];
            L::st(e.as_mut_ptr(), exp::<L>(L::sub(L::splat(s), mv)));
            *sum += e[0];
        }
    }

    // Weighted values, 16 columns at a time: per-lane FMA chains over the keys.
    for c in 0..dp / W {
        let len = W.min(d - c * W);
        let mut acc = [L::zero(); G];
        for (j, _, vr) in KeyRows::new(kv, lo, n, d) {
            let vx = if len == W { S::ld::<L>(vr, c * W) } else { S::ld_part::<L>(vr, c * W, len) };
            for (h, a) in acc.iter_mut().enumerate() {
                *a = L::fma(L::splat(*sc.add(h * np + j)), vx, *a);
            }
        }
        for (h, a) in acc.iter().enumerate() {
            let r = L::div(*a, L::splat(sums[h]));
            st_part::<L>(out.as_mut_ptr().add(h * d + c * W), r, len);
        }
    }
}

/// Every query head of one KV head: `q` and `out` are `(group, D)`; passes of up to
/// [`MAX_G`] heads. Caller: `kv.holds(n, d)`, `lo < n`, `q` and `out` `group * d` long.
#[inline(always)]
unsafe fn group_impl<L: Isa, S: Rows>(q: &[f32], keys: &Keys<'_, S>, scratch: &mut Vec<f32>, out: &mut [f32]) {
    let d = keys.d;
    for (pass, (q, o)) in q.chunks(MAX_G * d).zip(out.chunks_mut(MAX_G * d)).enumerate() {
        let sinks = keys.sinks.get(pass * MAX_G..(pass * MAX_G + q.len() / d)).unwrap_or(&[]);
        let keys = &Keys { sinks, ..*keys };
        match q.len() / d {
            1 => heads::<L, S, 1>(q, keys, scratch, o),
            2 => heads::<L, S, 2>(q, keys, scratch, o),
            3 => heads::<L, S, 3>(q, keys, scratch, o),
            _ => heads::<L, S, 4>(q, keys, scratch, o),
        }
    }
}

#[inline(always)]
unsafe fn group_f16<L: Isa>(q: &[f32], keys: &Keys<'_, &[u16]>, scratch: &mut Vec<f32>, out: &mut [f32]) {
    group_impl::<L, &[u16]>(q, keys, scratch, out)
}

#[inline(always)]
unsafe fn group_q8<L: Isa>(q: &[f32], keys: &Keys<'_, Q8Slab<'_>>, scratch: &mut Vec<f32>, out: &mut [f32]) {
    group_impl::<L, Q8Slab<'_>>(q, keys, scratch, out)
}

simd_entry!(fn attend_f16_unchecked => group_f16(
    q: &[f32], keys: &Keys<'_, &[u16]>, scratch: &mut Vec<f32>, out: &mut [f32]
));

simd_entry!(fn attend_q8_unchecked => group_q8(
    q: &[f32], keys: &Keys<'_, Q8Slab<'_>>, scratch: &mut Vec<f32>, out: &mut [f32]
));

/// A slab type the kernel has an entry point for (one copy per instruction set each).
pub trait Attend: Rows {
    /// The kernel over `keys`; caller: `keys.kv.holds(n, d)` and the sizes of `attend_group`.
    fn attend(path: Path, q: &[f32], keys: &Keys<'_, Self>, scratch: &mut Vec<f32>, out: &mut [f32]);
}

impl Attend for &[u16] {
    fn attend(path: Path, q: &[f32], keys: &Keys<'_, Self>, scratch: &mut Vec<f32>, out: &mut [f32]) {
        attend_f16_unchecked(path, q, keys, scratch, out)
    }
}

impl Attend for Q8Slab<'_> {
    fn attend(path: Path, q: &[f32], keys: &Keys<'_, Self>, scratch: &mut Vec<f32>, out: &mut [f32]) {
        attend_q8_unchecked(path, q, keys, scratch, out)
    }
}

/// Keys `lo .. n` of `d` values, scores scaled by `scale`: one task's span, for the tests.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Span {
    /// First visible key.
    pub lo: usize,
    /// One past the last (the query's position + 1).
    pub n: usize,
    /// Head size.
    pub d: usize,
    /// Score scale.
    pub scale: f32,
}

/// Checks what the kernel's raw reads and writes rely on, then runs it.
/// `sinks`: the group's query heads' sink logits (one each), or empty.
fn attend_group<S: Attend>(
    path: Path,
    q: &[f32],
    (kv, sinks): (&KvView<'_, S>, &[f32]),
    span: Span,
    scratch: &mut Vec<f32>,
    out: &mut [f32],
) -> Result<(), String> {
    let Span { lo, n, d, scale } = span;
    if d == 0 || lo >= n || q.len() != out.len() || !q.len().is_multiple_of(d) || !kv.holds(lo, n, d) {
        return Err(format!("attention: keys {lo}..{n} of {d} values do not fit the slabs or q/out ({})", q.len()));
    }
    if !sinks.is_empty() && sinks.len() * d != q.len() {
        return Err(format!("attention: {} sinks for {} query heads", sinks.len(), q.len() / d));
    }
    let keys = Keys { kv: *kv, lo, n, d, scale, sinks };
    S::attend(path, q, &keys, scratch, out);
    Ok(())
}

/// One KV head's attention for tests over the keys of `span`, otherwise as
/// [`attend_one`].
#[doc(hidden)]
pub fn attend_span(
    path: Path,
    q: &[f32],
    (k_blocks, v_blocks): (&[&[u16]], &[&[u16]]),
    block_tokens: usize,
    span: Span,
    out: &mut [f32],
) -> Result<(), String> {
    attend_span_sinks(path, q, (k_blocks, v_blocks), block_tokens, (span, &[]), out)
}

/// [`attend_span`] with one sink logit per query head (`sinks` `(G,)`), for the tests;
/// the blocks are f16 slabs or q8 ones ([`Q8Slab`]: `(block_tokens, D)` codes and
/// `(block_tokens,)` scales each), the kernel production runs on either pool.
#[doc(hidden)]
pub fn attend_span_sinks<S: Attend>(
    path: Path,
    q: &[f32],
    (k_blocks, v_blocks): (&[S], &[S]),
    block_tokens: usize,
    (span, sinks): (Span, &[f32]),
    out: &mut [f32],
) -> Result<(), String> {
    let kv = KvView { k: k_blocks, v: v_blocks, base: 0, b: block_tokens };
    attend_group(path, q, (&kv, sinks), span, &mut Vec::new(), out)
}

/// One KV head's attention for tests: `q` `(G, D)` over keys `0 .. n` held in blocks of
/// `block_tokens` rows (`k_blocks[i]`, `v_blocks[i]`: `(block_tokens, D)` f16), into
/// `out` `(G, D)`, on `path`. The production code runs the same kernel.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub fn attend_one(
    path: Path,
    q: &[f32],
    k_blocks: &[&[u16]],
    v_blocks: &[&[u16]],
    block_tokens: usize,
    n: usize,
    d: usize,
    out: &mut [f32],
) -> Result<(), String> {
    let span = Span { lo: 0, n, d, scale: 1.0 / (d as f32).sqrt() };
    attend_span(path, q, (k_blocks, v_blocks), block_tokens, span, out)
}

/// One sequence's K slabs and V slabs of one layer, in block-table order.
type SeqSlabs<S> = (Vec<S>, Vec<S>);

thread_local! {
    /// Per-worker scratch (padded queries and scores), kept across tasks and steps: it
    /// grows to the longest context seen, never per call.
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Attention of every new token over exactly its visible keys ([`Attn::visible`]) of
/// `layer`, read from the pool. `qkv` is `(N, H*D + 2*H_kv*D)` with the `H * D` queries
/// (after RoPE) at its start; `out` is `(N, H * D)`. Query head `h` reads KV head
/// `h / (H / H_kv)`.
pub fn attention(
    step: &Step<'_>,
    kv: &dyn KvSlabs,
    layer: u32,
    attn: &Attn,
    qkv: &[f32],
    out: &mut [f32],
) -> Result<(), ModelError> {
    attention_sinks(step, kv, (layer, attn, &[]), qkv, out)
}

/// A slab of the wrong size is the backend's bug; refuse it before the kernel reads it.
pub(crate) fn sized(id: u32, len: usize, want: usize) -> Result<(), ModelError> {
    if len == want {
        Ok(())
    } else {
        Err(ModelError::Other(format!("KV block {id}: slab holds {len} values, not {want}")))
    }
}

/// Per sequence of the step, its K and V slabs of one layer in table order, from `get`
/// (page id, K or V). Rows before the first one the sequence's first query sees on this
/// layer are never read (a windowed group's pages may have been given back): they hold
/// empty placeholders, so a row keeps its index.
fn seq_slabs<S: Default>(
    step: &Step<'_>,
    (group, attn): (usize, &Attn),
    get: impl Fn(u32, bool) -> Result<S, ModelError>,
) -> Result<Vec<SeqSlabs<S>>, ModelError> {
    let n = step.plan.groups;
    let mut slabs = Vec::with_capacity(step.batch.seqs.len());
    for (s, &nb) in step.batch.seqs.iter().zip(&step.plan.n_blocks) {
        let b = step.plan.block_tokens;
        let first = (attn.visible(s.start).start / b).min(nb);
        let (mut ks, mut vs) = (Vec::with_capacity(nb), Vec::with_capacity(nb));
        ks.resize_with(first, S::default);
        vs.resize_with(first, S::default);
        for r in first..nb {
            let id = s.blocks[r * n + group];
            ks.push(get(id, false)?);
            vs.push(get(id, true)?);
        }
        slabs.push((ks, vs));
    }
    Ok(slabs)
}

/// [`attention`] with a sink logit per query head (`sinks` `(H,)`, gpt-oss: one more
/// logit in each softmax whose value is dropped), or none (`sinks` empty).
pub fn attention_sinks(
    step: &Step<'_>,
    kv: &dyn KvSlabs,
    (layer, attn, sinks): (u32, &Attn, &[f32]),
    qkv: &[f32],
    out: &mut [f32],
) -> Result<(), ModelError> {
    attn.check(&kv.geometry())?;
    if !sinks.is_empty() && sinks.len() != attn.heads {
        return Err(ModelError::Other(format!("attention: {} sinks for {} heads", sinks.len(), attn.heads)));
    }
    let g = kv.geometry();
    let (b, slab_len) = (g.block_tokens as usize, g.slab_elems().unwrap_or(0));
    let rows = slab_len / g.head_dim.max(1) as usize;
    let (group, layer) = step.plan.slot(layer)?;
    // The backend is not Sync; its slabs are, so the workers share these slices.
    match kv.elem() {
        KvElem::F16 => {
            let slabs = seq_slabs(step, (group, attn), |id, is_v| {
                let s = kv.slab(id, layer, is_v)?;
                sized(id, s.len(), slab_len).map(|_| s)
            })?;
            attend_all(step, &slabs, (attn, sinks, b), qkv, out)
        }
        KvElem::Q8 => {
            let slabs = seq_slabs(step, (group, attn), |id, is_v| {
                let s = kv.q8_slab(id, layer, is_v)?;
                sized(id, s.codes.len(), slab_len)?;
                sized(id, s.scales.len(), rows).map(|_| s)
            })?;
            attend_all(step, &slabs, (attn, sinks, b), qkv, out)
        }
    }
}

/// The step's attention over `slabs` (one entry per sequence, blocks of `b` positions),
/// one task per (token, KV head).
fn attend_all<S: Attend>(
    step: &Step<'_>,
    slabs: &[SeqSlabs<S>],
    (attn, sinks, b): (&Attn, &[f32], usize),
    qkv: &[f32],
    out: &mut [f32],
) -> Result<(), ModelError> {
    let Step { path, plan, .. } = *step;
    let (heads, kv_heads, d) = (attn.heads, attn.kv_heads, attn.head_dim);
    let (q, q_stride) = (qkv, attn.qkv_width());
    let group = heads / kv_heads;
    let n_tok = plan.pos.len();
    if q.len() < n_tok * q_stride || q_stride < heads * d || out.len() != n_tok * heads * d {
        return Err(ModelError::Other("attention: q or out has the wrong size".into()));
    }
    // One task per (token, KV head): out rows `(t, g*group .. (g+1)*group, D)`.
    out.par_chunks_mut(group * d).enumerate().try_for_each(|(i, o)| {
        let (t, g) = (i / kv_heads, i % kv_heads);
        let (ks, vs) = &slabs[plan.seq_of[t]];
        let kv = KvView { k: ks, v: vs, base: g * b, b };
        let q0 = t * q_stride + g * group * d;
        let qh = &q[q0..q0 + group * d];
        let keys = attn.visible(plan.pos[t]);
        let span = Span { lo: keys.start, n: keys.end, d, scale: attn.scale };
        let sinks = sinks.get(g * group..(g + 1) * group).unwrap_or(&[]);
        SCRATCH
            .with(|s| match s.try_borrow_mut() {
                Ok(mut s) => attend_group(path, qh, (&kv, sinks), span, &mut s, o),
                Err(_) => attend_group(path, qh, (&kv, sinks), span, &mut Vec::new(), o),
            })
            .map_err(ModelError::Other)
    })
}
