//! The attention kernel: up to [`MAX_ROWS`] query rows over the keys they see, read in
//! place from the paged pool.
//!
//! Layout (core/src/kv.rs): position `j` of a sequence lives in block `table[j / B]`, slot
//! `j % B`; KV head `g`'s key is the `D` values of row `g * B + slot` of the layer's K
//! slab (V likewise). So within a block one head's keys are consecutive rows of `D`, and
//! the kernel reads them in place, widening 16 at a time in registers (F16C for f16; for
//! q8, codes widened and times the row's scale, [`crate::kv_rows`]): `k_j[i]` and `v_j[i]`
//! below are the stored values, exact in f32 for either element type.
//!
//! One call holds `R = T x G'` rows: `T` consecutive positions of one sequence (a query
//! tile) times `G'` of the query heads sharing one KV head. Each key and value is read and
//! widened once for all `R` rows, not once per row: a long prefill reads the cache once
//! per tile instead of once per position.
//!
//! The arithmetic, the same on every path ([`crate::lanes`]) and for a row whatever else
//! shares its call, for query head `h` at position `p`, its visible keys `j = lo .. n`
//! (`n = p + 1`; `lo = 0`, or `max(0, n - window)` on a windowed layer: key j is visible to
//! query i iff `0 <= i - j < window`) in ascending position (the lane and tree indices below
//! count from `lo`):
//!
//! - `s_j = hsum(acc) * scale` (16 keys' trees at once on AVX-512), where lane `l` of `acc` is the FMA chain over
//!   `i = l, l + 16, ...` of `q[i] * k_j[i]` from +0.0 (a `D` that is not a multiple of 16
//!   is padded with zeros, which leave the chains unchanged), and `hsum` is the fixed
//!   pairwise tree; `scale` is `Attn::scale`, `1 / sqrt(D)` unless the family says.
//! - `m = max_j s_j`; `e_j = exp(s_j - m)` with [`crate::lanes::exp`];
//!   `sum = hsum` of 16 lane sums, lane `l` adding `e_j` for `j = l, l + 16, ...`.
//! - `out[i] = (FMA chain over j ascending of e_j * v_j[i], from +0.0) / sum`.
//! - With a sink logit `z` for the head (gpt-oss): `m = max(max_j s_j, z)` and `sum`
//!   gains `exp(z - m)` after the tree; nothing else changes (without one, nothing does).
//!
//! The value chains of every column of every row run side by side (one register each,
//! [`cols`] columns of 16 at a time, the keys in blocks of [`KEY_BLOCK`] between which the
//! chains rest in memory), so the FMA latency of one chain is not the kernel's pace; each
//! chain still adds its keys in ascending order. A row of the tile with fewer keys (an
//! earlier position) skips the keys it does not see: its scores there are computed and
//! never read.

use crate::kv_rows::Rows;
use crate::lanes::{exp, simd_entry, st_part, Isa, Path, W};
use tl_core::Q8Slab;

/// Query heads per kernel pass of one position: a larger group runs in passes.
pub const MAX_G: usize = 4;

/// Most query rows (positions x heads) in one call: the score pass keeps one accumulator
/// per row in registers, the value pass `rows x cols` of them.
pub const MAX_ROWS: usize = 12;

/// Keys per block of the value pass: the block's value rows stay in L1 while every
/// column block of the rows' chains walks them.
pub const KEY_BLOCK: usize = 128;

