//! The int8-activation kernel on AVX2 (+FMA, F16C), for CPUs without AVX-512 VNNI: the
//! same integer sums and the same float operations in the same order as
//! [`crate::int8`]'s portable reference, so the same bits. Each 16-row panel is two
//! 8-lane halves. The 4-value dot products are `vpmaddubsw` then `vpmaddwd` with ones:
//! 4-, 5- and 6-bit codes (at most 63) times int8 values cannot saturate the 16-bit pair
//! sums (2 * 63 * 127 = 16002), and Q8_0's signed codes go through the sign trick (`|q|`
//! times `x` with `q`'s sign, pairs at most 2 * 128 * 127 = 32512), which gives `Σ q x`
//! itself.

use std::arch::x86_64::*;

use crate::blocks::{self, Layout};
use crate::format::Blk;
use crate::int8_job::{block_bytes, kind_index, weights_per_block, Cols, IntJob, KINDS};
use crate::pack::{Kind, QK};
use crate::simd::NR;

/// Rows per pass (accumulators: 2 halves x rows, integer and float).
const MR: usize = 2;

/// The task's panel `p` (its columns in `cols`), every row.
pub(crate) unsafe fn panel(j: &IntJob<'_>, panel: &[u8], m: usize, cols: Cols, p: usize) {
    let panel = panel.as_ptr();
    match kind_index(j.kind) {
        Some(0) => panel_of::<0>(j, panel, m, cols, p),
        Some(1) => panel_of::<1>(j, panel, m, cols, p),
        Some(2) => panel_of::<2>(j, panel, m, cols, p),
        Some(3) => panel_of::<3>(j, panel, m, cols, p),
        Some(4) => panel_of::<4>(j, panel, m, cols, p),
        Some(5) => panel_of::<5>(j, panel, m, cols, p),
        _ => unreachable!("no integer kernel for {:?}", j.kind),
    }
}

