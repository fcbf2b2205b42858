//! The int8-activation mode (docs/spec/numbers.md "q8 activations"): each activation row
//! quantized on its own in blocks of 32 ([`QRows`]), then integer dot products with the
//! weights' integer codes and the scales applied in a fixed order. Opt-in
//! ([`crate::Linear::with_activations`]); the exact f32 path stays the default.
//!
//! Kinds with an integer kernel: Q8_0 and Q4_0 / Q4_1 / int4 (their own panels,
//! [`crate::pack`]) and Q4_K (the generic panels, [`crate::blocks`]).
//! Per output `y[i][n]`, blocks `b` ascending, from +0.0:
//! - Q8_0 (`w = q d`), Q4_0 (`w = (c - 8) d`): `y = fma(d * dx, I, y)` with `I` the exact
//!   integer `Σ q qx` (Q4_0: `Σ c qx - 8 Σ qx`), as f32 (exact: `|I| < 2^24`);
//! - Q4_1 (`w = c d + m`): `y = fma(d * dx, Σ c qx, y)` then `y = fma(m * dx, Σ qx, y)`;
//! - Q4_K, per sub-block of 32: `y = fma((d sc) dx, Σ c qx, y)` then
//!   `y = fma((-dmin mn) dx, Σ qx, y)`;
//!
//! where `dx` is the activation block's scale and `d * dx`, `m * dx` one f32 rounding each.
//! The integer sums are exact whatever order adds them, so every instruction set gives
//! the same bits: the portable code here, AVX2 ([`crate::int8_avx2`]), and AVX-512 with VNNI and VBMI (`vpdpbusd` on
//! codes made unsigned: Q8_0's `q + 128`, the correction `128 Σ qx` subtracted exactly).
//! A row's result depends only on that row: batch, chunk and thread invariance hold as
//! on the exact path.

use rayon::prelude::*;

use crate::blocks;
use crate::format::Blk;
use crate::half_conv::f16_to_f32;
use crate::pack::{q4_block, Kind, Q8_BLOCK, QK};
use crate::simd::NR;

/// How a layer treats its input rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Activations {
    /// f32 rows, one FMA chain per output over the exact weights (the default).
    #[default]
    Exact,
    /// Rows quantized to int8 in blocks of 32, integer dot products (this module), for
    /// the kinds that have an integer kernel; the others stay exact.
    Q8,
}

impl std::str::FromStr for Activations {
    type Err = String;
    /// `exact` or `q8` (the `--activations` flag).
    fn from_str(s: &str) -> Result<Activations, String> {
        match s {
            "exact" => Ok(Activations::Exact),
            "q8" => Ok(Activations::Q8),
            other => Err(format!("activations {other:?}: expected \"exact\" or \"q8\"")),
        }
    }
}

impl std::fmt::Display for Activations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Activations::Exact => "exact",
            Activations::Q8 => "q8",
        })
    }
}

/// Rows quantized by numbers.md's rule: `q` `(m, inp)` i8, and per block of 32 its scale
/// `d` and the sum of its codes `s`, `(m, inp / 32)` each. For the 4-bit panels the codes
/// of each 8 values are kept in the order the panel's nibbles come out of a 32-bit lane
/// (`0 2 4 6 1 3 5 7`: low nibbles, then high ones), so the kernel broadcasts 4 of them
/// with one load; [`QRows::at`] reads them in natural order.
pub(crate) struct QRows {
    pub q: Vec<i8>,
    pub d: Vec<f32>,
    pub s: Vec<i32>,
    /// Whether `q` is in the 4-bit panels' order.
    pub nibble_order: bool,
}

impl QRows {
    /// The code of value `k` of row `r` (`inp` values a row).
    pub(crate) fn at(&self, r: usize, inp: usize, k: usize) -> i8 {
        let k = if self.nibble_order { k / 8 * 8 + (k % 2) * 4 + (k % 8) / 2 } else { k };
        self.q[r * inp + k]
    }
}

/// One block's scale and codes: `d = amax / 127`, `id = 1 / d` (0 when `d` is 0), `q =
/// clamp(rint(x * id), -127, 127)` with ties to even; the clamp as x86's `maxps`/`minps`
/// with the bound second, so a NaN product gives -127.
pub(crate) fn quantize_block(x: &[f32], q: &mut [i8]) -> (f32, i32) {
    let amax = x.iter().fold(0.0f32, |m, &v| {
        let a = v.abs();
        if a > m {
            a
        } else {
            m
        }
    });
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut s = 0i32;
    for (q, &v) in q.iter_mut().zip(x) {
        let r = (v * id).round_ties_even();
        let lo = if r > -127.0 { r } else { -127.0 };
        let c = if lo < 127.0 { lo } else { 127.0 };
        *q = c as i8;
        s += *q as i32;
    }
    (d, s)
}