/// Where one call's keys and values are: its sequence's K and V slabs of one layer, in
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
    /// Whether keys `lo .. n` of rows of `d` lie inside the slabs (checked once per call,
    /// so the kernel's raw reads are in bounds). Blocks before `lo`'s are never read (a
    /// windowed layer's, possibly given back: empty placeholders).
    pub(crate) fn holds(&self, lo: usize, n: usize, d: usize) -> bool {
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

/// A call's rows: `tokens` consecutive positions, the last seeing keys `lo .. n`;
/// `heads` query heads at each, `d` values apiece, a position's heads `q_stride` floats
/// after the previous position's in `q` (`out_stride` in `out`).
#[derive(Clone, Copy, Debug)]
pub struct Tile {
    /// Positions T (`1 <= T`, `T * heads <= MAX_ROWS`).
    pub tokens: usize,
    /// Query heads per position (`1 ..= MAX_G`).
    pub heads: usize,
    /// Floats from one position's queries to the next's.
    pub q_stride: usize,
    /// Floats from one position's outputs to the next's.
    pub out_stride: usize,
}

/// What a call attends over: keys `lo .. n` of `d` values in `kv` (the tile's last
/// position's; the position `t` places earlier sees `lo .. n - t`), scores scaled by
/// `scale`.
#[derive(Clone, Copy)]
pub struct Keys<'a, S> {
    pub(crate) kv: KvView<'a, S>,
    pub(crate) lo: usize,
    pub(crate) n: usize,
    pub(crate) d: usize,
    pub(crate) scale: f32,
    /// The call's query heads' sink logits (gpt-oss), one per head, or empty: none.
    pub(crate) sinks: &'a [f32],
    pub(crate) tile: Tile,
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
    /// Caller: `kv.holds(lo', n', d)` for a range holding `lo .. n` (checked once per call),
    /// so every row read is in bounds.
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

/// Columns of 16 whose value chains one pass over a key block carries for `r` rows: as
/// many as keep `r x cols` accumulators within 24 registers, at most 4.
pub const fn cols(r: usize) -> usize {
    let c = 24 / r;
    if c > 4 {
        4
    } else if c < 1 {
        1
    } else {
        c
    }
}

/// [`cols`] of `R` as a constant the compiler resolves per kernel copy, so a copy holds only
/// the value loop it runs.
struct Cols<const R: usize>;

impl<const R: usize> Cols<R> {
    const N: usize = cols(R);
}

/// The value pass's buffers: the numerators ([`at`]'s layout), `(R, Dp)` chains at rest,
/// each row's key count.
struct Values<'a, S, const R: usize> {
    kv: &'a KvView<'a, S>,
    lo: usize,
    d: usize,
    dp: usize,
    e: *const f32,
    acc: *mut f32,
    ms: &'a [usize; R],
}

/// The chains of columns `cb .. cb + CN` (16 each) of every row over keys `kb .. ke`
/// (counted from `lo`), every row seeing all of them, resumed from and returned to
/// `v.acc`. One loop with no test inside, so the `R x CN` chains stay in registers.
// Index loops on purpose: with `iter_mut` over the nested arrays LLVM kept the chains in
// registers but stored every update back to the stack (one store per FMA).
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn value_block<L: Isa, S: Rows, const R: usize, const CN: usize>(
    v: &Values<'_, S, R>,
    (kb, ke): (usize, usize),
    cb: usize,
) {
    let Values { kv, lo, d, dp, e, acc: rest, .. } = *v;
    let mut acc = [[L::zero(); CN]; R];
    for r in 0..R {
        for c in 0..CN {
            acc[r][c] = L::ld(rest.add(r * dp + (cb + c) * W));
        }
    }
    let whole = (cb + CN) * W <= d;
    for (j, _, vr) in KeyRows::new(kv, lo + kb, lo + ke, d) {
        // Key `kb + j`'s numerators: row r's `r x 16` floats after row 0's.
        let e = e.add(at(R, 0, kb + j));
        let mut vx = [L::zero(); CN];
        for c in 0..CN {
            let col = (cb + c) * W;
            vx[c] = if whole || col + W <= d { S::ld::<L>(vr, col) } else { S::ld_part::<L>(vr, col, d - col) };
        }
        for r in 0..R {
            let er = L::splat(*e.add(r * W));
            for c in 0..CN {
                acc[r][c] = L::fma(er, vx[c], acc[r][c]);
            }
        }
    }
    for r in 0..R {
        for c in 0..CN {
            L::st(rest.add(r * dp + (cb + c) * W), acc[r][c]);
        }
    }
}

