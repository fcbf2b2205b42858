//! Attention over the paged KV pool (f16 or q8 values): the step's tasks, each a query
//! tile of one KV head, run by the kernel in [`crate::attn_kernel`] (layout and arithmetic
//! documented there).
//!
//! A task is up to [`MAX_TILE`] consecutive positions of one sequence whose keys start at
//! the same place (every position of a prefill chunk on a global layer), times one KV
//! head's `G = H / H_kv` query heads (in passes of up to [`MAX_G`] heads and
//! [`MAX_ROWS`] rows). Each row's result is one function of its own query and visible
//! keys (ascending, nothing split across threads), so it does not depend on the batch, the
//! chunking, the tiling or the thread count.

use std::cell::RefCell;

use rayon::prelude::*;
use tl_core::{ForwardBatch, KvElem, KvSlabs, ModelError};

use crate::attn_kernel::{Attend, Keys, KvView, Tile, MAX_G, MAX_ROWS};
use crate::lanes::Path;
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
    /// Per sequence, the state slots a verify step keeps its last states in
    /// ([`tl_core::ForwardCtx::spares`]).
    pub spares: &'a [&'a [u32]],
    /// A draft head's given rows ([`tl_core::ForwardCtx::given`]), `(N, d)` or empty.
    pub given: &'a [f32],
    /// The step's rows grouped by LoRA adapter (empty: no row has one).
    pub lora: &'a crate::lora::LoraRows<'a>,
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

/// Most positions in one task's query tile.
pub const MAX_TILE: usize = 8;

/// A task's query rows: `tokens` positions `q_stride` floats apart in `q`, `out_stride`
/// apart in the output, `heads` query heads of `D` at each.
#[derive(Clone, Copy, Debug)]
struct RowsAt {
    tokens: usize,
    heads: usize,
    q_stride: usize,
    out_stride: usize,
}

