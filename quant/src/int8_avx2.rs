//! The int8-activation kernel on AVX2 (+FMA, F16C), for CPUs without AVX-512 VNNI: the
//! same integer sums and the same float operations in the same order as
//! [`crate::int8`]'s portable reference, so the same bits. Each 16-row panel is two
//! 8-lane halves. The 4-value dot products are `vpmaddubsw` then `vpmaddwd` with ones:
//! 4-bit codes (at most 15) times int8 values cannot saturate the 16-bit pair sums, and
//! Q8_0's signed codes go through the sign trick (`|q|` times `x` with `q`'s sign, pairs at
//! most 2 * 128 * 127 = 32512), which gives `Σ q x` itself.

use std::arch::x86_64::*;

use crate::blocks;
use crate::format::Blk;
use crate::int8::{block_bytes, weights_per_block, IntJob};
use crate::pack::{Kind, QK};
use crate::simd::NR;

/// Rows per pass (accumulators: 2 halves x rows, integer and float).
const MR: usize = 2;

/// Panel `p` of `np` (its columns at `p * 16` in each `np * 16`-wide row of `t`), every
/// row.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn panel(j: &IntJob<'_>, panel: &[u8], m: usize, t: &mut [f32], np: usize, p: usize) {
    let mut r = 0;
    while r < m {
        match m - r {
            1 => rows::<1>(j, panel.as_ptr(), r, t, np, p),
            _ => rows::<MR>(j, panel.as_ptr(), r, t, np, p),
        }
        r += MR.min(m - r);
    }
}

// Functions, never closures: a closure cannot be `inline(always)`, and one left out of
// line is compiled without AVX2, each intrinsic in it a call (tests/codegen.rs).

/// 8 f16 at `p`, widened.
#[inline(always)]
unsafe fn f16s(p: *const u8) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

/// 8 u8 at `p`, as f32.
#[inline(always)]
unsafe fn u8s(p: *const u8) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i)))
}

/// Per 32-bit lane, the sum of the 4 products of `a`'s unsigned bytes and `b`'s signed ones.
#[inline(always)]
unsafe fn dot4(a: __m256i, b: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1))
}

/// Q8_0: codes `4g .. 4g + 4` of the 16 lanes (16 bytes each, from `q`) as two halves of
/// 8 lanes, each lane's 4 codes in one 32-bit lane.
#[inline(always)]
unsafe fn q8_group(q: *const u8) -> [__m256i; 2] {
    let k = |i: usize| _mm_loadu_si128(q.add(i * NR) as *const __m128i);
    let (k0, k1, k2, k3) = (k(0), k(1), k(2), k(3));
    let (lo01, lo23) = (_mm_unpacklo_epi8(k0, k1), _mm_unpacklo_epi8(k2, k3)); // lanes 0..8
    let (hi01, hi23) = (_mm_unpackhi_epi8(k0, k1), _mm_unpackhi_epi8(k2, k3)); // lanes 8..16
    [
        _mm256_set_m128i(_mm_unpackhi_epi16(lo01, lo23), _mm_unpacklo_epi16(lo01, lo23)),
        _mm256_set_m128i(_mm_unpackhi_epi16(hi01, hi23), _mm_unpacklo_epi16(hi01, hi23)),
    ]
}

