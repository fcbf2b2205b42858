//! The row operations BERT needs and tl-decoder does not have (it is RMSNorm, SwiGLU and
//! causal paged attention): LayerNorm with a bias, biases, and bidirectional attention
//! over one input's own rows (GELU is in [`crate::lanes`]). Each is a function of one row
//! (one input and head, for attention) computed in a fixed order, so a row's bits never
//! depend on its neighbours, on the thread count or on the instruction set: the vector
//! code is written once against tl-quant's [`Isa`] lanes, whose every operation rounds
//! alike on every path (docs/spec/encoders.md, "Arithmetic").

use rayon::prelude::*;
use tl_quant::simd::{Isa, W};
use tl_quant::{simd_entry, Path};

use crate::gemm::{gemm, Panels};
use crate::lanes::exp;

/// `x + b` on every `(n, d)` row.
pub fn add_bias(x: &mut [f32], b: &[f32]) {
    if b.is_empty() {
        return;
    }
    for row in x.chunks_exact_mut(b.len()) {
        for (v, &bv) in row.iter_mut().zip(b) {
            *v += bv;
        }
    }
}

/// Up to 16 f32 from `p`, `fill` after `len`.
#[inline(always)]
unsafe fn ld_part<L: Isa>(p: *const f32, len: usize, fill: f32) -> L::V {
    let mut buf = [fill; W];
    std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), len.min(W));
    L::ld(buf.as_ptr())
}

/// The first `len` (at most 16) lanes of `v` to `p`.
#[inline(always)]
unsafe fn st_part<L: Isa>(p: *mut f32, v: L::V, len: usize) {
    let mut buf = [0.0f32; W];
    L::st(buf.as_mut_ptr(), v);
    std::ptr::copy_nonoverlapping(buf.as_ptr(), p, len.min(W));
}

/// The sum of `x` as 16 lane sums (element `i` into lane `i % 16`, in order; zeros pad the
/// last vector), by [`Isa::hsum`]'s fixed tree. `f` maps each vector first.
#[inline(always)]
unsafe fn lane_sum<L: Isa>(x: &[f32], shift: f32, square: bool) -> f32 {
    let d = x.len();
    let (full, tail) = (d / W * W, d % W);
    let s = L::splat(shift);
    let mut acc = L::zero();
    for c in (0..full).step_by(W) {
        let v = L::sub(L::ld(x.as_ptr().add(c)), s);
        acc = if square { L::fma(v, v, acc) } else { L::add(acc, v) };
    }
    if tail > 0 {
        // Padding with `shift` makes the padded lanes' terms +0.0.
        let v = L::sub(ld_part::<L>(x.as_ptr().add(full), tail, shift), s);
        acc = if square { L::fma(v, v, acc) } else { L::add(acc, v) };
    }
    L::hsum(acc)
}

/// One row of `x = LayerNorm(x + r)` (see [`add_layer_norm`]).
#[inline(always)]
unsafe fn layer_norm_row<L: Isa>(x: &mut [f32], r: &[f32], w: &[f32], b: &[f32], eps: f32) {
    let d = x.len().min(w.len()).min(b.len());
    let x = &mut x[..d];
    if r.len() >= d {
        for (v, &rv) in x.iter_mut().zip(r) {
            *v += rv;
        }
    }
    let mean = lane_sum::<L>(x, 0.0, false) / d as f32;
    let var = lane_sum::<L>(x, mean, true) / d as f32;
    let inv = L::splat(1.0 / (var + eps).sqrt());
    let m = L::splat(mean);
    let (full, tail) = (d / W * W, d % W);
    let p = x.as_mut_ptr();
    for c in (0..full).step_by(W) {
        let v = L::mul(L::sub(L::ld(p.add(c)), m), inv);
        L::st(p.add(c), L::fma(v, L::ld(w.as_ptr().add(c)), L::ld(b.as_ptr().add(c))));
    }
    if tail > 0 {
        let v = L::mul(L::sub(ld_part::<L>(p.add(full), tail, 0.0), m), inv);
        let (wv, bv) = (ld_part::<L>(w.as_ptr().add(full), tail, 0.0), ld_part::<L>(b.as_ptr().add(full), tail, 0.0));
        st_part::<L>(p.add(full), L::fma(v, wv, bv), tail);
    }
}

simd_entry!(
    /// One row of LayerNorm on `path`; `r` empty for none.
    fn layer_norm_row_on => layer_norm_row(x: &mut [f32], r: &[f32], w: &[f32], b: &[f32], eps: f32)
);