/// Keys `kb .. ke` for the rows that see them (a tile's last few keys, which its earlier
/// positions do not), every column, chains read and written in place.
#[inline(always)]
unsafe fn value_tail<L: Isa, S: Rows, const R: usize>(v: &Values<'_, S, R>, (kb, ke): (usize, usize)) {
    let Values { kv, lo, d, dp, e: et, acc: rest, ms } = *v;
    for (j, _, vr) in KeyRows::new(kv, lo + kb, lo + ke, d) {
        let j = kb + j;
        for (r, &mr) in ms.iter().enumerate() {
            if j >= mr {
                continue;
            }
            let e = L::splat(*et.add(at(R, r, j)));
            for col in (0..d).step_by(W) {
                let x = if col + W <= d { S::ld::<L>(vr, col) } else { S::ld_part::<L>(vr, col, d - col) };
                let a = rest.add(r * dp + col);
                L::st(a, L::fma(e, x, L::ld(a)));
            }
        }
    }
}

/// Where row `r`'s score (then numerator) of key `j` is among `rows` rows: chunk-major,
/// each chunk of 16 keys holding its rows' 16 side by side. A score row is 16 floats at a
/// time with a stride, and a key's numerators for all rows are at fixed offsets (`r x 16`)
/// from one pointer, so the value pass reads them with no transposed copy.
#[inline(always)]
fn at(rows: usize, r: usize, j: usize) -> usize {
    ((j / W) * rows + r) * W + j % W
}

/// The score pass's operands: keys `lo .. lo + m` of `d` values, the `(R, Dp)` padded
/// queries at `qs`, the `R` score rows at `sc` ([`at`]).
struct Scores<'a, S> {
    kv: &'a KvView<'a, S>,
    lo: usize,
    m: usize,
    d: usize,
    dp: usize,
    qs: *const f32,
    sc: *mut f32,
    scale: f32,
}

/// Keys per block of the score pass with held queries: the block's key rows stay in L1
/// while each group of rows walks them (8 KiB of f16 keys at `D = 64`).
const SCORE_KEYS: usize = 64;

/// Scores for any `D`: one pass over the keys, each widened once for the `R` rows, whose
/// queries are read from `qs` at every key. Each row's lane accumulators are kept for 16
/// keys and reduced together (`hsum16`).
#[inline(always)]
unsafe fn scores_any<L: Isa, S: Rows, const R: usize>(s: &Scores<'_, S>) {
    let Scores { kv, lo, m, d, dp, qs, sc, scale } = *s;
    let (full, tail) = (d / W, d % W);
    let mut tile16 = [[L::zero(); W]; R];
    let sv = L::splat(scale);
    for (j, kr, _) in KeyRows::new(kv, lo, lo + m, d) {
        let mut acc = [L::zero(); R];
        for c in 0..full {
            let kx = S::ld::<L>(kr, c * W);
            for (r, a) in acc.iter_mut().enumerate() {
                *a = L::fma(L::ld(qs.add(r * dp + c * W)), kx, *a);
            }
        }
        if tail > 0 {
            let kx = S::ld_part::<L>(kr, full * W, tail);
            for (r, a) in acc.iter_mut().enumerate() {
                *a = L::fma(L::ld(qs.add(r * dp + full * W)), kx, *a);
            }
        }
        let k = j % W;
        for (t, a) in tile16.iter_mut().zip(acc) {
            t[k] = a;
        }
        if k == W - 1 || j + 1 == m {
            for (r, t) in tile16.iter().enumerate() {
                L::st(sc.add(at(R, r, j - k)), L::mul(L::hsum16(t), sv));
            }
        }
    }
}

