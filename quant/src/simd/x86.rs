//! [`Avx512`] and [`Avx2`]: the x86-64 implementations of [`Isa`].

use super::{Isa, W};
use std::arch::x86_64::*;

/// The last three levels of [`Isa::hsum`]'s tree on 8 lanes.
#[inline(always)]
unsafe fn hsum8(s8: __m256) -> f32 {
    let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4)); // lanes 0, 1: s4[0]+s4[2], s4[1]+s4[3]
    let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<1>(s2, s2)); // s2[0] + s2[1]
    _mm_cvtss_f32(s1)
}

/// AVX-512 F/BW/VL (+ AVX2, FMA, F16C): one zmm register. Codes of up to 5 bits are turned
/// into floats by `vpermps` from a 16-entry table (it reads only the low 4 bits of each
/// index, so the mask is free).
#[derive(Clone, Copy)]
pub struct Avx512;

impl Isa for Avx512 {
    type V = __m512;
    type U = __m512i;
    type T = __m512;

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        _mm512_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn splat_at(p: *const f32) -> __m512 {
        _mm512_set1_ps(*p)
    }
    #[inline(always)]
    unsafe fn ld(p: *const f32) -> __m512 {
        _mm512_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn st(p: *mut f32, v: __m512) {
        _mm512_storeu_ps(p, v)
    }
    #[inline(always)]
    unsafe fn ld_f16(p: *const u16) -> __m512 {
        _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
    }
    #[inline(always)]
    unsafe fn st_f16(p: *mut u16, v: __m512) {
        _mm256_storeu_si256(p as *mut __m256i, _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v))
    }
    #[inline(always)]
    unsafe fn ld_bf16(p: *const u16) -> __m512 {
        let w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(p as *const __m256i));
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(w))
    }
    #[inline(always)]
    unsafe fn ld_i8(p: *const i8) -> __m512 {
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p as *const __m128i)))
    }
    #[inline(always)]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        _mm512_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: __m512, b: __m512) -> __m512 {
        _mm512_sub_ps(a, b)
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        _mm512_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn div(a: __m512, b: __m512) -> __m512 {
        _mm512_div_ps(a, b)
    }
    #[inline(always)]
    unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
        _mm512_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn max(a: __m512, b: __m512) -> __m512 {
        _mm512_max_ps(a, b)
    }
    #[inline(always)]
    unsafe fn min(a: __m512, b: __m512) -> __m512 {
        _mm512_min_ps(a, b)
    }
    #[inline(always)]
    unsafe fn round(a: __m512) -> __m512 {
        _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(a)
    }
    #[inline(always)]
    unsafe fn pow2i(n: __m512) -> __m512 {
        let e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
        _mm512_castsi512_ps(_mm512_slli_epi32::<23>(e))
    }
    #[inline(always)]
    unsafe fn hsum(v: __m512) -> f32 {
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
        hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), hi))
    }
    /// The tree level by level across the 16 vectors: 15 adds and 30 shuffles instead
    /// of 16 separate trees (64 adds). Each level pairs the same lanes as `hsum`, with
    /// the lower lane first, so every sum is bit for bit `hsum(v[k])`.
    #[inline(always)]
    unsafe fn hsum16(v: &[__m512; W]) -> __m512 {
        // Loops, not `array::from_fn`: no closure around an intrinsic.
        // s8: t[p] = [s8 of v[2p] | s8 of v[2p+1]] (8 lanes each).
        let mut t = [_mm512_setzero_ps(); 8];
        for (p, t) in t.iter_mut().enumerate() {
            let (a, b) = (v[2 * p], v[2 * p + 1]);
            *t = _mm512_add_ps(_mm512_shuffle_f32x4::<0x44>(a, b), _mm512_shuffle_f32x4::<0xEE>(a, b));
        }
        // s4: u[r], quarter i = s4 of v[4r + i].
        let mut u = [_mm512_setzero_ps(); 4];
        for (r, u) in u.iter_mut().enumerate() {
            let (a, b) = (t[2 * r], t[2 * r + 1]);
            *u = _mm512_add_ps(_mm512_shuffle_f32x4::<0x88>(a, b), _mm512_shuffle_f32x4::<0xDD>(a, b));
        }
        // s2: w[t], quarter i = [s2 of v[8t + i] (2 lanes), s2 of v[8t + 4 + i]].
        let mut w = [_mm512_setzero_ps(); 2];
        for (t2, w) in w.iter_mut().enumerate() {
            let (a, b) = (u[2 * t2], u[2 * t2 + 1]);
            *w = _mm512_add_ps(_mm512_shuffle_ps::<0x44>(a, b), _mm512_shuffle_ps::<0xEE>(a, b));
        }
        // s1: lane 4i + m = sum of v[4m + i]; permute to lane k = sum of v[k].
        let r = _mm512_add_ps(_mm512_shuffle_ps::<0x88>(w[0], w[1]), _mm512_shuffle_ps::<0xDD>(w[0], w[1]));
        let idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        _mm512_permutexvar_ps(idx, r)
    }
    #[inline(always)]
    unsafe fn ld_u32(p: *const u32) -> __m512i {
        _mm512_loadu_si512(p as *const __m512i)
    }
    #[inline(always)]
    unsafe fn ld_u8(p: *const u8) -> __m512i {
        _mm512_cvtepu8_epi32(_mm_loadu_si128(p as *const __m128i))
    }
    #[inline(always)]
    unsafe fn and(q: __m512i, m: u32) -> __m512i {
        _mm512_and_si512(q, _mm512_set1_epi32(m as i32))
    }
    #[inline(always)]
    unsafe fn shr(q: __m512i, s: u32) -> __m512i {
        _mm512_srlv_epi32(q, _mm512_set1_epi32(s as i32))
    }
    #[inline(always)]
    unsafe fn cvt(q: __m512i) -> __m512 {
        _mm512_cvtepi32_ps(q)
    }
    #[inline(always)]
    unsafe fn sel(a: __m512i, b: __m512i, m: u32) -> __m512i {
        // vpternlogd 0xCA: mask ? a : b, bit by bit.
        _mm512_ternarylogic_epi32::<0xCA>(_mm512_set1_epi32(m as i32), a, b)
    }
    #[inline(always)]
    unsafe fn rotr(q: __m512i, s: u32) -> __m512i {
        if s == 0 {
            q
        } else {
            _mm512_rorv_epi32(q, _mm512_set1_epi32(s as i32))
        }
    }
    #[inline(always)]
    unsafe fn code(q: __m512i, bits: u32) -> __m512 {
        // vpermps reads index bits 0..4, vpermt2ps bits 0..5: a table of the values
        // of the low `bits` bits, repeated, is the masked conversion in one op.
        #[inline(always)]
        unsafe fn t(m: i32) -> __m512 {
            _mm512_cvtepi32_ps(_mm512_and_si512(
                _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                _mm512_set1_epi32(m),
            ))
        }
        match bits {
            1..=4 => _mm512_permutexvar_ps(q, t((1 << bits) - 1)),
            5 => _mm512_permutex2var_ps(t(15), q, _mm512_add_ps(t(15), _mm512_set1_ps(16.0))),
            _ => _mm512_cvtepi32_ps(_mm512_and_si512(q, _mm512_set1_epi32((1 << bits) - 1))),
        }
    }
    #[inline(always)]
    unsafe fn table(t: &[f32; 16]) -> __m512 {
        _mm512_loadu_ps(t.as_ptr())
    }
    #[inline(always)]
    unsafe fn lut(q: __m512i, t: __m512) -> __m512 {
        _mm512_permutexvar_ps(q, t)
    }
    #[inline(always)]
    unsafe fn nib(q: __m512i, shift: u32) -> __m512 {
        let table = _mm512_setr_ps(0., 1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12., 13., 14., 15.);
        // A constant shift after unrolling: LLVM emits the immediate form.
        _mm512_permutexvar_ps(_mm512_srlv_epi32(q, _mm512_set1_epi32(shift as i32)), table)
    }
    #[inline(always)]
    unsafe fn prefetch(p: *const u8) {
        _mm_prefetch::<_MM_HINT_T0>(p as *const i8)
    }

    // The integer operations also need AVX-512 VNNI (`vpdpbusd`) and VBMI (`vpermb`,
    // `vpmultishiftqb`): only code compiled with them calls these (`Path::vnni`).
    const I8_BIAS: i32 = 128;
    type D = __m512i;
    #[inline(always)]
    unsafe fn splat_u(x: u32) -> __m512i {
        _mm512_set1_epi32(x as i32)
    }
    #[inline(always)]
    unsafe fn or(a: __m512i, b: __m512i) -> __m512i {
        _mm512_or_si512(a, b)
    }
    #[inline(always)]
    unsafe fn fields(q: __m512i, at: [u32; 4], mask: u32) -> __m512i {
        // One control byte per result byte, the offsets of the 64-bit lane's upper half
        // 32 further.
        let a = at.map(|a| a as u8);
        let ctrl = i64::from_le_bytes([a[0], a[1], a[2], a[3], a[0] + 32, a[1] + 32, a[2] + 32, a[3] + 32]);
        _mm512_and_si512(_mm512_multishift_epi64_epi8(_mm512_set1_epi64(ctrl), q), _mm512_set1_epi32(mask as i32))
    }
    #[inline(always)]
    unsafe fn ld_t4(p: *const u8) -> __m512i {
        // Byte `4 l + i` of the result is byte `16 i + l` of the 64 loaded.
        static IDX: [u8; 64] = {
            let mut idx = [0u8; 64];
            let mut b = 0;
            while b < 64 {
                idx[b] = (16 * (b % 4) + b / 4) as u8;
                b += 1;
            }
            idx
        };
        _mm512_permutexvar_epi8(_mm512_loadu_si512(IDX.as_ptr() as *const _), _mm512_loadu_si512(p as *const _))
    }
    #[inline(always)]
    unsafe fn dzero() -> __m512i {
        _mm512_setzero_si512()
    }
    #[inline(always)]
    unsafe fn dot(d: __m512i, a: __m512i, b: __m512i) -> __m512i {
        _mm512_dpbusd_epi32(d, a, b)
    }
    #[inline(always)]
    unsafe fn dot_i8(d: __m512i, a: __m512i, b: __m512i) -> __m512i {
        // a + 128 (I8_BIAS): unsigned bytes for vpdpbusd.
        _mm512_dpbusd_epi32(d, _mm512_xor_si512(a, _mm512_set1_epi8(-128)), b)
    }
    #[inline(always)]
    unsafe fn settle(d: __m512i) -> __m512i {
        d
    }
    #[inline(always)]
    unsafe fn dcvt(d: __m512i, sub: i32) -> __m512 {
        _mm512_cvtepi32_ps(_mm512_sub_epi32(d, _mm512_set1_epi32(sub)))
    }
}

