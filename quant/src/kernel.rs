//! The one matrix kernel behind every linear layer: `y = x W^T` with `W` row-major
//! `[out, inp]`, so each `y[i][n]` is a dot product of two contiguous rows.
//!
//! Batch invariance: every output element is one call of the same dot product (8 lane
//! accumulators over chunks of 8, a fixed pairwise combine, then the tail in order),
//! computed by one thread. Neither `m`, the tiling, nor the thread count changes which
//! operations run on which values, so row `i` of `y` depends only on row `i` of `x`.

use rayon::prelude::*;

use crate::error::QuantError;
use crate::int4::QLinear;

/// Where the weight rows come from.
#[derive(Clone, Copy)]
pub(crate) enum Rows<'a> {
    /// Row-major f32 `[out, inp]`.
    F32(&'a [f32]),
    /// int4, dequantized a block of rows at a time.
    Q4(&'a QLinear),
}

/// Bytes of weight rows a task keeps hot while every row of `x` streams past it.
const BLOCK_BYTES: usize = 128 * 1024;
/// Weight rows per task, at most (keeps enough tasks for the threads when `out` is small).
const MAX_BLOCK_ROWS: usize = 64;

#[inline(always)]
fn combine(a: [f32; 8]) -> f32 {
    ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]))
}

/// The reference dot product; [`dot4`] must perform exactly these operations per row.
#[inline(always)]
fn dot(x: &[f32], w: &[f32]) -> f32 {
    let n8 = x.len() / 8 * 8;
    let mut acc = [0.0f32; 8];
    for (cx, cw) in x[..n8].chunks_exact(8).zip(w[..n8].chunks_exact(8)) {
        for j in 0..8 {
            acc[j] += cx[j] * cw[j];
        }
    }
    let mut s = combine(acc);
    for (a, b) in x[n8..].iter().zip(&w[n8..]) {
        s += a * b;
    }
    s
}

/// Four dot products of one `x` row against four weight rows, sharing the loads of `x`.
#[inline(always)]
fn dot4(x: &[f32], w0: &[f32], w1: &[f32], w2: &[f32], w3: &[f32]) -> [f32; 4] {
    let n = x.len();
    let n8 = n / 8 * 8;
    let (w0, w1, w2, w3) = (&w0[..n], &w1[..n], &w2[..n], &w3[..n]);
    let mut a0 = [0.0f32; 8];
    let mut a1 = [0.0f32; 8];
    let mut a2 = [0.0f32; 8];
    let mut a3 = [0.0f32; 8];
    let mut k = 0;
    while k < n8 {
        let cx = &x[k..k + 8];
        let (c0, c1, c2, c3) = (&w0[k..k + 8], &w1[k..k + 8], &w2[k..k + 8], &w3[k..k + 8]);
        for j in 0..8 {
            a0[j] += cx[j] * c0[j];
            a1[j] += cx[j] * c1[j];
            a2[j] += cx[j] * c2[j];
            a3[j] += cx[j] * c3[j];
        }
        k += 8;
    }
    let mut s = [combine(a0), combine(a1), combine(a2), combine(a3)];
    for k in n8..n {
        s[0] += x[k] * w0[k];
        s[1] += x[k] * w1[k];
        s[2] += x[k] * w2[k];
        s[3] += x[k] * w3[k];
    }
    s
}

/// `out[i * nb + j] = dot(x row i, w row j)` for a block `w` of `nb` rows.
#[inline(always)]
fn block_generic(x: &[f32], m: usize, inp: usize, w: &[f32], nb: usize, out: &mut [f32]) {
    for i in 0..m {
        let xi = &x[i * inp..(i + 1) * inp];
        let oi = &mut out[i * nb..(i + 1) * nb];
        let mut j = 0;
        while j + 4 <= nb {
            let r = |t: usize| &w[(j + t) * inp..(j + t + 1) * inp];
            oi[j..j + 4].copy_from_slice(&dot4(xi, r(0), r(1), r(2), r(3)));
            j += 4;
        }
        while j < nb {
            oi[j] = dot(xi, &w[j * inp..(j + 1) * inp]);
            j += 1;
        }
    }
}

/// The same block compiled for AVX2: wider registers for the same lane-wise mul and add
/// (no FMA), so the bits equal [`block_generic`]'s.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn block_avx2(x: &[f32], m: usize, inp: usize, w: &[f32], nb: usize, out: &mut [f32]) {
    block_generic(x, m, inp, w, nb, out)
}

fn block(x: &[f32], m: usize, inp: usize, w: &[f32], nb: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        return unsafe { block_avx2(x, m, inp, w, nb, out) };
    }
    block_generic(x, m, inp, w, nb, out)
}

/// `y = x W^T`: `x` `[m, inp]`, `W` `[out, inp]` (from `rows`), `y` `[m, out]`.
/// Callers have checked the weights; this checks `x` and `y`.
pub(crate) fn matmul_t(
    x: &[f32],
    m: usize,
    inp: usize,
    out: usize,
    y: &mut [f32],
    rows: Rows<'_>,
) -> Result<(), QuantError> {
    let xn = m.checked_mul(inp).ok_or(QuantError::ShapeOverflow { what: "x", rows: m, cols: inp })?;
    let yn = m.checked_mul(out).ok_or(QuantError::ShapeOverflow { what: "y", rows: m, cols: out })?;
    if x.len() != xn {
        return Err(QuantError::LengthMismatch { what: "x", expected: xn, got: x.len() });
    }
    if y.len() != yn {
        return Err(QuantError::LengthMismatch { what: "y", expected: yn, got: y.len() });
    }
    if yn == 0 {
        return Ok(());
    }
    let nb_max = (BLOCK_BYTES / 4 / inp.max(1)).clamp(4, MAX_BLOCK_ROWS) / 4 * 4;
    let nblocks = out.div_ceil(nb_max);
    // Each task owns a block of output columns; its (m, nb) result is scattered afterwards.
    let parts: Vec<Vec<f32>> = (0..nblocks)
        .into_par_iter()
        .map_init(Vec::new, |deq: &mut Vec<f32>, b| {
            let n0 = b * nb_max;
            let nb = nb_max.min(out - n0);
            let w: &[f32] = match rows {
                Rows::F32(w) => &w[n0 * inp..(n0 + nb) * inp],
                Rows::Q4(q) => {
                    deq.resize(nb * inp, 0.0); // (nb, inp), reused across this thread's blocks
                    for j in 0..nb {
                        q.dequantize_row(n0 + j, &mut deq[j * inp..(j + 1) * inp]);
                    }
                    &deq[..nb * inp]
                }
            };
            let mut part = vec![0.0f32; m * nb]; // (m, nb)
            block(x, m, inp, w, nb, &mut part);
            part
        })
        .collect();
    for (b, part) in parts.iter().enumerate() {
        let n0 = b * nb_max;
        let nb = part.len() / m;
        for i in 0..m {
            y[i * out + n0..i * out + n0 + nb].copy_from_slice(&part[i * nb..(i + 1) * nb]);
        }
    }
    Ok(())
}
