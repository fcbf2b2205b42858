//! The int8-activation kernel on AVX-512 with VNNI and VBMI: [`crate::int8`]'s portable
//! formulas, 16 lanes (one panel's rows) at a time, `NP` panels and up to 4 activation
//! rows per pass so each weight code is unpacked once for all of them. The dot products
//! are `vpdpbusd` (unsigned codes times signed activations, 4 a lane): Q8_0's signed codes
//! made unsigned as `q + 128` (the correction `128 Σ qx` subtracted exactly), the 4-, 5-
//! and 6-bit codes as they are (Q4_0's `- 8`, Q6_K's `- 32` subtracted as `c Σ qx`). Every
//! integer sum is exact, and the float operations are the reference's in its order, so
//! the bits are the same.

use std::arch::x86_64::*;

use crate::blocks::{self, Layout};
use crate::format::Blk;
use crate::int8_job::{block_bytes, kind_index, weights_per_block, Cols, IntJob, KINDS};
use crate::pack::{Kind, QK};
use crate::simd::NR;

/// Rows per pass over a panel's blocks (their integer and float accumulators stay
/// in registers).
const MR: usize = 4;

/// `NP` panels, every row.
pub(crate) unsafe fn panels<const NP: usize>(j: &IntJob<'_>, panels: [&[u8]; NP], m: usize, cols: Cols) {
    let ptrs = panels.map(|p| p.as_ptr());
    match kind_index(j.kind) {
        Some(0) => panels_of::<NP, 0>(j, ptrs, m, cols),
        Some(1) => panels_of::<NP, 1>(j, ptrs, m, cols),
        Some(2) => panels_of::<NP, 2>(j, ptrs, m, cols),
        Some(3) => panels_of::<NP, 3>(j, ptrs, m, cols),
        Some(4) => panels_of::<NP, 4>(j, ptrs, m, cols),
        Some(5) => panels_of::<NP, 5>(j, ptrs, m, cols),
        _ => unreachable!("no integer kernel for {:?}", j.kind),
    }
}

/// [`panels`] for kind `KINDS[K]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vbmi,f16c,fma")]
unsafe fn panels_of<const NP: usize, const K: usize>(j: &IntJob<'_>, ptrs: [*const u8; NP], m: usize, cols: Cols) {
    let mut r = 0;
    while r < m {
        match m - r {
            1 => rows::<1, NP, K>(j, ptrs, r, cols),
            2 => rows::<2, NP, K>(j, ptrs, r, cols),
            3 => rows::<3, NP, K>(j, ptrs, r, cols),
            _ => rows::<MR, NP, K>(j, ptrs, r, cols),
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

/// 16 i8 at `p`, as f32.
#[inline(always)]
unsafe fn i8s(p: *const u8) -> __m512 {
    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p as *const __m128i)))
}

/// 16 lanes' words at `p` (a panel's `(16,)` u32).
#[inline(always)]
unsafe fn words(p: *const u8) -> __m512i {
    _mm512_loadu_si512(p as *const _)
}

/// Row `r`'s 4 codes at `x + at` (rows `inp` apart), in every 32-bit lane.
#[inline(always)]
unsafe fn x4(x: *const i8, r: usize, inp: usize, at: usize) -> __m512i {
    _mm512_set1_epi32((x.add(r * inp + at) as *const i32).read_unaligned())
}

/// `dot[r][p] += Σ` over 32 codes: the 4-bit (`hi`: 5-bit) codes of 4 low words from each
/// of `NP` panels' `q` (8 a lane each) against 32 codes of each of `R` rows (`x`, rows
/// `inp` apart) in QRows' nibble order (bytes 0..4 of a lane hold codes 8c + 0, 2, 4, 6,
/// the low nibbles, then 8c + 1, 3, 5, 7, the high ones). With `hi` (Q5_K), the fifth
/// bits come from one high word per panel: low word `c`'s are that word rotated right by
/// `c`, weight `j`'s at bit `4 (j + 1)` (blocks.rs), so bit 4 of byte `i` holds even
/// weight `2 i`'s and, rotated 4 more, odd weight `2 i + 1`'s.
#[inline(always)]
unsafe fn nibbles<const R: usize, const NP: usize>(
    q: [*const u8; NP],
    hi: Option<[*const u8; NP]>,
    x: *const i8,
    inp: usize,
    dot: &mut [[__m512i; NP]; R],
) {
    let lo_mask = _mm512_set1_epi8(15);
    let bit4 = _mm512_set1_epi8(16);
    for c in 0..QK / 8 {
        let mut lo = [_mm512_setzero_si512(); NP];
        let mut up = [_mm512_setzero_si512(); NP];
        for p in 0..NP {
            let word = words(q[p].add(c * NR * 4));
            lo[p] = _mm512_and_si512(word, lo_mask);
            up[p] = _mm512_and_si512(_mm512_srli_epi16::<4>(word), lo_mask);
            if let Some(h) = hi {
                let hw = words(h[p]);
                let (g, g4) = (_mm512_set1_epi32(c as i32), _mm512_set1_epi32(c as i32 + 4));
                // lo | (rotr(hw, c) & bit4): 0xF8 is `a | (b & c)` for (a, b, c).
                lo[p] = _mm512_ternarylogic_epi32::<0xF8>(lo[p], _mm512_rorv_epi32(hw, g), bit4);
                up[p] = _mm512_ternarylogic_epi32::<0xF8>(up[p], _mm512_rorv_epi32(hw, g4), bit4);
            }
        }
        for (r, dot) in dot.iter_mut().enumerate() {
            let (xl, xh) = (x4(x, r, inp, 8 * c), x4(x, r, inp, 8 * c + 4));
            for p in 0..NP {
                dot[p] = _mm512_dpbusd_epi32(dot[p], lo[p], xl);
                dot[p] = _mm512_dpbusd_epi32(dot[p], up[p], xh);
            }
        }
    }
}