/// Where a task writes: the `len` floats from `ptr` hold its output rows (and other
/// tasks' rows between them, which it never touches).
#[derive(Clone, Copy)]
struct OutRows {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: tasks share the step's output buffer through this pointer, each writing only
// its own (position, KV head) rows: the tasks partition those rows, so no two writes
// overlap and nothing reads them until every task has finished.
unsafe impl Send for OutRows {}
unsafe impl Sync for OutRows {}

impl OutRows {
    /// The rows from float `o` on (`o <= len`).
    fn at(self, o: usize) -> OutRows {
        OutRows { ptr: self.ptr.wrapping_add(o), len: self.len - o }
    }
}

/// Checks what the kernel's raw reads and writes rely on, then runs it: `rows.tokens`
/// consecutive positions (the last one's keys in `span`, each earlier one's one fewer)
/// times `rows.heads` query heads, in passes of at most [`MAX_G`] heads and
/// [`MAX_ROWS`] rows. `sinks`: the heads' sink logits (one each), or empty.
fn attend_rows<S: Attend>(
    path: Path,
    q: &[f32],
    (kv, sinks): (&KvView<'_, S>, &[f32]),
    (span, rows): (Span, RowsAt),
    scratch: &mut Vec<f32>,
    out: OutRows,
) -> Result<(), String> {
    let Span { lo, n, d, scale } = span;
    let RowsAt { tokens, heads, q_stride, out_stride } = rows;
    let need = |stride: usize| (tokens - 1).checked_mul(stride).and_then(|x| x.checked_add(heads * d));
    let fits =
        |len: usize, stride: usize| (tokens == 1 || stride >= heads * d) && need(stride).is_some_and(|x| x <= len);
    if d == 0
        || heads == 0
        || tokens == 0
        || tokens > MAX_ROWS
        || lo + tokens > n
        || !fits(q.len(), q_stride)
        || !fits(out.len, out_stride)
        || !kv.holds(lo, n, d)
    {
        return Err(format!(
            "attention: {tokens} positions x {heads} heads over keys {lo}..{n} of {d} values do not fit the slabs \
             or q/out ({} / {})",
            q.len(),
            out.len
        ));
    }
    if !sinks.is_empty() && sinks.len() != heads {
        return Err(format!("attention: {} sinks for {heads} query heads", sinks.len()));
    }
    let per_pass = MAX_G.min(MAX_ROWS / tokens);
    for h0 in (0..heads).step_by(per_pass) {
        let gp = per_pass.min(heads - h0);
        let tile = Tile { tokens, heads: gp, q_stride, out_stride };
        let sinks = sinks.get(h0..h0 + gp).unwrap_or(&[]);
        let keys = Keys { kv: *kv, lo, n, d, scale, sinks, tile };
        // SAFETY: checked above: the keys lie in the slabs, every position sees at least
        // one key, `tokens * gp <= MAX_ROWS`, `gp <= MAX_G`, and the rows of heads
        // `h0 .. h0 + gp` of every position lie inside `q` and `out`.
        unsafe { S::attend(path, q.as_ptr().add(h0 * d), &keys, scratch, out.ptr.add(h0 * d)) };
    }
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
/// the blocks are f16 slabs or q8 ones ([`tl_core::Q8Slab`]: `(block_tokens, D)` codes and
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
    let d = span.d.max(1);
    attend_tile(path, q, (k_blocks, v_blocks), block_tokens, (span, sinks, q.len() / d), 1, out)
}

/// A query tile for the tests: `q` `(T, G, D)` for the `T = tokens` positions before
/// `span.n` (position `t` of the tile sees keys `span.lo .. span.n - T + 1 + t`), into
/// `out` `(T, G, D)`; `heads` is `G`, `sinks` one per head or empty. Each row equals that
/// position's [`attend_span_sinks`] alone, bit for bit.
#[doc(hidden)]
pub fn attend_tile<S: Attend>(
    path: Path,
    q: &[f32],
    (k_blocks, v_blocks): (&[S], &[S]),
    block_tokens: usize,
    (span, sinks, heads): (Span, &[f32], usize),
    tokens: usize,
    out: &mut [f32],
) -> Result<(), String> {
    let kv = KvView { k: k_blocks, v: v_blocks, base: 0, b: block_tokens };
    let stride = heads * span.d;
    if q.len() != out.len() || q.len() != tokens * stride {
        return Err(format!("attention: q ({}) and out ({}) are not {tokens} x {stride}", q.len(), out.len()));
    }
    let rows = RowsAt { tokens, heads, q_stride: stride, out_stride: stride };
    let out = OutRows { ptr: out.as_mut_ptr(), len: out.len() };
    attend_rows(path, q, (&kv, sinks), (span, rows), &mut Vec::new(), out)
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
/// one task per (query tile, KV head).
fn attend_all<S: Attend>(
    step: &Step<'_>,
    slabs: &[SeqSlabs<S>],
    (attn, sinks, b): (&Attn, &[f32], usize),
    qkv: &[f32],
    out: &mut [f32],
) -> Result<(), ModelError> {
    let Step { path, plan, .. } = *step;
    let (heads, kv_heads, d) = (attn.heads, attn.kv_heads, attn.head_dim);
    let q_stride = attn.qkv_width();
    let group = heads / kv_heads;
    let n_tok = plan.pos.len();
    if qkv.len() < n_tok * q_stride || q_stride < heads * d || out.len() != n_tok * heads * d {
        return Err(ModelError::Other("attention: q or out has the wrong size".into()));
    }
    // Tiles: runs of consecutive positions of one sequence whose keys start at the same
    // place, as many as fill the kernel's rows with this group's heads.
    let most = (MAX_ROWS / group.min(MAX_G)).clamp(1, MAX_TILE);
    let mut tiles = Vec::with_capacity(n_tok.div_ceil(most));
    let mut t = 0;
    while t < n_tok {
        let lo = attn.visible(plan.pos[t]).start;
        let mut e = t + 1;
        while e < n_tok
            && e - t < most
            && plan.seq_of[e] == plan.seq_of[t]
            && plan.pos[e] == plan.pos[e - 1] + 1
            && attn.visible(plan.pos[e]).start == lo
        {
            e += 1;
        }
        tiles.push((t, e - t));
        t = e;
    }
    let all = OutRows { ptr: out.as_mut_ptr(), len: out.len() };
    // One task per (tile, KV head): out rows `(t, g*group .. (g+1)*group, D)` of its
    // positions; the tasks partition the output (see `OutRows`).
    (0..tiles.len() * kv_heads).into_par_iter().try_for_each(|i| {
        let ((t0, tokens), g) = (tiles[i / kv_heads], i % kv_heads);
        let (ks, vs) = &slabs[plan.seq_of[t0]];
        let kv = KvView { k: ks, v: vs, base: g * b, b };
        let keys = attn.visible(plan.pos[t0 + tokens - 1]);
        let span = Span { lo: keys.start, n: keys.end, d, scale: attn.scale };
        let q = &qkv[t0 * q_stride + g * group * d..];
        let o0 = (t0 * heads + g * group) * d;
        let out = all.at(o0);
        let rows = RowsAt { tokens, heads: group, q_stride, out_stride: heads * d };
        let sinks = sinks.get(g * group..(g + 1) * group).unwrap_or(&[]);
        SCRATCH
            .with(|s| match s.try_borrow_mut() {
                Ok(mut s) => attend_rows(path, q, (&kv, sinks), (span, rows), &mut s, out),
                Err(_) => attend_rows(path, q, (&kv, sinks), (span, rows), &mut Vec::new(), out),
            })
            .map_err(ModelError::Other)
    })
}