/// Scores for `D = 16 * CH`, with the queries held in registers: with 12 rows of 4 chunks
/// the queries do not fit, and reading them at every key made the pass wait on loads
/// (5 per row and key). Rows in groups of `G` (`G x CH <= 16` registers of queries), each
/// group walking a block of [`SCORE_KEYS`] keys. Each row's arithmetic is `scores_any`'s:
/// the same chains and trees, so the same bits.
#[inline(always)]
unsafe fn scores_held<L: Isa, S: Rows, const R: usize, const CH: usize, const G: usize>(s: &Scores<'_, S>) {
    let mut kb = 0;
    while kb < s.m {
        let ke = (kb + SCORE_KEYS).min(s.m);
        let mut g0 = 0;
        while g0 + G <= R {
            score_group::<L, S, R, G, CH>(s, g0, (kb, ke));
            g0 += G;
        }
        // R is a constant: one arm is compiled in.
        match R - g0 {
            0 => {}
            1 => score_group::<L, S, R, 1, CH>(s, g0, (kb, ke)),
            2 => score_group::<L, S, R, 2, CH>(s, g0, (kb, ke)),
            _ => score_group::<L, S, R, 3, CH>(s, g0, (kb, ke)),
        }
        kb = ke;
    }
}

/// Rows `g0 .. g0 + G` (of `R`)'s scores over keys `kb .. ke` (from `lo`; `kb` a multiple
/// of 16).
#[allow(clippy::needless_range_loop)] // index loops keep the arrays in registers
#[inline(always)]
unsafe fn score_group<L: Isa, S: Rows, const R: usize, const G: usize, const CH: usize>(
    s: &Scores<'_, S>,
    g0: usize,
    (kb, ke): (usize, usize),
) {
    let Scores { kv, lo, d, dp, qs, sc, scale, .. } = *s;
    let mut q = [[L::zero(); CH]; G];
    for r in 0..G {
        for c in 0..CH {
            q[r][c] = L::ld(qs.add((g0 + r) * dp + c * W));
        }
    }
    let sv = L::splat(scale);
    let mut tile16 = [[L::zero(); W]; G];
    for (j, kr, _) in KeyRows::new(kv, lo + kb, lo + ke, d) {
        let j = kb + j;
        let mut acc = [L::zero(); G];
        for c in 0..CH {
            let kx = S::ld::<L>(kr, c * W);
            for r in 0..G {
                acc[r] = L::fma(q[r][c], kx, acc[r]);
            }
        }
        let k = j % W;
        for r in 0..G {
            tile16[r][k] = acc[r];
        }
        if k == W - 1 || j + 1 == ke {
            for r in 0..G {
                L::st(sc.add(at(R, g0 + r, j - k)), L::mul(L::hsum16(&tile16[r]), sv));
            }
        }
    }
}