#[allow(clippy::needless_range_loop)] // rows and halves index the accumulators
#[inline(always)]
unsafe fn rows<const R: usize>(j: &IntJob<'_>, panel: *const u8, r0: usize, t: &mut [f32], np: usize, p: usize) {
    let nb = j.inp / QK;
    let (bb, per) = (block_bytes(j.kind), weights_per_block(j.kind) / QK);
    let lay = blocks::layout(Blk::Q4K);
    let lo_mask = _mm256_set1_epi8(15);
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for ab in 0..nb {
        let (b, sub) = (ab / per, ab % per);
        let blk = panel.add(b * bb);
        let mut dot = [[_mm256_setzero_si256(); 2]; R];
        let x0 = j.rows.q.as_ptr().add(r0 * j.inp + ab * QK);
        let xw = |r: usize, at: usize| (x0.add(r * j.inp + at) as *const i32).read_unaligned(); // (pointer math)
        match j.kind {
            Kind::Q8 => {
                for g in 0..QK / 4 {
                    let w = q8_group(blk.add(NR * 2 + g * 64));
                    for r in 0..R {
                        let x = _mm256_set1_epi32(xw(r, 4 * g));
                        for h in 0..2 {
                            dot[r][h] =
                                _mm256_add_epi32(dot[r][h], dot4(_mm256_abs_epi8(w[h]), _mm256_sign_epi8(x, w[h])));
                        }
                    }
                }
            }
            _ => {
                let q = match j.kind {
                    Kind::Q4 { min } => blk.add(NR * 2 * (1 + min as usize)),
                    _ => blk.add(lay.lo + sub * 4 * NR * 4), // Q4_K sub-block `sub`
                };
                for c in 0..QK / 8 {
                    let mut lo = [_mm256_setzero_si256(); 2];
                    let mut hi = [_mm256_setzero_si256(); 2];
                    for h in 0..2 {
                        let word = _mm256_loadu_si256(q.add(c * NR * 4 + h * 32) as *const __m256i);
                        lo[h] = _mm256_and_si256(word, lo_mask);
                        hi[h] = _mm256_and_si256(_mm256_srli_epi16::<4>(word), lo_mask);
                    }
                    for r in 0..R {
                        // QRows' nibble order: codes 8c + 0, 2, 4, 6 then 8c + 1, 3, 5, 7.
                        let (xl, xh) = (_mm256_set1_epi32(xw(r, 8 * c)), _mm256_set1_epi32(xw(r, 8 * c + 4)));
                        for h in 0..2 {
                            let s = _mm256_add_epi32(dot4(lo[h], xl), dot4(hi[h], xh));
                            dot[r][h] = _mm256_add_epi32(dot[r][h], s);
                        }
                    }
                }
            }
        }
        let has_off = matches!(j.kind, Kind::Blk(_) | Kind::Q4 { min: true });
        for h in 0..2 {
            let d = f16s(blk.add(h * 16));
            let (a, off) = match j.kind {
                Kind::Blk(_) => (
                    _mm256_mul_ps(d, u8s(blk.add(lay.sc + sub * NR + h * 8))),
                    _mm256_mul_ps(f16s(blk.add(NR * 2 + h * 16)), u8s(blk.add(lay.sc + (per + sub) * NR + h * 8))),
                ),
                Kind::Q4 { min: true } => (d, f16s(blk.add(NR * 2 + h * 16))),
                _ => (d, _mm256_setzero_ps()),
            };
            for r in 0..R {
                let (dx, sx) = (j.rows.d[(r0 + r) * nb + ab], j.rows.s[(r0 + r) * nb + ab]);
                let dxv = _mm256_set1_ps(dx);
                // Q8_0's sign trick already gives Σ q x; Q4_0 subtracts 8 Σ x.
                let corr = if matches!(j.kind, Kind::Q4 { min: false }) { 8 * sx } else { 0 };
                let i = _mm256_cvtepi32_ps(_mm256_sub_epi32(dot[r][h], _mm256_set1_epi32(corr)));
                acc[r][h] = _mm256_fmadd_ps(_mm256_mul_ps(a, dxv), i, acc[r][h]);
                if has_off {
                    acc[r][h] = _mm256_fmadd_ps(_mm256_mul_ps(off, dxv), _mm256_set1_ps(sx as f32), acc[r][h]);
                }
            }
        }
    }
    for r in 0..R {
        for h in 0..2 {
            _mm256_storeu_ps(t.as_mut_ptr().add(((r0 + r) * np + p) * NR + h * 8), acc[r][h]);
        }
    }
}