/// AVX2 + FMA + F16C: two ymm registers, lanes `0..8` and `8..16`. `VNNI`: the integer
/// dot products are AVX-VNNI's `vpdpbusd` (code compiled with `avxvnni`, `Path::vnni`),
/// else `vpmaddubsw` pair sums in 16 bits, widened by `vpmaddwd` at each settle.
#[derive(Clone, Copy)]
pub struct Avx2<const VNNI: bool = false>;

/// Bytes at bits `at[i]` of each lane to byte `i`, masked ([`Isa::fields`]): per byte one
/// shift that lands the field on it, then the mask. Written out byte by byte, not as a
/// loop: after inlining `at` and `mask` are constants, and each byte then folds to an
/// immediate shift and an `and`, or to nothing (a loop LLVM left rolled kept the shift
/// counts and the tests as run-time work: Q6_K 4x slower).
#[inline(always)]
unsafe fn fields8(q: __m256i, at: [u32; 4], mask: u32) -> __m256i {
    #[inline(always)]
    unsafe fn byte(q: __m256i, at: u32, i: u32, mask: u32) -> __m256i {
        let m = mask & (0xFF << (8 * i));
        let s = at as i32 - 8 * i as i32;
        if m == 0 {
            _mm256_setzero_si256()
        } else if s >= 0 {
            _mm256_and_si256(_mm256_srl_epi32(q, _mm_cvtsi32_si128(s)), _mm256_set1_epi32(m as i32))
        } else {
            _mm256_and_si256(_mm256_sll_epi32(q, _mm_cvtsi32_si128(-s)), _mm256_set1_epi32(m as i32))
        }
    }
    let lo = _mm256_or_si256(byte(q, at[0], 0, mask), byte(q, at[1], 1, mask));
    _mm256_or_si256(lo, _mm256_or_si256(byte(q, at[2], 2, mask), byte(q, at[3], 3, mask)))
}