/// `x = LayerNorm(x + r)` on every `(n, d)` row (the residual add first, as BERT's
/// post-norm layers do), in f32: the mean as a 16-lane sum and the fixed tree, divided by
/// `d`; the biased variance likewise over `(v - mean)^2` (fused multiply-adds);
/// `fma((v - mean) * inv, w, b)` with `inv = 1 / sqrt(var + eps)`. Rows in parallel.
pub fn add_layer_norm(path: Path, x: &mut [f32], r: Option<&[f32]>, w: &[f32], b: &[f32], eps: f32) {
    let d = w.len();
    if d == 0 {
        return;
    }
    x.par_chunks_exact_mut(d).enumerate().with_min_len(16).for_each(|(i, row)| {
        let r = r.map_or(&[][..], |r| &r[i * d..(i + 1) * d]);
        layer_norm_row_on(path, row, r, w, b, eps)
    });
}

/// Softmax of one row of scores in place: `s * scale`, the max subtracted, [`exp`], the
/// sum as 16 lane sums and the fixed tree, each value divided by the sum.
#[inline(always)]
unsafe fn softmax_row<L: Isa>(s: &mut [f32], scale: f32) {
    let t = s.len();
    let (full, tail) = (t / W * W, t % W);
    let p = s.as_mut_ptr();
    let sc = L::splat(scale);
    let mut mx = L::splat(f32::NEG_INFINITY);
    for c in (0..full).step_by(W) {
        let v = L::mul(L::ld(p.add(c)), sc);
        L::st(p.add(c), v);
        mx = L::max(mx, v);
    }
    if tail > 0 {
        let v = L::mul(ld_part::<L>(p.add(full), tail, f32::NEG_INFINITY), sc);
        st_part::<L>(p.add(full), v, tail);
        mx = L::max(mx, v);
    }
    let mut lanes = [0.0f32; W];
    L::st(lanes.as_mut_ptr(), mx);
    let max = L::splat(lanes.iter().fold(f32::NEG_INFINITY, |a, &b| if a > b { a } else { b }));
    let mut acc = L::zero();
    for c in (0..full).step_by(W) {
        let e = exp::<L>(L::sub(L::ld(p.add(c)), max));
        L::st(p.add(c), e);
        acc = L::add(acc, e);
    }
    if tail > 0 {
        let e = exp::<L>(L::sub(ld_part::<L>(p.add(full), tail, 0.0), max));
        // The padded lanes hold e^(0 - max): left out of the sum.
        let e = ld_part_of::<L>(e, tail);
        st_part::<L>(p.add(full), e, tail);
        acc = L::add(acc, e);
    }
    let sum = L::splat(L::hsum(acc));
    for c in (0..full).step_by(W) {
        L::st(p.add(c), L::div(L::ld(p.add(c)), sum));
    }
    if tail > 0 {
        st_part::<L>(p.add(full), L::div(ld_part::<L>(p.add(full), tail, 0.0), sum), tail);
    }
}

/// `v`'s first `len` lanes, zeros after.
#[inline(always)]
unsafe fn ld_part_of<L: Isa>(v: L::V, len: usize) -> L::V {
    let mut buf = [0.0f32; W];
    L::st(buf.as_mut_ptr(), v);
    buf[len.min(W)..].fill(0.0);
    L::ld(buf.as_ptr())
}

simd_entry!(
    /// One row's softmax on `path`.
    fn softmax_row_on => softmax_row(s: &mut [f32], scale: f32)
);

/// Query rows whose scores are computed together in one attention task.
const QB: usize = 64;

/// Scratch of one attention task, kept between heads.
#[derive(Default)]
pub struct Scratch {
    kt: Vec<f32>,
    v: Vec<f32>,
    s: Vec<f32>,
}