/// [`panel`] for kind `KINDS[K]`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn panel_of<const K: usize>(j: &IntJob<'_>, panel: *const u8, m: usize, cols: Cols, p: usize) {
    let mut r = 0;
    while r < m {
        match m - r {
            1 => rows::<1, K>(j, panel, r, cols, p),
            _ => rows::<MR, K>(j, panel, r, cols, p),
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

/// The first `n` (at most 8) lanes of `v` to `p`.
#[inline(always)]
unsafe fn store(p: *mut f32, v: __m256, n: usize) {
    if n == 8 {
        _mm256_storeu_ps(p, v);
    } else {
        let mut buf = [0.0f32; 8];
        _mm256_storeu_ps(buf.as_mut_ptr(), v);
        std::ptr::copy_nonoverlapping(buf.as_ptr(), p, n);
    }
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

/// Lanes' words at `p`, rotated right by `n` bits (0 < n < 32).
#[inline(always)]
unsafe fn rotr(w: __m256i, n: i32) -> __m256i {
    let (r, l) = (_mm_cvtsi32_si128(n), _mm_cvtsi32_si128(32 - n));
    _mm256_or_si256(_mm256_srl_epi32(w, r), _mm256_sll_epi32(w, l))
}

/// `(w >> s) & mask` per 32-bit lane, `s` a constant.
#[inline(always)]
unsafe fn field<const S: i32>(w: __m256i, mask: i32) -> __m256i {
    _mm256_and_si256(_mm256_srli_epi32::<S>(w), _mm256_set1_epi32(mask))
}

/// `(w << s) & mask` per 32-bit lane.
#[inline(always)]
unsafe fn field_up<const S: i32>(w: __m256i, mask: i32) -> __m256i {
    _mm256_and_si256(_mm256_slli_epi32::<S>(w), _mm256_set1_epi32(mask))
}

/// Q6_K: one sub-block's 16 codes of 8 lanes (three words at `q`, 16 lanes' words
/// apart) as four vectors of 4 codes a lane in [`crate::int8::SIX`]'s order (the
/// AVX-512 kernel's `six`, by shifts and masks).
#[inline(always)]
unsafe fn six(q: *const u8) -> [__m256i; 4] {
    let ld = |t: usize| q.add(t * NR * 4) as *const __m256i; // (pointer math)
    let w = [_mm256_loadu_si256(ld(0)), _mm256_loadu_si256(ld(1)), _mm256_loadu_si256(ld(2))];
    let fifth = _mm256_or_si256(
        _mm256_or_si256(field::<24>(w[0], 0x3F), field::<16>(w[1], 0x3F00)),
        field::<8>(w[2], 0x3F_0000),
    );
    let top = _mm256_or_si256(
        _mm256_or_si256(field::<6>(w[0], 0x0300_0000), field::<4>(w[1], 0x0C00_0000)),
        field::<2>(w[2], 0x3000_0000),
    );
    [first4(w[0]), first4(w[1]), first4(w[2]), _mm256_or_si256(fifth, top)]
}

/// A lane's first four 6-bit codes (bits `6 i`) to its four bytes.
#[inline(always)]
unsafe fn first4(w: __m256i) -> __m256i {
    let a = _mm256_or_si256(_mm256_and_si256(w, _mm256_set1_epi32(0x3F)), field_up::<2>(w, 0x3F00));
    _mm256_or_si256(a, _mm256_or_si256(field_up::<4>(w, 0x3F_0000), field_up::<6>(w, 0x3F00_0000)))
}

/// Q6_K's `T = sc_a I_a + sc_b I_b` (as f32, exact) for half `h` of the panel block
/// `blk`, rows `r0 ..`: the AVX-512 kernel's order.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn q6k<const R: usize>(
    j: &IntJob<'_>,
    lay: Layout,
    blk: *const u8,
    x0: *const i8,
    halves: *const i32,
    sub: usize,
) -> [[__m256; 2]; R] {
    let mut tsum = [[_mm256_setzero_ps(); 2]; R];
    for s2 in 0..2 {
        let s = 2 * sub + s2;
        let mut dot = [[_mm256_setzero_si256(); 2]; R];
        for h in 0..2 {
            let codes = six(blk.add(lay.lo + s * 3 * NR * 4 + h * 32));
            for r in 0..R {
                for g in [0, 2] {
                    let x = |g: usize| x0.add(r * j.inp + 16 * s2 + 4 * g) as *const i32; // (pointer math)
                    let (xa, xb) =
                        (_mm256_set1_epi32(x(g).read_unaligned()), _mm256_set1_epi32(x(g + 1).read_unaligned()));
                    // Two products' pair sums in 16 bits: at most 2 * 2 * 63 * 127 = 32004.
                    let p16 =
                        _mm256_add_epi16(_mm256_maddubs_epi16(codes[g], xa), _mm256_maddubs_epi16(codes[g + 1], xb));
                    dot[r][h] = _mm256_add_epi32(dot[r][h], _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
                }
            }
        }
        for h in 0..2 {
            let sc = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                blk.add(lay.sc + s * NR + h * 8) as *const __m128i
            )));
            for r in 0..R {
                let corr = _mm256_set1_epi32(32 * *halves.add(r * j.inp / 16 + s2));
                let i = _mm256_cvtepi32_ps(_mm256_sub_epi32(dot[r][h], corr));
                tsum[r][h] = _mm256_fmadd_ps(sc, i, tsum[r][h]);
            }
        }
    }
    tsum
}

