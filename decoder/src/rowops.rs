//! The forward's row-wise blocks as plain loops over the step's buffers: RMSNorm (over
//! rows, and per head on q and k), the gated activations (SwiGLU, GELU-tanh) and the
//! residual add.
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

use crate::lanes::{exp, ld_part, simd_entry, st_part, Isa, Path, W};

/// Elements of output below which a step stays on the calling thread (a decode step's
/// few rows cost less than waking the pool).
const PAR_MIN_ELEMS: usize = 1 << 15;

/// Runs `f(row index, row)` over the rows of `out` `(rows, w)`, in parallel when there is
/// enough work.
pub(crate) fn rows<F>(out: &mut [f32], w: usize, f: F)
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
unsafe fn rms_row<L: Isa>(x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
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
/// A family whose norm is `x * (1 + w)` (Gemma) passes `1 + w`, added once at load in f32
/// (Hugging Face adds it in f32 too, so the bits are the same).
pub fn rms_norm(path: Path, x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let d = w.len();
    rows(y, d, |i, y| rms_norm_row(path, &x[i * d..(i + 1) * d], w, eps, y));
}

/// `silu(g) * u` on 16 lanes (a plain function, not a closure: a closure would be
/// compiled apart from the caller's instruction set and call the intrinsics out of line).
#[inline(always)]
unsafe fn swiglu16<L: Isa>(g: L::V, u: L::V) -> L::V {
    L::mul(L::div(g, L::add(L::splat(1.0), exp::<L>(L::sub(L::zero(), g)))), u)
}

/// One row of SwiGLU: `act = silu(g) * u` with `silu(g) = g / (1 + exp(-g))` (Hugging
/// Face's `F.silu(gate) * up`), `exp` the [`crate::lanes::exp`] polynomial.
#[inline(always)]
unsafe fn swiglu_row_impl<L: Isa>(g: &[f32], u: &[f32], act: &mut [f32]) {
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
pub fn swiglu(path: Path, gu: &[f32], act: &mut [f32], inter: usize) {
    rows(act, inter, |i, a| {
        let (g, u) = gu[i * 2 * inter..(i + 1) * 2 * inter].split_at(inter);
        swiglu_row(path, g, u, a)
    });
}

/// The residual add `x += y`, both `(rows, d)`.
pub fn add(x: &mut [f32], y: &[f32], d: usize) {
    rows(x, d, |i, x| x.iter_mut().zip(&y[i * d..(i + 1) * d]).for_each(|(x, &y)| *x += y));
}

/// Per-head RMSNorm in place (Qwen3's and Gemma 3's q/k norms, over `head_dim` before
/// RoPE): in each row of `x` `(rows, stride)`, the `q_heads` heads of `D = q_w.len()`
/// from column 0 are normed with weight `q_w`, the `k_heads` heads after them with `k_w`
/// (`(N, H*D + 2*H_kv*D)` rows: q heads, then k heads, then v untouched). Each head is
/// [`rms_norm_row`] of its own `D` values.
pub fn head_rms_norm(
    path: Path,
    x: &mut [f32],
    stride: usize,
    (q_heads, q_w): (usize, &[f32]),
    (k_heads, k_w): (usize, &[f32]),
    eps: f32,
) {
    let d = q_w.len();
    if d == 0 || k_w.len() != d || (q_heads + k_heads) * d > stride {
        return;
    }
    rows(x, stride, |_, row| {
        let mut tmp = [0.0f32; 256];
        let mut heap = Vec::new();
        let src: &mut [f32] = if d <= tmp.len() {
            &mut tmp[..d]
        } else {
            heap.resize(d, 0.0);
            &mut heap
        };
        for (h, head) in row[..(q_heads + k_heads) * d].chunks_exact_mut(d).enumerate() {
            src.copy_from_slice(head);
            rms_norm_row(path, src, if h < q_heads { q_w } else { k_w }, eps, head);
        }
    });
}

/// Full-width RMSNorm of the queries and keys in place (OLMoE's q/k norms, before
/// RoPE): in each row of `x` `(rows, stride)`, columns `0..q_w.len()` (every query head)
/// are normed as one vector with weight `q_w`, and the `k_w.len()` columns after them
/// (every key head) with `k_w`; the values after them are untouched. Each is
/// [`rms_norm_row`] of its own values.
pub fn full_qk_rms_norm(path: Path, x: &mut [f32], stride: usize, q_w: &[f32], k_w: &[f32], eps: f32) {
    let (qw, kw) = (q_w.len(), k_w.len());
    if qw + kw > stride {
        return;
    }
    rows(x, stride, |_, row| {
        let mut src = row[..qw + kw].to_vec();
        let (sq, sk) = src.split_at_mut(qw);
        let (q, rest) = row.split_at_mut(qw);
        rms_norm_row(path, sq, q_w, eps, q);
        rms_norm_row(path, sk, k_w, eps, &mut rest[..kw]);
    });
}

/// gpt-oss's clamped SwiGLU on 16 lanes: `g' = min(g, limit)`, `u' = clamp(u, -limit,
/// limit)`, `(u' + 1) * (g' * sigmoid(alpha * g'))` with `sigmoid(x) = 1 / (1 + exp(-x))`
/// (transformers' `GptOssExperts._apply_gate`).
#[inline(always)]
unsafe fn clamped_swiglu16<L: Isa>(g: L::V, u: L::V, limit: L::V, alpha: L::V) -> L::V {
    let g = L::min(g, limit);
    let u = L::min(L::max(u, L::sub(L::zero(), limit)), limit);
    let z = L::mul(g, alpha);
    let sig = L::div(L::splat(1.0), L::add(L::splat(1.0), exp::<L>(L::sub(L::zero(), z))));
    L::mul(L::add(u, L::splat(1.0)), L::mul(g, sig))
}

/// One row of the clamped SwiGLU (see `clamped_swiglu16`).
#[inline(always)]
unsafe fn clamped_swiglu_row_impl<L: Isa>(g: &[f32], u: &[f32], act: &mut [f32], limit: f32, alpha: f32) {
    let n = g.len().min(u.len()).min(act.len());
    let full = n / W * W;
    let (lv, av) = (L::splat(limit), L::splat(alpha));
    for c in (0..full).step_by(W) {
        let v = clamped_swiglu16::<L>(L::ld(g.as_ptr().add(c)), L::ld(u.as_ptr().add(c)), lv, av);
        L::st(act.as_mut_ptr().add(c), v);
    }
    if n > full {
        let (gv, uv) = (ld_part::<L>(g.as_ptr().add(full), n - full), ld_part::<L>(u.as_ptr().add(full), n - full));
        st_part::<L>(act.as_mut_ptr().add(full), clamped_swiglu16::<L>(gv, uv, lv, av), n - full);
    }
}

simd_entry!(
    /// One row of gpt-oss's clamped SwiGLU on `path`; `n = min(len)`.
    #[doc(hidden)]
    pub fn clamped_swiglu_row => clamped_swiglu_row_impl(g: &[f32], u: &[f32], act: &mut [f32], limit: f32, alpha: f32)
);

/// `act = (clamp(up) + 1) * glu(min(gate, limit))` per row (gpt-oss's experts): `gu`
/// `(rows, 2I)` holds gate then up side by side; `act` is `(rows, I)`.
pub fn clamped_swiglu(path: Path, gu: &[f32], act: &mut [f32], inter: usize, (limit, alpha): (f32, f32)) {
    rows(act, inter, |i, a| {
        let (g, u) = gu[i * 2 * inter..(i + 1) * 2 * inter].split_at(inter);
        clamped_swiglu_row(path, g, u, a, limit, alpha)
    });
}

/// `gelu_tanh(g) * u` on 16 lanes, with `gelu_tanh(g) = g * sigmoid(2 * inner) =
/// g / (1 + exp(-2 * inner))`, `inner = sqrt(2/pi) * (g + 0.044715 * g^3)`: torch's
/// `0.5 * g * (1 + tanh(inner))` rewritten (`1 + tanh(y) = 2 / (1 + exp(-2y))`) so no
/// `1 + tanh` cancels for negative `g`.
#[inline(always)]
unsafe fn gelu_tanh16<L: Isa>(g: L::V, u: L::V) -> L::V {
    let g3 = L::mul(L::mul(g, g), g);
    let inner = L::mul(L::splat(SQRT_2_OVER_PI), L::fma(L::splat(0.044715), g3, g));
    let e = exp::<L>(L::mul(L::splat(-2.0), inner));
    L::mul(L::div(g, L::add(L::splat(1.0), e)), u)
}

/// `sqrt(2 / pi)` in f32.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// One row of the GELU-tanh gated activation (see `gelu_tanh16`).
#[inline(always)]
unsafe fn gelu_tanh_row_impl<L: Isa>(g: &[f32], u: &[f32], act: &mut [f32]) {
    let n = g.len().min(u.len()).min(act.len());
    let full = n / W * W;
    for c in (0..full).step_by(W) {
        L::st(act.as_mut_ptr().add(c), gelu_tanh16::<L>(L::ld(g.as_ptr().add(c)), L::ld(u.as_ptr().add(c))));
    }
    if n > full {
        let (gv, uv) = (ld_part::<L>(g.as_ptr().add(full), n - full), ld_part::<L>(u.as_ptr().add(full), n - full));
        st_part::<L>(act.as_mut_ptr().add(full), gelu_tanh16::<L>(gv, uv), n - full);
    }
}

simd_entry!(
    /// One row of `gelu_tanh(gate) * up` on `path` (torch's `gelu(approximate="tanh")`);
    /// `n = min(len)`.
    #[doc(hidden)]
    pub fn gelu_tanh_row => gelu_tanh_row_impl(g: &[f32], u: &[f32], act: &mut [f32])
);

/// `act = gelu_tanh(gate) * up` per row (Gemma's MLP): `gu` `(rows, 2I)` holds gate then
/// up side by side; `act` is `(rows, I)`.
pub fn gelu_tanh_gated(path: Path, gu: &[f32], act: &mut [f32], inter: usize) {
    rows(act, inter, |i, a| {
        let (g, u) = gu[i * 2 * inter..(i + 1) * 2 * inter].split_at(inter);
        gelu_tanh_row(path, g, u, a)
    });
}

/// `x * sigmoid(g)` of one row in place, `sigmoid(g) = 1 / (1 + exp(-g))` with the lanes'
/// `exp` (Qwen3.5's attention output gate).
#[inline(always)]
unsafe fn sigmoid_gate_impl<L: Isa>(x: &mut [f32], g: &[f32]) {
    let n = x.len().min(g.len());
    let full = n / W * W;
    let one = L::splat(1.0);
    for c in (0..full).step_by(W) {
        let s = L::div(one, L::add(one, exp::<L>(L::sub(L::zero(), L::ld(g.as_ptr().add(c))))));
        L::st(x.as_mut_ptr().add(c), L::mul(L::ld(x.as_ptr().add(c)), s));
    }
    if n > full {
        let s = L::div(one, L::add(one, exp::<L>(L::sub(L::zero(), ld_part::<L>(g.as_ptr().add(full), n - full)))));
        st_part::<L>(x.as_mut_ptr().add(full), L::mul(ld_part::<L>(x.as_ptr().add(full), n - full), s), n - full);
    }
}

simd_entry!(
    /// One row of the output gate on `path` (see `sigmoid_gate_impl`).
    #[doc(hidden)]
    pub fn sigmoid_gate_row => sigmoid_gate_impl(x: &mut [f32], g: &[f32])
);

/// `x *= sigmoid(g)` elementwise, both `(rows, w)`, row by row.
pub fn sigmoid_gate(path: Path, x: &mut [f32], g: &[f32], w: usize) {
    rows(x, w, |i, row| sigmoid_gate_row(path, row, &g[i * w..(i + 1) * w]));
}
