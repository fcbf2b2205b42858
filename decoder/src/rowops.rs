//! The forward's row-wise steps as plain loops over the step's buffers: RMSNorm, RoPE,
//! SwiGLU and the residual add.
//!
//! Why not Candle ops: each Candle op allocates its result, zeroes it, and (above 64K
//! elements) runs on its own thread pool; at SmolLM2's size that bookkeeping and the
//! scalar `exp` of `silu` cost more than the work. Here each step writes into buffers the
//! forward keeps between steps, on the runner's rayon pool.
//!
//! Batch invariance: every output row is computed by one function of that input row
//! alone (and its token's position), by one thread; rayon only decides which thread. The
//! vector loops use [`crate::lanes`], so every instruction set gives the same bits.

use rayon::prelude::*;

use crate::lanes::{exp, ld_part, simd_entry, st_part, Lanes, Path, W};

/// Elements of output below which a step stays on the calling thread (a decode step's
/// few rows cost less than waking the pool).
const PAR_MIN_ELEMS: usize = 1 << 15;

/// Runs `f(row index, row)` over the rows of `out` `(rows, w)`, in parallel when there is
/// enough work.
fn rows<F>(out: &mut [f32], w: usize, f: F)
where
    F: Fn(usize, &mut [f32]) + Sync,
{
    if w == 0 {
        return;
    }
    if out.len() < PAR_MIN_ELEMS {
        out.chunks_exact_mut(w).enumerate().for_each(|(i, o)| f(i, o));
    } else {
        let min = (PAR_MIN_ELEMS / 4 / w).max(1);
        out.par_chunks_exact_mut(w).enumerate().with_min_len(min).for_each(|(i, o)| f(i, o));
    }
}

/// One row of RMSNorm: `y = (x * inv) * w`, `inv = 1 / sqrt(ss / d + eps)`, `ss` the sum of
/// squares as 16 lane FMA chains (16-strided, zero-padded) and the fixed tree. Hugging
/// Face: `w * (x * rsqrt(mean(x^2) + eps))` in f32.
#[inline(always)]
unsafe fn rms_row<L: Lanes>(x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let d = x.len().min(w.len()).min(y.len());
    let (full, tail) = (d / W * W, d % W);
    let mut acc = L::zero();
    for c in (0..full).step_by(W) {
        let v = L::ld(x.as_ptr().add(c));
        acc = L::fma(v, v, acc);
    }
    if tail > 0 {
        let v = ld_part::<L>(x.as_ptr().add(full), tail);
        acc = L::fma(v, v, acc);
    }
    let inv = L::splat(1.0 / (L::hsum(acc) / d as f32 + eps).sqrt());
    for c in (0..full).step_by(W) {
        let v = L::mul(L::mul(L::ld(x.as_ptr().add(c)), inv), L::ld(w.as_ptr().add(c)));
        L::st(y.as_mut_ptr().add(c), v);
    }
    if tail > 0 {
        let v = L::mul(L::mul(ld_part::<L>(x.as_ptr().add(full), tail), inv), ld_part::<L>(w.as_ptr().add(full), tail));
        st_part::<L>(y.as_mut_ptr().add(full), v, tail);
    }
}

simd_entry!(
    /// One row of RMSNorm on `path` (see `rms_row`); `d = min(len)`.
    #[doc(hidden)]
    pub fn rms_norm_row => rms_row(x: &[f32], w: &[f32], eps: f32, y: &mut [f32])
);

/// RMSNorm of every row of `x` `(rows, d)` into `y` (the same shape), weight `w` `(d,)`.
pub(crate) fn rms_norm(path: Path, x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let d = w.len();
    rows(y, d, |i, y| rms_norm_row(path, &x[i * d..(i + 1) * d], w, eps, y));
}