/// One activation row quantized by numbers.md's rule: its codes, and per block of 32 its
/// scale and the sum of its codes. What [`Activations::Q8`] layers compute with; public
/// so the rule can be checked on its own.
pub fn quantize_q8_row(x: &[f32]) -> Result<Q8Row, crate::QuantError> {
    if !x.len().is_multiple_of(QK) {
        return Err(crate::QuantError::BadBlocks { format: "q8 activations".into(), inp: x.len() });
    }
    let r = quantize_rows(x, 1, x.len(), Kind::Q8);
    Ok(Q8Row { q: r.q, d: r.d, s: r.s })
}

/// One quantized activation row ([`quantize_q8_row`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Q8Row {
    /// The codes, one per value.
    pub q: Vec<i8>,
    /// Each block's scale.
    pub d: Vec<f32>,
    /// Each block's sum of codes.
    pub s: Vec<i32>,
}

/// Quantize `m` rows of `inp` (a multiple of 32) values, for panels of `kind`.
pub(crate) fn quantize_rows(x: &[f32], m: usize, inp: usize, kind: Kind) -> QRows {
    let nb = inp / QK;
    let nibble_order = matches!(kind, Kind::Q4 { .. } | Kind::Blk(Blk::Q4K));
    let mut r = QRows { q: vec![0; m * inp], d: vec![0.0; m * nb], s: vec![0; m * nb], nibble_order };
    let mut tmp = [0i8; QK];
    for ((xb, qb), (d, s)) in x.chunks_exact(QK).zip(r.q.chunks_exact_mut(QK)).zip(r.d.iter_mut().zip(r.s.iter_mut())) {
        (*d, *s) = quantize_block(xb, &mut tmp);
        if nibble_order {
            for (g, out) in qb.chunks_exact_mut(8).enumerate() {
                for i in 0..4 {
                    out[i] = tmp[8 * g + 2 * i];
                    out[4 + i] = tmp[8 * g + 2 * i + 1];
                }
            }
        } else {
            qb.copy_from_slice(&tmp);
        }
    }
    r
}

/// Whether `kind` has an integer kernel.
pub(crate) fn supported(kind: Kind) -> bool {
    matches!(kind, Kind::Q8 | Kind::Q4 { .. } | Kind::Blk(Blk::Q4K))
}

/// The panels of one layer and the rows against them.
pub(crate) struct IntJob<'a> {
    pub kind: Kind,
    pub inp: usize,
    pub out: usize,
    pub data: &'a [u8],
    pub panel_bytes: usize,
    pub rows: &'a QRows,
}