/// `R` rows ([`Keys::tile`]) from `q` over their keys, into `out`. `scratch` holds `(R, Dp)`
/// zero-padded queries, `R x Np` scores, then numerators in their place ([`at`]), and
/// `(R, Dp)` value chains (`Dp`, `Np`: `D` and `m = n - lo` rounded up to 16). Below, `j`
/// counts keys from `lo`.
/// Caller: `R = tokens * heads`, `kv.holds(lo, n, d)`, `lo + tokens <= n`, and `q` / `out`
/// valid for the tile's rows.
#[inline(always)]
unsafe fn rows<L: Isa, S: Rows, const R: usize>(
    q: *const f32,
    keys: &Keys<'_, S>,
    scratch: &mut Vec<f32>,
    out: *mut f32,
) {
    let Keys { kv, lo, n, d, scale, sinks, tile } = *keys;
    let kv = &kv;
    let heads = tile.heads;
    let m = n - lo;
    // Row r: position r / heads of the tile, which sees the first `ms[r]` keys.
    let mut ms = [0usize; R];
    for (r, mr) in ms.iter_mut().enumerate() {
        *mr = m + 1 + r / heads - tile.tokens;
    }
    let (dp, np) = (d.div_ceil(W) * W, m.div_ceil(W) * W);
    if scratch.len() < R * (2 * dp + np) {
        scratch.resize(R * (2 * dp + np), 0.0);
    }
    let qs = scratch.as_mut_ptr();
    let (sc, va) = (qs.add(R * dp), qs.add(R * (dp + np)));
    for r in 0..R {
        let src = q.add((r / heads) * tile.q_stride + (r % heads) * d);
        std::ptr::copy_nonoverlapping(src, qs.add(r * dp), d);
        std::ptr::write_bytes(qs.add(r * dp + d), 0, dp - d);
        std::ptr::write_bytes(va.add(r * dp), 0, dp);
    }

    // Scores, 16 keys of a row at a time (each row padded to Np: the padding's scores are
    // never read).
    let s = Scores { kv, lo, m, d, dp, qs, sc, scale };
    match d {
        64 => scores_held::<L, S, R, 4, 4>(&s),
        128 => scores_held::<L, S, R, 8, 2>(&s),
        _ => scores_any::<L, S, R>(&s),
    }

    // Softmax numerators e_j = exp(s_j - max) in place over each row's own keys, and
    // their sums. Row r's chunk c (keys 16c ..) is at `at(R, r, 16c)`.
    let mut sums = [0.0f32; R];
    for (r, sum) in sums.iter_mut().enumerate() {
        let mr = ms[r];
        let (nc, part) = (mr.div_ceil(W), mr % W);
        let chunk = |c: usize| sc.add(at(R, r, c * W));
        // The max 16 lanes at a time (`max(x, m)` is `if x > m { x } else { m }`, as the
        // one-at-a-time fold): the same value, up to the sign of a zero maximum, which
        // changes no `s_j - m` below and no comparison. Keys past the row's own are -inf.
        if part > 0 {
            std::slice::from_raw_parts_mut(chunk(nc - 1).add(part), W - part).fill(f32::NEG_INFINITY);
        }
        let mut lanes = L::splat(f32::NEG_INFINITY);
        for c in 0..nc {
            lanes = L::max(L::ld(chunk(c)), lanes);
        }
        let mut l16 = [0.0f32; W];
        L::st(l16.as_mut_ptr(), lanes);
        let mut mx = l16.iter().fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
        // A sink (gpt-oss) is one more logit in the softmax whose value is dropped: it
        // joins the max, and its exp is added to the sum after the lanes' tree.
        let sink = sinks.get(r % heads).copied();
        if let Some(s) = sink {
            if s > mx {
                mx = s;
            }
        }
        let mv = L::splat(mx);
        // exp, and each lane's sum over the chunks in ascending order; the padding past
        // the row's keys adds +0.0 to its lane.
        let mut acc = L::zero();
        for c in 0..nc {
            let mut e = exp::<L>(L::sub(L::ld(chunk(c)), mv));
            L::st(chunk(c), e);
            if c + 1 == nc && part > 0 {
                std::slice::from_raw_parts_mut(chunk(c).add(part), W - part).fill(0.0);
                e = L::ld(chunk(c));
            }
            acc = L::add(acc, e);
        }
        *sum = L::hsum(acc);
        if let Some(s) = sink {
            let mut e = [0.0f32; W];
            L::st(e.as_mut_ptr(), exp::<L>(L::sub(L::splat(s), mv)));
            *sum += e[0];
        }
    }

    // Weighted values: per-lane FMA chains over the keys, key block by key block.
    let chunks = dp / W;
    let values = Values { kv, lo, d, dp, e: sc, acc: va, ms: &ms };
    // Keys every row sees, in blocks; then the tile's last keys, which only its later
    // positions see (each chain still takes its keys in ascending order).
    let shared = ms[0];
    let mut kb = 0;
    while kb < shared {
        let ke = (kb + KEY_BLOCK).min(shared);
        let mut cb = 0;
        while cb + Cols::<R>::N <= chunks {
            match Cols::<R>::N {
                4 => value_block::<L, S, R, 4>(&values, (kb, ke), cb),
                3 => value_block::<L, S, R, 3>(&values, (kb, ke), cb),
                2 => value_block::<L, S, R, 2>(&values, (kb, ke), cb),
                _ => value_block::<L, S, R, 1>(&values, (kb, ke), cb),
            }
            cb += Cols::<R>::N;
        }
        while cb < chunks {
            value_block::<L, S, R, 1>(&values, (kb, ke), cb);
            cb += 1;
        }
        kb = ke;
    }
    value_tail::<L, S, R>(&values, (shared, m));
    for (r, &sum) in sums.iter().enumerate() {
        let o = out.add((r / heads) * tile.out_stride + (r % heads) * d);
        for c in 0..chunks {
            let len = W.min(d - c * W);
            st_part::<L>(o.add(c * W), L::div(L::ld(va.add(r * dp + c * W)), L::splat(sum)), len);
        }
    }
}

