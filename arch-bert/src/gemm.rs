//! BERT's f32 matrix products: the projections of an f32 checkpoint and attention's two
//! products (`q k^T`, `p v`), all through one register-tiled kernel.
//!
//! Every output element `c[i][n]` is ONE chain of fused multiply-adds over k ascending,
//! started from +0.0: `acc = fma(a[i][k], b[k][n], acc)`. That is tl-quant's f32 contract
//! (`tl_quant::Linear::forward`), so a projection here gives the same bits as tl-quant's
//! kernel on the same weights (a test checks it); tiles, row blocks, threads and the
//! instruction set only decide which chains run side by side, never a chain's operations.
//!
//! Why a kernel of our own: tl-quant's AVX2 tile is 3 rows x 16 columns (6 accumulators,
//! its block formats need the other registers), too few independent chains to hide the
//! FMA latency at BERT's many-row products; with only f32 panels to read, 6 rows x 16
//! columns (12 of AVX2's 16 registers) fit, and AVX-512 takes 6 x 32. The rows are packed
//! `k`-major per 6 (one pointer walks them) and each panel stays in L1 or L2 while a
//! block of 48 rows passes. On AMD EPYC Zen 2, one thread, BERT's shapes: 26-29 GFLOP/s
//! against tl-quant's 9-11 (`tests/kernels.rs`, `gemm_speed`), the FMA peak `tl probe`
//! measures there being 39-43.

use std::cell::Cell;

use rayon::prelude::*;
use tl_quant::simd::{Isa, Portable, W};
use tl_quant::Path;

/// A `[out, inp]` weight matrix in panels of 16 output columns, each panel k-major
/// (`data[p][k][c] = w[16 p + c][k]`), the last panel padded with zeros.
pub struct Packed {
    data: Vec<f32>,
    /// The bias, zero-padded to the panels' width (none: empty).
    bias: Vec<f32>,
    out: usize,
    inp: usize,
}

impl Packed {
    /// Pack row-major `w` `[out, inp]`, and `bias` (`out` values, or none: empty), added
    /// to each output after its chain (`y = chain + b`, one rounding, as a separate add).
    pub fn new(w: &[f32], bias: &[f32], out: usize, inp: usize) -> Packed {
        let panels = out.div_ceil(W);
        let mut data = vec![0.0f32; panels * inp * W];
        for (n, row) in w.chunks_exact(inp.max(1)).take(out).enumerate() {
            let (p, c) = (n / W, n % W);
            for (k, &v) in row.iter().enumerate() {
                data[(p * inp + k) * W + c] = v;
            }
        }
        let bias = if bias.is_empty() {
            Vec::new()
        } else {
            let mut b = vec![0.0f32; panels * W];
            b[..out.min(bias.len())].copy_from_slice(&bias[..out.min(bias.len())]);
            b
        };
        Packed { data, bias, out, inp }
    }

    /// Output features.
    pub fn out(&self) -> usize {
        self.out
    }

    /// Input features.
    pub fn inp(&self) -> usize {
        self.inp
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(&self.data[..]) + std::mem::size_of_val(&self.bias[..])
    }

    /// `y = x W^T`, `x` `(m, inp)`, `y` `(m, out)`, on the current rayon pool.
    pub fn forward(&self, path: Path, x: &[f32], m: usize, y: &mut [f32]) {
        let (k, n) = (self.inp, self.out);
        assert!(x.len() >= m * k && y.len() >= m * n, "gemm: buffers shorter than {m} rows");
        let bias = if self.bias.is_empty() { std::ptr::null() } else { self.bias.as_ptr() };
        let b = Panels { p: self.data.as_ptr(), k, stride: k * W, bias };
        // SAFETY: x holds m rows of k, y m rows of n (asserted), the panels cover n
        // columns and k steps.
        unsafe { par_gemm(path, x.as_ptr(), k, m, b, n, y.as_mut_ptr(), n) }
    }
}

/// Panels of a right-hand matrix `b` `(k, n)`: columns `16 p .. 16 p + 16` at
/// `p + stride * p`, row `k` of a panel 16 contiguous values `16 k` after its start.
#[derive(Clone, Copy)]
pub struct Panels {
    /// The first panel.
    pub p: *const f32,
    /// Rows (the reduction length).
    pub k: usize,
    /// Floats from one panel to the next.
    pub stride: usize,
    /// A bias for the columns, 16 a panel (padded), added to each output after its chain;
    /// null for none.
    pub bias: *const f32,
}