/// `y` `(m, out)` for the quantized rows, panels split over the current rayon pool (each
/// panel's columns are computed whole by one thread).
pub(crate) fn matmul(j: &IntJob<'_>, m: usize, y: &mut [f32], path: IntPath) {
    let panels = j.out.div_ceil(NR);
    // Pairs of panels: the AVX-512 tile reads each row's codes once for both.
    let cols: Vec<Vec<f32>> = (0..panels.div_ceil(2))
        .into_par_iter()
        .with_min_len(2)
        .map(|q| {
            let np = 2.min(panels - 2 * q);
            let mut t = vec![0.0f32; m * np * NR]; // (m, np * 16): these panels' columns
            let at = |p: usize| &j.data[p * j.panel_bytes..(p + 1) * j.panel_bytes];
            #[cfg(target_arch = "x86_64")]
            match path {
                // SAFETY: `IntPath::best` picks a path only where the CPU has it.
                IntPath::Avx512 => unsafe {
                    match np {
                        2 => x86::panels::<2>(j, [at(2 * q), at(2 * q + 1)], m, &mut t),
                        _ => x86::panels::<1>(j, [at(2 * q)], m, &mut t),
                    }
                    return t;
                },
                IntPath::Avx2 => unsafe {
                    for p in 0..np {
                        crate::int8_avx2::panel(j, at(2 * q + p), m, &mut t, np, p);
                    }
                    return t;
                },
                IntPath::Portable => {}
            }
            for p in 0..np {
                panel_portable(j, at(2 * q + p), m, &mut t, np, p);
            }
            t
        })
        .collect();
    for (q, t) in cols.iter().enumerate() {
        let (c0, np) = (2 * q * NR, 2.min(panels - 2 * q));
        let w = (np * NR).min(j.out - c0);
        for r in 0..m {
            y[r * j.out + c0..r * j.out + c0 + w].copy_from_slice(&t[r * np * NR..r * np * NR + w]);
        }
    }
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// The unsigned code of weight `k` of lane `l` of a panel block (Q8_0's: the i8 itself).
fn code(kind: Kind, blk: &[u8], l: usize, k: usize) -> i32 {
    let word = |at: usize| u32::from_le_bytes([blk[at], blk[at + 1], blk[at + 2], blk[at + 3]]);
    match kind {
        Kind::Q8 => blk[NR * 2 + k * NR + l] as i8 as i32,
        Kind::Q4 { min } => {
            let at = NR * 2 * (1 + min as usize) + ((k / 8) * NR + l) * 4;
            ((word(at) >> (4 * (k % 8))) & 15) as i32
        }
        Kind::Blk(Blk::Q4K) => {
            let at = blocks::layout(Blk::Q4K).lo + ((k / 8) * NR + l) * 4;
            ((word(at) >> (4 * (k % 8))) & 15) as i32
        }
        _ => unreachable!("no integer kernel for {kind:?}"),
    }
}

/// The reference: panel `p` of `np` (its columns at `p * 16` in each `np * 16`-wide row of
/// `t`), every row, by the module's formulas, one activation block (32 values) at a time.
fn panel_portable(j: &IntJob<'_>, panel: &[u8], m: usize, t: &mut [f32], np: usize, p: usize) {
    let nb = j.inp / QK;
    let (bb, per) = (block_bytes(j.kind), weights_per_block(j.kind) / QK); // activation blocks per weight block
    for r in 0..m {
        for l in 0..NR {
            let mut y = 0.0f32;
            for ab in 0..nb {
                let (b, sub) = (ab / per, ab % per);
                let blk = &panel[b * bb..(b + 1) * bb];
                let (dx, sx) = (j.rows.d[r * nb + ab], j.rows.s[r * nb + ab]);
                let dot: i32 =
                    (0..QK).map(|k| code(j.kind, blk, l, sub * QK + k) * j.rows.at(r, j.inp, ab * QK + k) as i32).sum();
                let d = f16_at(blk, 2 * l);
                match j.kind {
                    Kind::Q4 { min: true } => {
                        y = (d * dx).mul_add(dot as f32, y);
                        y = (f16_at(blk, NR * 2 + 2 * l) * dx).mul_add(sx as f32, y);
                    }
                    Kind::Q4 { min: false } => y = (d * dx).mul_add((dot - 8 * sx) as f32, y),
                    Kind::Q8 => y = (d * dx).mul_add(dot as f32, y),
                    _ => {
                        // Q4_K: `(d sc) q - dmin mn`; the panel keeps -dmin, and both
                        // products with a 6-bit integer are exact.
                        let lay = blocks::layout(Blk::Q4K);
                        let (sc, mn) = (blk[lay.sc + sub * NR + l] as f32, blk[lay.sc + (per + sub) * NR + l] as f32);
                        y = ((d * sc) * dx).mul_add(dot as f32, y);
                        y = ((f16_at(blk, NR * 2 + 2 * l) * mn) * dx).mul_add(sx as f32, y);
                    }
                }
            }
            t[(r * np + p) * NR + l] = y;
        }
    }
}

/// Bytes of one panel block of an integer kind.
pub(crate) fn block_bytes(kind: Kind) -> usize {
    match kind {
        Kind::Q8 => Q8_BLOCK,
        Kind::Q4 { min } => q4_block(min),
        Kind::Blk(f) => blocks::layout(f).bytes,
        _ => unreachable!("no integer kernel for {kind:?}"),
    }
}

/// Weights per panel block of an integer kind.
pub(crate) fn weights_per_block(kind: Kind) -> usize {
    match kind {
        Kind::Blk(f) => f.k(),
        _ => QK,
    }
}

/// Which integer kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IntPath {
    Portable,
    /// AVX2 + FMA + F16C ([`crate::int8_avx2`]).
    Avx2,
    /// AVX-512 F/BW with VNNI and VBMI.
    Avx512,
}