/// One call: its row count picks the kernel's register tiles.
/// Caller: as [`rows`], with `1 <= tokens * heads <= MAX_ROWS`.
#[inline(always)]
unsafe fn tile_impl<L: Isa, S: Rows>(q: *const f32, keys: &Keys<'_, S>, scratch: &mut Vec<f32>, out: *mut f32) {
    match keys.tile.tokens * keys.tile.heads {
        1 => rows::<L, S, 1>(q, keys, scratch, out),
        2 => rows::<L, S, 2>(q, keys, scratch, out),
        3 => rows::<L, S, 3>(q, keys, scratch, out),
        4 => rows::<L, S, 4>(q, keys, scratch, out),
        5 => rows::<L, S, 5>(q, keys, scratch, out),
        6 => rows::<L, S, 6>(q, keys, scratch, out),
        7 => rows::<L, S, 7>(q, keys, scratch, out),
        8 => rows::<L, S, 8>(q, keys, scratch, out),
        9 => rows::<L, S, 9>(q, keys, scratch, out),
        10 => rows::<L, S, 10>(q, keys, scratch, out),
        11 => rows::<L, S, 11>(q, keys, scratch, out),
        _ => rows::<L, S, 12>(q, keys, scratch, out),
    }
}

#[inline(always)]
unsafe fn tile_f16<L: Isa>(q: *const f32, keys: &Keys<'_, &[u16]>, scratch: &mut Vec<f32>, out: *mut f32) {
    tile_impl::<L, &[u16]>(q, keys, scratch, out)
}

#[inline(always)]
unsafe fn tile_q8<L: Isa>(q: *const f32, keys: &Keys<'_, Q8Slab<'_>>, scratch: &mut Vec<f32>, out: *mut f32) {
    tile_impl::<L, Q8Slab<'_>>(q, keys, scratch, out)
}

simd_entry!(fn attend_f16_unchecked => tile_f16(
    q: *const f32, keys: &Keys<'_, &[u16]>, scratch: &mut Vec<f32>, out: *mut f32
));

simd_entry!(fn attend_q8_unchecked => tile_q8(
    q: *const f32, keys: &Keys<'_, Q8Slab<'_>>, scratch: &mut Vec<f32>, out: *mut f32
));

/// A slab type the kernel has an entry point for (one copy per instruction set each).
pub trait Attend: Rows {
    /// The kernel over `keys`.
    ///
    /// # Safety
    ///
    /// `keys.kv.holds(lo, n, d)`, `lo + tokens <= n`, `1 <= tokens * heads <= MAX_ROWS`,
    /// `heads <= MAX_G`, and `q` / `out` valid for the tile's rows (position `t`, head
    /// `h`: `d` floats at `t * stride + h * d`).
    unsafe fn attend(path: Path, q: *const f32, keys: &Keys<'_, Self>, scratch: &mut Vec<f32>, out: *mut f32);
}

impl Attend for &[u16] {
    unsafe fn attend(path: Path, q: *const f32, keys: &Keys<'_, Self>, scratch: &mut Vec<f32>, out: *mut f32) {
        attend_f16_unchecked(path, q, keys, scratch, out)
    }
}

impl Attend for Q8Slab<'_> {
    unsafe fn attend(path: Path, q: *const f32, keys: &Keys<'_, Self>, scratch: &mut Vec<f32>, out: *mut f32) {
        attend_q8_unchecked(path, q, keys, scratch, out)
    }
}