/// A 64-bit lane control for `vpmultishiftqb` from its 8 bit offsets.
const fn ctrl(b: [u8; 8]) -> i64 {
    i64::from_le_bytes(b)
}

/// Q6_K: the 16 codes of one sub-block of the 16 lanes at `q` (a lane's three words:
/// codes 0..5, 5..10, 10..15 at bits `6 i`, code 15's bits in their top two bits), as
/// four vectors of 4 codes a lane in [`crate::int8::SIX`]'s order: codes 0..4, 5..9,
/// 10..14 (each word's first four), then 4, 9, 14, 15. `vpmultishiftqb` cuts the 6-bit
/// fields out of each 64-bit pair of lanes.
#[inline(always)]
unsafe fn six(q: *const u8) -> [__m512i; 4] {
    let w = [words(q), words(q.add(NR * 4)), words(q.add(2 * NR * 4))];
    let six_bits = _mm512_set1_epi8(63);
    let first4 = _mm512_set1_epi64(ctrl([0, 6, 12, 18, 32, 38, 44, 50]));
    let a = w.map(|w| _mm512_and_si512(_mm512_multishift_epi64_epi8(first4, w), six_bits));
    // The fifth code of word t to byte t; the top bits of word t to bits 2t, 2t + 1 of
    // byte 3 (offsets 30, 28, 26: the other bytes are masked off).
    let c0 = _mm512_set1_epi64(ctrl([24, 0, 0, 30, 56, 0, 0, 62]));
    let c1 = _mm512_set1_epi64(ctrl([0, 24, 0, 28, 0, 56, 0, 60]));
    let c2 = _mm512_set1_epi64(ctrl([0, 0, 24, 26, 0, 0, 56, 58]));
    let m0 = _mm512_and_si512(_mm512_multishift_epi64_epi8(c0, w[0]), _mm512_set1_epi32(0x0300_003F));
    let m1 = _mm512_and_si512(_mm512_multishift_epi64_epi8(c1, w[1]), _mm512_set1_epi32(0x0C00_3F00));
    let m2 = _mm512_and_si512(_mm512_multishift_epi64_epi8(c2, w[2]), _mm512_set1_epi32(0x303F_0000));
    [a[0], a[1], a[2], _mm512_ternarylogic_epi32::<0xFE>(m0, m1, m2)] // 0xFE: a | b | c
}