impl Panels {
    /// The panels from panel `p` on.
    ///
    /// # Safety
    ///
    /// `p` is at most the number of panels.
    unsafe fn from(self, p: usize) -> Panels {
        let bias = if self.bias.is_null() { self.bias } else { self.bias.add(p * W) };
        Panels { p: self.p.add(p * self.stride), bias, ..self }
    }
}

/// Rows of `a` per tile.
const MR: usize = 6;

/// A pointer that crosses to rayon's threads: each task writes its own block of `c`.
#[derive(Clone, Copy)]
struct Out(*mut f32);
// SAFETY: tasks write disjoint blocks (distinct rows or distinct columns) of the buffer.
unsafe impl Send for Out {}
// SAFETY: as above.
unsafe impl Sync for Out {}
#[derive(Clone, Copy)]
struct In(*const f32, Panels);
// SAFETY: read only while the call runs; the caller holds the borrows.
unsafe impl Send for In {}
// SAFETY: as above.
unsafe impl Sync for In {}

/// Rows per task: a block of `a` (`ROWS x k` floats) stays in the core's L2 while the
/// panels stream past it.
const ROWS: usize = 48;

/// `c = a b` over the rayon pool: tasks are blocks of [`ROWS`] rows by runs of panels.
///
/// # Safety
///
/// `a` holds `m` rows of `b.k` floats `lda` apart; `c` holds `m` rows of `n` floats `ldc`
/// apart; `b` holds the panels of `n` columns.
#[allow(clippy::too_many_arguments)] // a BLAS-style call: the matrices and their strides
pub unsafe fn par_gemm(path: Path, a: *const f32, lda: usize, m: usize, b: Panels, n: usize, c: *mut f32, ldc: usize) {
    let panels = n.div_ceil(W);
    if m == 0 || panels == 0 {
        return;
    }
    let row_blocks = m.div_ceil(ROWS);
    let threads = rayon::current_num_threads();
    // Enough tasks for every thread to take several (a product of few rows is split by
    // columns too), runs of panels even so the AVX-512 tile's pairs stay whole.
    let runs = (4 * threads).div_ceil(row_blocks).clamp(1, panels.div_ceil(2));
    let per = panels.div_ceil(runs).next_multiple_of(2);
    let runs = panels.div_ceil(per);
    let (inp, out) = (In(a, b), Out(c));
    let task = move |t: usize| {
        let (In(a, b), Out(c)) = (inp, out);
        let (rb, run) = (t / runs, t % runs);
        let (r0, p0) = (rb * ROWS, run * per);
        let rows = ROWS.min(m - r0);
        let (c0, c1) = (p0 * W, ((p0 + per) * W).min(n));
        let b = b.from(p0);
        // SAFETY: rows r0.. and columns c0..c1 lie within the caller's buffers.
        gemm(path, a.add(r0 * lda), lda, rows, b, c1 - c0, c.add(r0 * ldc + c0), ldc);
    };
    let tasks = row_blocks * runs;
    if threads == 1 || tasks == 1 {
        (0..tasks).for_each(task);
    } else {
        (0..tasks).into_par_iter().for_each(task);
    }
}

/// `c = a b` on the calling thread (attention's per-head products, one task's block):
/// 6-row tiles of one 16-column panel on AVX2 (12 accumulator registers of its 16) and
/// in the portable code, of two panels on AVX-512 (12 of its 32).
///
/// # Safety
///
/// As [`par_gemm`].
#[allow(clippy::too_many_arguments)] // as par_gemm
pub unsafe fn gemm(path: Path, a: *const f32, lda: usize, m: usize, b: Panels, n: usize, c: *mut f32, ldc: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use tl_quant::simd::{Avx2, Avx512};
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
        unsafe fn avx512(a: *const f32, lda: usize, m: usize, b: Panels, n: usize, c: *mut f32, ldc: usize) {
            gemm_impl::<Avx512, 2>(a, lda, m, b, n, c, ldc)
        }
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn avx2(a: *const f32, lda: usize, m: usize, b: Panels, n: usize, c: *mut f32, ldc: usize) {
            gemm_impl::<Avx2, 1>(a, lda, m, b, n, c, ldc)
        }
        match path {
            // SAFETY: the CPU has the instructions (checked by `available`).
            Path::Avx512 if path.available() => return avx512(a, lda, m, b, n, c, ldc),
            Path::Avx2 if path.available() => return avx2(a, lda, m, b, n, c, ldc),
            _ => {}
        }
    }
    let _ = path;
    gemm_impl::<Portable, 1>(a, lda, m, b, n, c, ldc)
}