impl<const VNNI: bool> Isa for Avx2<VNNI> {
    type V = (__m256, __m256);
    type U = (__m256i, __m256i);
    type T = (__m256, __m256);

    #[inline(always)]
    unsafe fn zero() -> Self::V {
        (_mm256_setzero_ps(), _mm256_setzero_ps())
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self::V {
        (_mm256_set1_ps(x), _mm256_set1_ps(x))
    }
    #[inline(always)]
    unsafe fn splat_at(p: *const f32) -> Self::V {
        let v = _mm256_broadcast_ss(&*p);
        (v, v)
    }
    #[inline(always)]
    unsafe fn ld(p: *const f32) -> Self::V {
        (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(W / 2)))
    }
    #[inline(always)]
    unsafe fn st(p: *mut f32, v: Self::V) {
        _mm256_storeu_ps(p, v.0);
        _mm256_storeu_ps(p.add(W / 2), v.1);
    }
    #[inline(always)]
    unsafe fn ld_f16(p: *const u16) -> Self::V {
        let lo = _mm_loadu_si128(p as *const __m128i);
        let hi = _mm_loadu_si128(p.add(W / 2) as *const __m128i);
        (_mm256_cvtph_ps(lo), _mm256_cvtph_ps(hi))
    }
    #[inline(always)]
    unsafe fn st_f16(p: *mut u16, v: Self::V) {
        let lo = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v.0);
        let hi = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v.1);
        _mm256_storeu_si256(p as *mut __m256i, _mm256_set_m128i(hi, lo));
    }
    #[inline(always)]
    unsafe fn ld_bf16(p: *const u16) -> Self::V {
        #[inline(always)]
        unsafe fn w(q: *const u16) -> __m256 {
            let v = _mm256_cvtepu16_epi32(_mm_loadu_si128(q as *const __m128i));
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v))
        }
        (w(p), w(p.add(W / 2)))
    }
    #[inline(always)]
    unsafe fn ld_i8(p: *const i8) -> Self::V {
        #[inline(always)]
        unsafe fn w(q: *const i8) -> __m256 {
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(q as *const __m128i)))
        }
        (w(p), w(p.add(W / 2)))
    }
    #[inline(always)]
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V {
        (_mm256_add_ps(a.0, b.0), _mm256_add_ps(a.1, b.1))
    }
    #[inline(always)]
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V {
        (_mm256_sub_ps(a.0, b.0), _mm256_sub_ps(a.1, b.1))
    }
    #[inline(always)]
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V {
        (_mm256_mul_ps(a.0, b.0), _mm256_mul_ps(a.1, b.1))
    }
    #[inline(always)]
    unsafe fn div(a: Self::V, b: Self::V) -> Self::V {
        (_mm256_div_ps(a.0, b.0), _mm256_div_ps(a.1, b.1))
    }
    #[inline(always)]
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        (_mm256_fmadd_ps(a.0, b.0, c.0), _mm256_fmadd_ps(a.1, b.1, c.1))
    }
    #[inline(always)]
    unsafe fn max(a: Self::V, b: Self::V) -> Self::V {
        (_mm256_max_ps(a.0, b.0), _mm256_max_ps(a.1, b.1))
    }
    #[inline(always)]
    unsafe fn min(a: Self::V, b: Self::V) -> Self::V {
        (_mm256_min_ps(a.0, b.0), _mm256_min_ps(a.1, b.1))
    }
    #[inline(always)]
    unsafe fn round(a: Self::V) -> Self::V {
        const R: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        (_mm256_round_ps::<R>(a.0), _mm256_round_ps::<R>(a.1))
    }
    #[inline(always)]
    unsafe fn pow2i(n: Self::V) -> Self::V {
        let bias = _mm256_set1_epi32(127);
        let e0 = _mm256_add_epi32(_mm256_cvtps_epi32(n.0), bias);
        let e1 = _mm256_add_epi32(_mm256_cvtps_epi32(n.1), bias);
        (_mm256_castsi256_ps(_mm256_slli_epi32::<23>(e0)), _mm256_castsi256_ps(_mm256_slli_epi32::<23>(e1)))
    }
    #[inline(always)]
    unsafe fn hsum(v: Self::V) -> f32 {
        hsum8(_mm256_add_ps(v.0, v.1))
    }
    #[inline(always)]
    unsafe fn ld_u32(p: *const u32) -> Self::U {
        (_mm256_loadu_si256(p as *const __m256i), _mm256_loadu_si256(p.add(W / 2) as *const __m256i))
    }
    #[inline(always)]
    unsafe fn ld_u8(p: *const u8) -> Self::U {
        #[inline(always)]
        unsafe fn w(q: *const u8) -> __m256i {
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(q as *const __m128i))
        }
        (w(p), w(p.add(W / 2)))
    }
    #[inline(always)]
    unsafe fn and(q: Self::U, m: u32) -> Self::U {
        let m = _mm256_set1_epi32(m as i32);
        (_mm256_and_si256(q.0, m), _mm256_and_si256(q.1, m))
    }
    #[inline(always)]
    unsafe fn shr(q: Self::U, s: u32) -> Self::U {
        let n = _mm256_set1_epi32(s as i32);
        (_mm256_srlv_epi32(q.0, n), _mm256_srlv_epi32(q.1, n))
    }
    #[inline(always)]
    unsafe fn cvt(q: Self::U) -> Self::V {
        (_mm256_cvtepi32_ps(q.0), _mm256_cvtepi32_ps(q.1))
    }
    #[inline(always)]
    unsafe fn sel(a: Self::U, b: Self::U, m: u32) -> Self::U {
        #[inline(always)]
        unsafe fn f(m: __m256i, a: __m256i, b: __m256i) -> __m256i {
            _mm256_or_si256(_mm256_and_si256(m, a), _mm256_andnot_si256(m, b))
        }
        let m = _mm256_set1_epi32(m as i32);
        (f(m, a.0, b.0), f(m, a.1, b.1))
    }
    #[inline(always)]
    unsafe fn rotr(q: Self::U, s: u32) -> Self::U {
        if s == 0 {
            return q;
        }
        #[inline(always)]
        unsafe fn f(v: __m256i, r: __m256i, l: __m256i) -> __m256i {
            _mm256_or_si256(_mm256_srlv_epi32(v, r), _mm256_sllv_epi32(v, l))
        }
        let (r, l) = (_mm256_set1_epi32(s as i32), _mm256_set1_epi32(32 - s as i32));
        (f(q.0, r, l), f(q.1, r, l))
    }
    #[inline(always)]
    unsafe fn code(q: Self::U, bits: u32) -> Self::V {
        Self::cvt(Self::and(q, (1 << bits) - 1))
    }
    #[inline(always)]
    unsafe fn table(t: &[f32; 16]) -> Self::T {
        (_mm256_loadu_ps(t.as_ptr()), _mm256_loadu_ps(t.as_ptr().add(8)))
    }
    #[inline(always)]
    unsafe fn lut(q: Self::U, t: Self::T) -> Self::V {
        // vpermps reads the low 3 bits of each index; bit 3 (moved to the sign bit)
        // picks the upper half of the table.
        #[inline(always)]
        unsafe fn f(v: __m256i, t: (__m256, __m256)) -> __m256 {
            let (lo, hi) = (_mm256_permutevar8x32_ps(t.0, v), _mm256_permutevar8x32_ps(t.1, v));
            _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32::<28>(v)))
        }
        (f(q.0, t), f(q.1, t))
    }
    #[inline(always)]
    unsafe fn nib(q: Self::U, shift: u32) -> Self::V {
        #[inline(always)]
        unsafe fn f(v: __m256i, n: __m256i, mask: __m256i) -> __m256 {
            _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(v, n), mask))
        }
        let (mask, n) = (_mm256_set1_epi32(15), _mm256_set1_epi32(shift as i32));
        (f(q.0, n, mask), f(q.1, n, mask))
    }
    #[inline(always)]
    unsafe fn prefetch(p: *const u8) {
        _mm_prefetch::<_MM_HINT_T0>(p as *const i8)
    }

    const I8_BIAS: i32 = if VNNI { 128 } else { 0 };
    /// The 16-bit pair sums (unused with VNNI), then the 32-bit sums.
    type D = (Self::U, Self::U);
    #[inline(always)]
    unsafe fn splat_u(x: u32) -> Self::U {
        let v = _mm256_set1_epi32(x as i32);
        (v, v)
    }
    #[inline(always)]
    unsafe fn or(a: Self::U, b: Self::U) -> Self::U {
        (_mm256_or_si256(a.0, b.0), _mm256_or_si256(a.1, b.1))
    }
    #[inline(always)]
    unsafe fn fields(q: Self::U, at: [u32; 4], mask: u32) -> Self::U {
        (fields8(q.0, at, mask), fields8(q.1, at, mask))
    }
    #[inline(always)]
    unsafe fn ld_t4(p: *const u8) -> Self::U {
        // Rows of 16 bytes: interleave bytes of rows 0, 1 and of 2, 3, then their 16-bit
        // pairs, lanes 0..8 from the rows' low halves and 8..16 from the high ones.
        let k = p as *const __m128i;
        let (k0, k1, k2, k3) =
            (_mm_loadu_si128(k), _mm_loadu_si128(k.add(1)), _mm_loadu_si128(k.add(2)), _mm_loadu_si128(k.add(3)));
        let (lo01, lo23) = (_mm_unpacklo_epi8(k0, k1), _mm_unpacklo_epi8(k2, k3));
        let (hi01, hi23) = (_mm_unpackhi_epi8(k0, k1), _mm_unpackhi_epi8(k2, k3));
        (
            _mm256_set_m128i(_mm_unpackhi_epi16(lo01, lo23), _mm_unpacklo_epi16(lo01, lo23)),
            _mm256_set_m128i(_mm_unpackhi_epi16(hi01, hi23), _mm_unpacklo_epi16(hi01, hi23)),
        )
    }
    #[inline(always)]
    unsafe fn dzero() -> Self::D {
        let z = _mm256_setzero_si256();
        ((z, z), (z, z))
    }
    #[inline(always)]
    unsafe fn dot(d: Self::D, a: Self::U, b: Self::U) -> Self::D {
        let ((p0, p1), (s0, s1)) = d;
        if VNNI {
            ((p0, p1), (_mm256_dpbusd_avx_epi32(s0, a.0, b.0), _mm256_dpbusd_avx_epi32(s1, a.1, b.1)))
        } else {
            let p = (
                _mm256_add_epi16(p0, _mm256_maddubs_epi16(a.0, b.0)),
                _mm256_add_epi16(p1, _mm256_maddubs_epi16(a.1, b.1)),
            );
            (p, (s0, s1))
        }
    }
    #[inline(always)]
    unsafe fn dot_i8(d: Self::D, a: Self::U, b: Self::U) -> Self::D {
        if VNNI {
            // a + 128 (I8_BIAS): unsigned bytes for vpdpbusd.
            let m = _mm256_set1_epi8(-128);
            Self::dot(d, (_mm256_xor_si256(a.0, m), _mm256_xor_si256(a.1, m)), b)
        } else {
            // |a| times b with a's sign: Σ a b itself.
            let abs = (_mm256_abs_epi8(a.0), _mm256_abs_epi8(a.1));
            Self::dot(d, abs, (_mm256_sign_epi8(b.0, a.0), _mm256_sign_epi8(b.1, a.1)))
        }
    }
    #[inline(always)]
    unsafe fn settle(d: Self::D) -> Self::D {
        if VNNI {
            return d;
        }
        let ((p0, p1), (s0, s1)) = d;
        let one = _mm256_set1_epi16(1);
        let z = _mm256_setzero_si256();
        ((z, z), (_mm256_add_epi32(s0, _mm256_madd_epi16(p0, one)), _mm256_add_epi32(s1, _mm256_madd_epi16(p1, one))))
    }
    #[inline(always)]
    unsafe fn dcvt(d: Self::D, sub: i32) -> Self::V {
        let (_, (s0, s1)) = Self::settle(d);
        let sub = _mm256_set1_epi32(sub);
        (_mm256_cvtepi32_ps(_mm256_sub_epi32(s0, sub)), _mm256_cvtepi32_ps(_mm256_sub_epi32(s1, sub)))
    }
}