impl IntPath {
    /// The integer kernel for the float path `path` chose: AVX-512 where the CPU also has
    /// VNNI and VBMI, else AVX2 on the AVX2 and AVX-512 paths, else portable. All give
    /// the same bits.
    pub(crate) fn of(path: crate::Path) -> IntPath {
        #[cfg(target_arch = "x86_64")]
        {
            let vnni = is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vbmi");
            match path {
                crate::Path::Avx512 if vnni => return IntPath::Avx512,
                crate::Path::Avx512 | crate::Path::Avx2 => return IntPath::Avx2,
                crate::Path::Portable => {}
            }
        }
        let _ = path;
        IntPath::Portable
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{block_bytes, weights_per_block, IntJob};
    use crate::blocks;
    use crate::format::Blk;
    use crate::pack::{Kind, QK};
    use crate::simd::NR;

    /// Rows per pass over a panel's blocks (their integer and float accumulators stay
    /// in registers).
    const MR: usize = 4;

    /// One panel, every row: the portable formulas, 16 lanes at a time.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vbmi,f16c,fma")]
    pub(super) unsafe fn panels<const NP: usize>(j: &IntJob<'_>, panels: [&[u8]; NP], m: usize, t: &mut [f32]) {
        let ptrs = panels.map(|p| p.as_ptr());
        let mut r = 0;
        while r < m {
            match m - r {
                1 => rows::<1, NP>(j, ptrs, r, t),
                2 => rows::<2, NP>(j, ptrs, r, t),
                3 => rows::<3, NP>(j, ptrs, r, t),
                _ => rows::<MR, NP>(j, ptrs, r, t),
            }
            r += MR.min(m - r);
        }
    }

    // The pieces below are functions, never closures: a closure cannot be
    // `inline(always)`, and one LLVM leaves out of line is compiled without the
    // instruction set, each intrinsic in it a call (issue 36; tests/codegen.rs).

    /// 16 f16 at `p`, widened.
    #[inline(always)]
    unsafe fn f16s(p: *const u8) -> __m512 {
        _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
    }

    /// 16 u8 at `p`, as f32.
    #[inline(always)]
    unsafe fn u8s(p: *const u8) -> __m512 {
        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(p as *const __m128i)))
    }

    /// The 4-bit codes of 4 words from each of `NP` panels' `q` (8 a lane each) against
    /// 32 codes of each of `R` rows (`x`, rows `inp` apart): bytes 0..4 of a lane hold
    /// codes 8c + 0, 2, 4, 6 (low nibbles), then 8c + 1, 3, 5, 7 (high nibbles), QRows'
    /// nibble order. Each row's 4-code broadcast serves every panel.
    #[inline(always)]
    unsafe fn nibbles<const R: usize, const NP: usize>(
        q: [*const u8; NP],
        x: *const i8,
        inp: usize,
        dot: &mut [[__m512i; NP]; R],
    ) {
        let lo_mask = _mm512_set1_epi8(15);
        for c in 0..QK / 8 {
            let mut lo = [_mm512_setzero_si512(); NP];
            let mut hi = [_mm512_setzero_si512(); NP];
            for p in 0..NP {
                let word = _mm512_loadu_si512(q[p].add(c * NR * 4) as *const _);
                lo[p] = _mm512_and_si512(word, lo_mask);
                hi[p] = _mm512_and_si512(_mm512_srli_epi16::<4>(word), lo_mask);
            }
            for (r, dot) in dot.iter_mut().enumerate() {
                let xr = x.add(r * inp + 8 * c) as *const i32;
                let (xl, xh) = (_mm512_set1_epi32(xr.read_unaligned()), _mm512_set1_epi32(xr.add(1).read_unaligned()));
                for p in 0..NP {
                    dot[p] = _mm512_dpbusd_epi32(dot[p], lo[p], xl);
                    dot[p] = _mm512_dpbusd_epi32(dot[p], hi[p], xh);
                }
            }
        }
    }

    /// Q8 panels keep code k of the 16 lanes as 16 bytes; `vpdpbusd` wants each lane's
    /// 4 consecutive codes in one 32-bit lane: byte `4 l + i` of the result is byte
    /// `16 i + l` of the 64 loaded (codes k .. k + 4).
    const fn q8_transpose() -> [u8; 64] {
        let mut idx = [0u8; 64];
        let mut l = 0;
        while l < 16 {
            let mut i = 0;
            while i < 4 {
                idx[4 * l + i] = (16 * i + l) as u8;
                i += 1;
            }
            l += 1;
        }
        idx
    }

    #[allow(clippy::needless_range_loop)] // rows and panels index the accumulators
    #[inline(always)]
    unsafe fn rows<const R: usize, const NP: usize>(j: &IntJob<'_>, panels: [*const u8; NP], r0: usize, t: &mut [f32]) {
        let nb = j.inp / QK;
        let (bb, per) = (block_bytes(j.kind), weights_per_block(j.kind) / QK);
        let idx = _mm512_loadu_si512(q8_transpose().as_ptr() as *const _);
        let lay = blocks::layout(Blk::Q4K);
        let mut acc = [[_mm512_setzero_ps(); NP]; R];
        for ab in 0..nb {
            let (b, sub) = (ab / per, ab % per);
            let blk = panels.map(|p| p.add(b * bb));
            let mut dot = [[_mm512_setzero_si512(); NP]; R];
            // Row 0's codes of this activation block (in the kind's order); row r's are
            // `r * inp` further.
            let x0 = j.rows.q.as_ptr().add(r0 * j.inp + ab * QK);
            match j.kind {
                Kind::Q8 => {
                    for g in 0..QK / 4 {
                        let mut u = [_mm512_setzero_si512(); NP];
                        for p in 0..NP {
                            let raw = _mm512_loadu_si512(blk[p].add(NR * 2 + g * 64) as *const _);
                            // q + 128: unsigned codes for vpdpbusd.
                            u[p] = _mm512_xor_si512(_mm512_permutexvar_epi8(idx, raw), _mm512_set1_epi8(-128));
                        }
                        for r in 0..R {
                            let x = _mm512_set1_epi32((x0.add(r * j.inp + 4 * g) as *const i32).read_unaligned());
                            for p in 0..NP {
                                dot[r][p] = _mm512_dpbusd_epi32(dot[r][p], u[p], x);
                            }
                        }
                    }
                }
                Kind::Q4 { min } => {
                    nibbles::<R, NP>(blk.map(|b| b.add(NR * 2 * (1 + min as usize))), x0, j.inp, &mut dot)
                }
                // Sub-block `sub`'s 32 codes: low words 4 sub .. 4 sub + 4.
                _ => nibbles::<R, NP>(blk.map(|b| b.add(lay.lo + sub * 4 * NR * 4)), x0, j.inp, &mut dot),
            }
            // What multiplies each row's scale: d (Q8_0, Q4_0, Q4_1), d * sc (Q4_K), and
            // the offset's factor: m (Q4_1), -dmin * mn (Q4_K).
            let mut a = [_mm512_setzero_ps(); NP];
            let mut off = [_mm512_setzero_ps(); NP];
            for p in 0..NP {
                let d = f16s(blk[p]);
                (a[p], off[p]) = match j.kind {
                    Kind::Blk(_) => (
                        _mm512_mul_ps(d, u8s(blk[p].add(lay.sc + sub * NR))),
                        _mm512_mul_ps(f16s(blk[p].add(NR * 2)), u8s(blk[p].add(lay.sc + (per + sub) * NR))),
                    ),
                    Kind::Q4 { min: true } => (d, f16s(blk[p].add(NR * 2))),
                    _ => (d, _mm512_setzero_ps()),
                };
            }
            let has_off = matches!(j.kind, Kind::Blk(_) | Kind::Q4 { min: true });
            for r in 0..R {
                let (dx, sx) = (j.rows.d[(r0 + r) * nb + ab], j.rows.s[(r0 + r) * nb + ab]);
                let (dxv, sxv) = (_mm512_set1_ps(dx), _mm512_set1_ps(sx as f32));
                let corr = match j.kind {
                    Kind::Q8 => _mm512_set1_epi32(128 * sx),
                    Kind::Q4 { min: false } => _mm512_set1_epi32(8 * sx),
                    _ => _mm512_setzero_si512(),
                };
                for p in 0..NP {
                    let i = _mm512_cvtepi32_ps(_mm512_sub_epi32(dot[r][p], corr));
                    acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(a[p], dxv), i, acc[r][p]);
                    if has_off {
                        acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(off[p], dxv), sxv, acc[r][p]);
                    }
                }
            }
        }
        for r in 0..R {
            for p in 0..NP {
                _mm512_storeu_ps(t.as_mut_ptr().add(((r0 + r) * NP + p) * NR), acc[r][p]);
            }
        }
    }
}