/// Q6_K: `T[r][p] = sc_a I_a + sc_b I_b` (as f32, exact) for sub-blocks `2 sub`, `2 sub +
/// 1` of the panel blocks `blk`, rows `r0 ..` of `x` (this activation block's codes).
#[allow(clippy::needless_range_loop)] // rows and panels index the accumulators
#[inline(always)]
unsafe fn q6k<const R: usize, const NP: usize>(
    j: &IntJob<'_>,
    lay: Layout,
    blk: [*const u8; NP],
    x: *const i8,
    halves: *const i32,
    sub: usize,
) -> [[__m512; NP]; R] {
    let mut tsum = [[_mm512_setzero_ps(); NP]; R];
    for h in 0..2 {
        let s = 2 * sub + h;
        let mut dot = [[_mm512_setzero_si512(); NP]; R];
        let mut codes = [[_mm512_setzero_si512(); 4]; NP];
        for p in 0..NP {
            codes[p] = six(blk[p].add(lay.lo + s * 3 * NR * 4));
        }
        for r in 0..R {
            for g in 0..4 {
                // One broadcast of the row's 4 codes serves every panel.
                let xr = x4(x, r, j.inp, 16 * h + 4 * g);
                for p in 0..NP {
                    dot[r][p] = _mm512_dpbusd_epi32(dot[r][p], codes[p][g], xr);
                }
            }
        }
        for p in 0..NP {
            let sc = i8s(blk[p].add(lay.sc + s * NR));
            for r in 0..R {
                // `halves` holds each row's half-block sums, 2 per activation block.
                let corr = _mm512_set1_epi32(32 * *halves.add(r * j.inp / 16 + h));
                let i = _mm512_cvtepi32_ps(_mm512_sub_epi32(dot[r][p], corr));
                tsum[r][p] = _mm512_fmadd_ps(sc, i, tsum[r][p]);
            }
        }
    }
    tsum
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
unsafe fn rows<const R: usize, const NP: usize, const K: usize>(
    j: &IntJob<'_>,
    panels: [*const u8; NP],
    r0: usize,
    cols: Cols,
) {
    let kind = KINDS[K];
    let nb = j.inp / QK;
    let (bb, per) = (block_bytes(kind), weights_per_block(kind) / QK);
    let idx = _mm512_loadu_si512(q8_transpose().as_ptr() as *const _);
    let lay = match kind {
        Kind::Blk(f) => blocks::layout(f),
        _ => blocks::layout(Blk::Q4K), // unused
    };
    let mut acc = [[_mm512_setzero_ps(); NP]; R];
    for ab in 0..nb {
        let (b, sub) = (ab / per, ab % per);
        let blk = panels.map(|p| p.add(b * bb));
        // Row 0's codes of this activation block (in the kind's order); row r's are
        // `r * inp` further.
        let x0 = j.rows.q.as_ptr().add(r0 * j.inp + ab * QK);
        if matches!(kind, Kind::Blk(Blk::Q6K)) {
            let tsum = q6k::<R, NP>(j, lay, blk, x0, j.rows.s16.as_ptr().add(2 * (r0 * nb + ab)), sub);
            for p in 0..NP {
                let d = f16s(blk[p]);
                for r in 0..R {
                    let dx = _mm512_set1_ps(j.rows.d[(r0 + r) * nb + ab]);
                    acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), tsum[r][p], acc[r][p]);
                }
            }
            continue;
        }
        let mut dot = [[_mm512_setzero_si512(); NP]; R];
        match kind {
            Kind::Q8 => {
                for g in 0..QK / 4 {
                    let mut u = [_mm512_setzero_si512(); NP];
                    for p in 0..NP {
                        let raw = words(blk[p].add(NR * 2 + g * 64));
                        // q + 128: unsigned codes for vpdpbusd.
                        u[p] = _mm512_xor_si512(_mm512_permutexvar_epi8(idx, raw), _mm512_set1_epi8(-128));
                    }
                    for r in 0..R {
                        let x = x4(x0, r, j.inp, 4 * g);
                        for p in 0..NP {
                            dot[r][p] = _mm512_dpbusd_epi32(dot[r][p], u[p], x);
                        }
                    }
                }
            }
            Kind::Q4 { min } => {
                nibbles::<R, NP>(blk.map(|b| b.add(NR * 2 * (1 + min as usize))), None, x0, j.inp, &mut dot)
            }
            // Q4_K, Q5_K: sub-block `sub`'s 32 codes are low words 4 sub .. 4 sub + 4
            // (and, Q5_K, high word `sub`).
            _ => {
                let hi = (lay.hb > 0).then(|| blk.map(|b| b.add(lay.hi + sub * NR * 4)));
                nibbles::<R, NP>(blk.map(|b| b.add(lay.lo + sub * 4 * NR * 4)), hi, x0, j.inp, &mut dot)
            }
        }
        // What multiplies each row's scale: d (Q8_0, Q4_0, Q4_1), d * sc (Q4_K, Q5_K),
        // and the offset's factor: m (Q4_1), -dmin * mn (Q4_K, Q5_K).
        let mut a = [_mm512_setzero_ps(); NP];
        let mut off = [_mm512_setzero_ps(); NP];
        for p in 0..NP {
            let d = f16s(blk[p]);
            (a[p], off[p]) = match kind {
                Kind::Blk(_) => (
                    _mm512_mul_ps(d, u8s(blk[p].add(lay.sc + sub * NR))),
                    _mm512_mul_ps(f16s(blk[p].add(NR * 2)), u8s(blk[p].add(lay.sc + (per + sub) * NR))),
                ),
                Kind::Q4 { min: true } => (d, f16s(blk[p].add(NR * 2))),
                _ => (d, _mm512_setzero_ps()),
            };
        }
        let has_off = matches!(kind, Kind::Blk(_) | Kind::Q4 { min: true });
        for r in 0..R {
            let (dx, sx) = (j.rows.d[(r0 + r) * nb + ab], j.rows.s[(r0 + r) * nb + ab]);
            let (dxv, sxv) = (_mm512_set1_ps(dx), _mm512_set1_ps(sx as f32));
            let corr = match kind {
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
            let (dst, n) = cols.at(r0 + r, p);
            _mm512_mask_storeu_ps(dst, ((1u32 << n) - 1) as u16, acc[r][p]);
        }
    }
}