/// Bidirectional attention of one input's head `h`: `qkv` `(T, 3d)` rows (q, k, v side by
/// side, heads of `hd` contiguous within each), into columns `h hd ..` of `out` (rows `d`
/// apart). Scores `S = Q K^T` (each one FMA chain over the head's dimensions, [`gemm`]),
/// per row `softmax(S * scale)` ([`softmax_row`]), then `P V` (each output one FMA chain
/// over the keys in order). With `window` `w`, query `i` sees keys `|i - j| <= w` only
/// (ModernBERT's local layers).
///
/// # Safety
///
/// `out` holds `T` rows of `d` floats; `qkv` holds `T` rows of `3 d`.
#[allow(clippy::too_many_arguments)] // the input, its shape, the head, the output, scratch
pub unsafe fn attention_head(
    path: Path,
    qkv: &[f32],
    t: usize,
    heads: usize,
    hd: usize,
    h: usize,
    window: Option<usize>,
    out: *mut f32,
    sc: &mut Scratch,
) {
    let d = heads * hd;
    if t == 0 || hd == 0 {
        return;
    }
    let scale = 1.0 / (hd as f32).sqrt();
    // K^T in panels of 16 keys: kt[p][c][j % 16] = k[16 p + j % 16][c].
    let kp = t.div_ceil(W);
    sc.kt.clear();
    sc.kt.resize(kp * hd * W, 0.0);
    for j in 0..t {
        let k = &qkv[j * 3 * d + d + h * hd..][..hd];
        let (p, l) = (j / W, j % W);
        for (c, &kv) in k.iter().enumerate() {
            sc.kt[(p * hd + c) * W + l] = kv;
        }
    }
    // V in panels of 16 of the head's dimensions: v[p][j][c % 16] = v[j][16 p + c % 16].
    let vp = hd.div_ceil(W);
    sc.v.clear();
    sc.v.resize(vp * t * W, 0.0);
    for j in 0..t {
        let v = &qkv[j * 3 * d + 2 * d + h * hd..][..hd];
        for (c, &vv) in v.iter().enumerate() {
            sc.v[((c / W) * t + j) * W + c % W] = vv;
        }
    }
    // Queries in blocks of QB rows, so the scores take QB x T floats rather than T x T
    // (ModernBERT reads 8192 tokens), and a window's block reads only the keys it can see.
    // Every score, softmax and output chain is the one of the whole matrix: a block only
    // decides which rows run together.
    sc.s.resize(QB.min(t) * t, 0.0);
    for i0 in (0..t).step_by(QB) {
        let i1 = (i0 + QB).min(t);
        // The block's keys, from a panel boundary (the K^T panels hold 16 keys each).
        let (k0, k1) = window.map_or((0, t), |w| (i0.saturating_sub(w) / W * W, (i1 - 1 + w).saturating_add(1).min(t)));
        let (rows, n) = (i1 - i0, k1 - k0);
        let s = &mut sc.s[..rows * n];
        let kt = Panels { p: sc.kt.as_ptr().add(k0 / W * hd * W), k: hd, stride: hd * W, bias: std::ptr::null() };
        gemm(path, qkv.as_ptr().add(i0 * 3 * d + h * hd), 3 * d, rows, kt, n, s.as_mut_ptr(), n);
        for (r, row) in s.chunks_exact_mut(n).enumerate() {
            // A window keeps keys `|i - j| <= w`: the softmax runs over those alone (key `j`
            // into lane `(j - lo) % 16`) and the others' weights are +0.0, which leave every
            // FMA chain of `P V` unchanged (`fma(+0, v, acc) = acc`), so starting the chains
            // at key k0 rather than 0 changes no bit either.
            let i = i0 + r;
            let (lo, hi) =
                window.map_or((0, t), |w| (i.saturating_sub(w), i.saturating_add(w).saturating_add(1).min(t)));
            softmax_row_on(path, &mut row[lo - k0..hi - k0], scale);
            row[..lo - k0].fill(0.0);
            row[hi - k0..].fill(0.0);
        }
        let v = Panels { p: sc.v.as_ptr().add(k0 * W), k: n, stride: t * W, bias: std::ptr::null() };
        gemm(path, s.as_ptr(), n, rows, v, hd, out.add(i0 * d + h * hd), d);
    }
}

/// A pointer to the attention output that crosses to rayon's threads.
#[derive(Clone, Copy)]
struct Out(*mut f32);
impl Out {
    /// The pointer (a method, so a closure captures the whole `Send` wrapper).
    fn get(self) -> *mut f32 {
        self.0
    }
}
// SAFETY: each task writes only its own input's rows at its own head's columns.
unsafe impl Send for Out {}
// SAFETY: as above.
unsafe impl Sync for Out {}

/// Bidirectional attention of every input: `qkv` `(N, 3d)` holds the inputs' rows stacked
/// (input `i` has `lens[i]` rows), `out` `(N, d)`. One task per input and head
/// ([`attention_head`]), on the rayon pool; a task is computed alone, in one fixed order.
/// `window`: see [`attention_head`].
pub fn attention(
    path: Path,
    qkv: &[f32],
    lens: &[usize],
    (heads, hd): (usize, usize),
    window: Option<usize>,
    out: &mut [f32],
) {
    let d = heads * hd;
    let n: usize = lens.iter().sum();
    assert!(qkv.len() >= n * 3 * d && out.len() >= n * d, "attention: buffers shorter than {n} rows");
    let mut starts = Vec::with_capacity(lens.len());
    let mut at = 0;
    for &t in lens {
        starts.push(at);
        at += t;
    }
    let o = Out(out.as_mut_ptr());
    (0..lens.len() * heads).into_par_iter().for_each_init(Scratch::default, |sc, task| {
        let (i, h) = (task / heads, task % heads);
        let (r0, t) = (starts[i], lens[i]);
        // SAFETY: rows r0 .. r0 + t of both buffers exist (asserted: the lengths sum to
        // n); this task alone writes those rows' columns h hd .. (h + 1) hd.
        unsafe {
            attention_head(path, &qkv[r0 * 3 * d..(r0 + t) * 3 * d], t, heads, hd, h, window, o.get().add(r0 * d), sc)
        };
    });
}