#[allow(clippy::needless_range_loop)] // rows and halves index the accumulators
#[inline(always)]
unsafe fn rows<const R: usize, const K: usize>(j: &IntJob<'_>, panel: *const u8, r0: usize, cols: Cols, p: usize) {
    let kind = KINDS[K];
    let nb = j.inp / QK;
    let (bb, per) = (block_bytes(kind), weights_per_block(kind) / QK);
    let lay = match kind {
        Kind::Blk(f) => blocks::layout(f),
        _ => blocks::layout(Blk::Q4K), // unused
    };
    let lo_mask = _mm256_set1_epi8(15);
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for ab in 0..nb {
        let (b, sub) = (ab / per, ab % per);
        let blk = panel.add(b * bb);
        let x0 = j.rows.q.as_ptr().add(r0 * j.inp + ab * QK);
        if matches!(kind, Kind::Blk(Blk::Q6K)) {
            let tsum = q6k::<R>(j, lay, blk, x0, j.rows.s16.as_ptr().add(2 * (r0 * nb + ab)), sub);
            for h in 0..2 {
                let d = f16s(blk.add(h * 16));
                for r in 0..R {
                    let dx = _mm256_set1_ps(j.rows.d[(r0 + r) * nb + ab]);
                    acc[r][h] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), tsum[r][h], acc[r][h]);
                }
            }
            continue;
        }
        let mut dot = [[_mm256_setzero_si256(); 2]; R];
        let xw = |r: usize, at: usize| (x0.add(r * j.inp + at) as *const i32).read_unaligned(); // (pointer math)
        match kind {
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
                let q = match kind {
                    Kind::Q4 { min } => blk.add(NR * 2 * (1 + min as usize)),
                    _ => blk.add(lay.lo + sub * 4 * NR * 4), // Q4_K / Q5_K sub-block `sub`
                };
                // Q5_K's fifth bits: high word `sub`, rotated right by `c` for low word
                // `c` (the AVX-512 kernel's `nibbles` says where each bit sits).
                let fifth = (lay.hb > 0 && matches!(kind, Kind::Blk(_))).then(|| blk.add(lay.hi + sub * NR * 4));
                let bit4 = _mm256_set1_epi8(16);
                // Pair sums add up in 16 bits for as many words as cannot overflow: 4-bit
                // codes all 4 (4 * 2 * 2 * 15 * 127 = 30480), 5-bit codes 2 (31496).
                let flush = if fifth.is_some() { 2 } else { 4 };
                let mut p16 = [[_mm256_setzero_si256(); 2]; R];
                for c in 0..QK / 8 {
                    let mut lo = [_mm256_setzero_si256(); 2];
                    let mut hi = [_mm256_setzero_si256(); 2];
                    for h in 0..2 {
                        let word = _mm256_loadu_si256(q.add(c * NR * 4 + h * 32) as *const __m256i);
                        lo[h] = _mm256_and_si256(word, lo_mask);
                        hi[h] = _mm256_and_si256(_mm256_srli_epi16::<4>(word), lo_mask);
                        if let Some(f) = fifth {
                            let hw = _mm256_loadu_si256(f.add(h * 32) as *const __m256i);
                            let (e, o) = (if c == 0 { hw } else { rotr(hw, c as i32) }, rotr(hw, c as i32 + 4));
                            lo[h] = _mm256_or_si256(lo[h], _mm256_and_si256(e, bit4));
                            hi[h] = _mm256_or_si256(hi[h], _mm256_and_si256(o, bit4));
                        }
                    }
                    for r in 0..R {
                        // QRows' nibble order: codes 8c + 0, 2, 4, 6 then 8c + 1, 3, 5, 7.
                        let (xl, xh) = (_mm256_set1_epi32(xw(r, 8 * c)), _mm256_set1_epi32(xw(r, 8 * c + 4)));
                        for h in 0..2 {
                            let s = _mm256_add_epi16(_mm256_maddubs_epi16(lo[h], xl), _mm256_maddubs_epi16(hi[h], xh));
                            p16[r][h] = _mm256_add_epi16(p16[r][h], s);
                            if (c + 1) % flush == 0 {
                                let s = _mm256_madd_epi16(p16[r][h], _mm256_set1_epi16(1));
                                dot[r][h] = _mm256_add_epi32(dot[r][h], s);
                                p16[r][h] = _mm256_setzero_si256();
                            }
                        }
                    }
                }
            }
        }
        let has_off = matches!(kind, Kind::Blk(_) | Kind::Q4 { min: true });
        for h in 0..2 {
            let d = f16s(blk.add(h * 16));
            let (a, off) = match kind {
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
                let corr = if matches!(kind, Kind::Q4 { min: false }) { 8 * sx } else { 0 };
                let i = _mm256_cvtepi32_ps(_mm256_sub_epi32(dot[r][h], _mm256_set1_epi32(corr)));
                acc[r][h] = _mm256_fmadd_ps(_mm256_mul_ps(a, dxv), i, acc[r][h]);
                if has_off {
                    acc[r][h] = _mm256_fmadd_ps(_mm256_mul_ps(off, dxv), _mm256_set1_ps(sx as f32), acc[r][h]);
                }
            }
        }
    }
    for r in 0..R {
        let (dst, n) = cols.at(r0 + r, p);
        for h in 0..2 {
            store(dst.add(h * 8), acc[r][h], n.saturating_sub(h * 8).min(8));
        }
    }
}