thread_local! {
    /// Each thread's packed rows of `a` ([`ROWS`] x k at most), grown to the largest
    /// product it has run and then reused.
    static PACK: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
}

/// One instruction set's `c = a b`: per block of [`ROWS`] rows, the rows are packed in
/// groups of [`MR`] (`k`-major: the group's `MR` values of one `k` side by side, zeros
/// for missing rows), then every group against each run of `NP` panels (the panels stay
/// in L1 or L2 while the groups pass).
#[inline(always)]
unsafe fn gemm_impl<L: Isa, const NP: usize>(
    a: *const f32,
    lda: usize,
    m: usize,
    b: Panels,
    n: usize,
    c: *mut f32,
    ldc: usize,
) {
    let k = b.k;
    let panels = n.div_ceil(W);
    if m == 0 || panels == 0 {
        return;
    }
    let mut buf = PACK.take();
    let need = ROWS.min(m).next_multiple_of(MR) * k;
    if buf.len() < need {
        buf.resize(need, 0.0);
    }
    let ap = buf.as_mut_ptr();
    let mut r0 = 0;
    while r0 < m {
        let rows = ROWS.min(m - r0);
        let groups = rows.div_ceil(MR);
        for g in 0..groups {
            let valid = MR.min(rows - g * MR);
            let dst = ap.add(g * MR * k);
            for r in 0..MR {
                if r < valid {
                    let src = a.add((r0 + g * MR + r) * lda);
                    for kk in 0..k {
                        *dst.add(kk * MR + r) = *src.add(kk);
                    }
                } else {
                    for kk in 0..k {
                        *dst.add(kk * MR + r) = 0.0;
                    }
                }
            }
        }
        let mut p = 0;
        while p < panels {
            let take = NP.min(panels - p);
            let cols = (n - p * W).min(take * W);
            let bp = b.from(p);
            for g in 0..groups {
                let valid = MR.min(rows - g * MR);
                let cr = c.add((r0 + g * MR) * ldc + p * W);
                if take == NP {
                    tile::<L, NP>(ap.add(g * MR * k), bp, cr, ldc, valid, cols)
                } else {
                    tile::<L, 1>(ap.add(g * MR * k), bp, cr, ldc, valid, cols)
                }
            }
            p += take;
        }
        r0 += rows;
    }
    PACK.set(buf);
}

/// [`MR`] packed rows by `NP` panels (`rows` of the rows and `cols` of the columns kept):
/// `MR * NP` accumulators, each lane one output element's FMA chain over k.
#[inline(always)]
unsafe fn tile<L: Isa, const NP: usize>(a: *const f32, b: Panels, c: *mut f32, ldc: usize, rows: usize, cols: usize) {
    let mut acc = [[L::zero(); NP]; MR];
    let mut bk = [b.p; NP];
    for (q, p) in bk.iter_mut().enumerate() {
        *p = b.p.add(q * b.stride);
    }
    for k in 0..b.k {
        let mut bv = [L::zero(); NP];
        #[allow(clippy::needless_range_loop)] // indices keep the accumulators in registers
        for q in 0..NP {
            bv[q] = L::ld(bk[q].add(k * W));
        }
        #[allow(clippy::needless_range_loop)]
        for r in 0..MR {
            let x = L::splat_at(a.add(k * MR + r));
            for q in 0..NP {
                acc[r][q] = L::fma(x, bv[q], acc[r][q]);
            }
        }
    }
    let mut bias = [L::zero(); NP];
    if !b.bias.is_null() {
        for (q, v) in bias.iter_mut().enumerate() {
            *v = L::ld(b.bias.add(q * W));
        }
    }
    for (r, acc) in acc.iter().enumerate().take(rows) {
        for (q, &v) in acc.iter().enumerate() {
            let at = q * W;
            if at >= cols {
                break;
            }
            let v = if b.bias.is_null() { v } else { L::add(v, bias[q]) };
            let dst = c.add(r * ldc + at);
            if cols - at >= W {
                L::st(dst, v);
            } else {
                let mut buf = [0.0f32; W];
                L::st(buf.as_mut_ptr(), v);
                std::ptr::copy_nonoverlapping(buf.as_ptr(), dst, cols - at);
            }
        }
    }
}