/// `silu(g) * u` on 16 lanes (a plain function, not a closure: a closure would be
/// compiled apart from the caller's instruction set and call the intrinsics out of line).
#[inline(always)]
unsafe fn swiglu16<L: Lanes>(g: L::V, u: L::V) -> L::V {
    L::mul(L::div(g, L::add(L::splat(1.0), exp::<L>(L::sub(L::zero(), g)))), u)
}

/// One row of SwiGLU: `act = silu(g) * u` with `silu(g) = g / (1 + exp(-g))` (Hugging
/// Face's `F.silu(gate) * up`), `exp` the [`crate::lanes::exp`] polynomial.
#[inline(always)]
unsafe fn swiglu_row_impl<L: Lanes>(g: &[f32], u: &[f32], act: &mut [f32]) {
    let n = g.len().min(u.len()).min(act.len());
    let full = n / W * W;
    for c in (0..full).step_by(W) {
        L::st(act.as_mut_ptr().add(c), swiglu16::<L>(L::ld(g.as_ptr().add(c)), L::ld(u.as_ptr().add(c))));
    }
    if n > full {
        let (gv, uv) = (ld_part::<L>(g.as_ptr().add(full), n - full), ld_part::<L>(u.as_ptr().add(full), n - full));
        st_part::<L>(act.as_mut_ptr().add(full), swiglu16::<L>(gv, uv), n - full);
    }
}

simd_entry!(
    /// One row of SwiGLU on `path` (see `swiglu_row_impl`); `n = min(len)`.
    #[doc(hidden)]
    pub fn swiglu_row => swiglu_row_impl(g: &[f32], u: &[f32], act: &mut [f32])
);

/// `act = silu(gate) * up` per row: `gu` `(rows, 2I)` holds gate then up side by side
/// (the fused projection's output); `act` is `(rows, I)`.
pub(crate) fn swiglu(path: Path, gu: &[f32], act: &mut [f32], inter: usize) {
    rows(act, inter, |i, a| {
        let (g, u) = gu[i * 2 * inter..(i + 1) * 2 * inter].split_at(inter);
        swiglu_row(path, g, u, a)
    });
}

/// `x += y`, both `(rows, d)`.
pub(crate) fn add(x: &mut [f32], y: &[f32], d: usize) {
    rows(x, d, |i, x| x.iter_mut().zip(&y[i * d..(i + 1) * d]).for_each(|(x, &y)| *x += y));
}

/// RoPE in place on the heads of each row of `x` `(rows, stride)`: `heads` heads of `D` from
/// column `col`. Token `t` uses `cos`/`sin` row `t` `(D/2,)`. Half-split pairs:
/// `x[i] <- x[i] cos - x[i+D/2] sin`, `x[i+D/2] <- x[i+D/2] cos + x[i] sin` (Hugging Face's
/// `x * cos + rotate_half(x) * sin`: products rounded, then summed).
#[allow(clippy::too_many_arguments)]
pub(crate) fn rope(x: &mut [f32], stride: usize, col: usize, heads: usize, d: usize, cos: &[f32], sin: &[f32]) {
    let half = d / 2;
    rows(x, stride, |t, row| {
        let (c, s) = (&cos[t * half..(t + 1) * half], &sin[t * half..(t + 1) * half]);
        for head in row[col..col + heads * d].chunks_exact_mut(d) {
            let (a, b) = head.split_at_mut(half);
            for i in 0..half {
                let (x1, x2) = (a[i], b[i]);
                a[i] = x1 * c[i] - x2 * s[i];
                b[i] = x2 * c[i] + x1 * s[i];
            }
        }
    });
}

/// RoPE tables: `cos`, `sin` `(N, D/2)` for angles `f32(pos) * inv_freq[i]` in f32, as
/// Hugging Face computes them.
pub(crate) fn rope_tables(pos: &[usize], inv_freq: &[f32], cos: &mut Vec<f32>, sin: &mut Vec<f32>) {
    cos.clear();
    sin.clear();
    for &p in pos {
        for &f in inv_freq {
            let a = p as f32 * f;
            cos.push(a.cos());
            sin.push(a.sin());
        }
    }
}
