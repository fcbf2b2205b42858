//! The vector operations of the kernels, for one panel of [`NR`] = 16 output columns, in
//! three instruction sets chosen at run time: AVX-512, AVX2 + FMA + F16C, and portable
//! Rust.
//!
//! Every operation is exact or correctly rounded the same way in all three: widening f16,
//! bf16, i8 and 4-bit codes to f32 is exact; `fma` is IEEE's fused multiply-add (the
//! portable one is `f32::mul_add`, the same correctly rounded operation as the hardware
//! instruction); `mul` is only used where the product is exact. So a kernel written once
//! against [`Isa`] gives the same bits through every implementation.

/// Output columns per panel: one AVX-512 register of f32, two AVX2 registers.
pub(crate) const NR: usize = 16;

/// `[e(0), e(1), .., e(n - 1)]` for `lanes!(n, |p| e)`, written out as a loop rather than
/// `std::array::from_fn`'s closure. The kernels call [`Isa`] methods only from code that
/// is inlined into a function compiled for the instruction set: a closure LLVM declines to
/// inline is compiled without the set's features, and each intrinsic in it then becomes a
/// function call (issue 36; `tests/codegen.rs` checks no intrinsic is left out of line).
macro_rules! lanes {
    ($n:expr, |$p:ident| $e:expr) => {{
        let mut a = {
            let $p = 0usize;
            [$e; $n]
        };
        #[allow(clippy::needless_range_loop)]
        for $p in 1..$n {
            a[$p] = $e;
        }
        a
    }};
}
pub(crate) use lanes;

/// One instruction set: 16-lane f32 vectors (`V`) and 16-lane u32 vectors (`U`).
///
/// # Safety
///
/// Every method reads or writes 16 lanes through raw pointers: callers pass pointers
/// valid for that many elements. An implementation for an instruction set may only be
/// used after checking the CPU has it (see [`crate::kernel`]'s dispatch).
pub(crate) trait Isa: Copy {
    /// 16 f32 lanes.
    type V: Copy;
    /// 16 u32 lanes.
    type U: Copy;
    /// A 16-entry f32 lookup table.
    type T: Copy;
    /// All lanes +0.0.
    unsafe fn zero() -> Self::V;
    /// All lanes `*p`.
    unsafe fn splat(p: *const f32) -> Self::V;
    /// All lanes `v`.
    unsafe fn splat_v(v: f32) -> Self::V;
    /// `a * b + c`, one rounding.
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `a * b` (callers use it only where the product is exact).
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    /// 16 f32.
    unsafe fn ld_f32(p: *const f32) -> Self::V;
    /// 16 f16, widened.
    unsafe fn ld_f16(p: *const u16) -> Self::V;
    /// 16 bf16, widened.
    unsafe fn ld_bf16(p: *const u16) -> Self::V;
    /// 16 i8, widened.
    unsafe fn ld_i8(p: *const i8) -> Self::V;
    /// 16 u32.
    unsafe fn ld_u32(p: *const u32) -> Self::U;
    /// 16 u8, zero-extended to u32.
    unsafe fn ld_u8(p: *const u8) -> Self::U;
    /// `q & m` per lane.
    unsafe fn and(q: Self::U, m: u32) -> Self::U;
    /// `q >> s` per lane (logical; `s < 32`).
    unsafe fn shr(q: Self::U, s: u32) -> Self::U;
    /// `q as f32` per lane (exact: callers pass small codes).
    unsafe fn cvt(q: Self::U) -> Self::V;
    /// `(a & m) | (b & !m)` per lane: the bits of `a` where `m` has ones, else `b`'s.
    unsafe fn sel(a: Self::U, b: Self::U, m: u32) -> Self::U;
    /// `q` rotated right by `s` bits per lane (`s < 32`).
    unsafe fn rotr(q: Self::U, s: u32) -> Self::U;
    /// `(q & (2^bits - 1)) as f32` per lane, `1 <= bits <= 8`: a code's value, whatever
    /// the bits above it hold (exact). AVX-512 reads codes of up to 5 bits by table
    /// lookup, which ignores the bits above the index: the mask costs nothing there.
    unsafe fn code(q: Self::U, bits: u32) -> Self::V;
    /// A 16-entry f32 table held in registers, for [`Isa::lut`].
    unsafe fn table(t: &[f32; 16]) -> Self::T;
    /// `t[q]` per lane (`q < 16`).
    unsafe fn lut(q: Self::U, t: Self::T) -> Self::V;
    /// `((q >> shift) & 15) as f32` per lane.
    unsafe fn nib(q: Self::U, shift: u32) -> Self::V;
    /// Store 16 f32.
    unsafe fn st(p: *mut f32, v: Self::V);
    /// Ask for the cache line at `p` (any address: a prefetch never faults).
    unsafe fn prefetch(_p: *const u8) {}
}

/// Plain Rust, one lane at a time: the reference the SIMD paths must equal bit for bit.
#[derive(Clone, Copy)]
pub(crate) struct Portable;

impl Isa for Portable {
    type V = [f32; NR];
    type U = [u32; NR];
    type T = [f32; 16];

    #[inline(always)]
    unsafe fn zero() -> Self::V {
        [0.0; NR]
    }
    #[inline(always)]
    unsafe fn ld_u8(p: *const u8) -> Self::U {
        std::array::from_fn(|l| *p.add(l) as u32)
    }
    #[inline(always)]
    unsafe fn and(q: Self::U, m: u32) -> Self::U {
        q.map(|v| v & m)
    }
    #[inline(always)]
    unsafe fn shr(q: Self::U, s: u32) -> Self::U {
        q.map(|v| v >> s)
    }
    #[inline(always)]
    unsafe fn cvt(q: Self::U) -> Self::V {
        q.map(|v| v as f32)
    }
    #[inline(always)]
    unsafe fn sel(a: Self::U, b: Self::U, m: u32) -> Self::U {
        std::array::from_fn(|l| (a[l] & m) | (b[l] & !m))
    }
    #[inline(always)]
    unsafe fn rotr(q: Self::U, s: u32) -> Self::U {
        q.map(|v| v.rotate_right(s))
    }
    #[inline(always)]
    unsafe fn code(q: Self::U, bits: u32) -> Self::V {
        q.map(|v| (v & ((1 << bits) - 1)) as f32)
    }
    #[inline(always)]
    unsafe fn table(t: &[f32; 16]) -> Self::T {
        *t
    }
    #[inline(always)]
    unsafe fn lut(q: Self::U, t: Self::T) -> Self::V {
        q.map(|v| t[v as usize & 15])
    }
    #[inline(always)]
    unsafe fn splat(p: *const f32) -> Self::V {
        [*p; NR]
    }
    #[inline(always)]
    unsafe fn splat_v(v: f32) -> Self::V {
        [v; NR]
    }
    #[inline(always)]
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        std::array::from_fn(|l| a[l].mul_add(b[l], c[l]))
    }
    #[inline(always)]
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V {
        std::array::from_fn(|l| a[l] * b[l])
    }
    #[inline(always)]
    unsafe fn ld_f32(p: *const f32) -> Self::V {
        std::array::from_fn(|l| *p.add(l))
    }
    #[inline(always)]
    unsafe fn ld_f16(p: *const u16) -> Self::V {
        std::array::from_fn(|l| crate::f16_to_f32(p.add(l).read_unaligned()))
    }
    #[inline(always)]
    unsafe fn ld_bf16(p: *const u16) -> Self::V {
        std::array::from_fn(|l| crate::bf16_to_f32(p.add(l).read_unaligned()))
    }
    #[inline(always)]
    unsafe fn ld_i8(p: *const i8) -> Self::V {
        std::array::from_fn(|l| *p.add(l) as f32)
    }
    #[inline(always)]
    unsafe fn ld_u32(p: *const u32) -> Self::U {
        std::array::from_fn(|l| p.add(l).read_unaligned())
    }
    #[inline(always)]
    unsafe fn nib(q: Self::U, shift: u32) -> Self::V {
        std::array::from_fn(|l| ((q[l] >> shift) & 15) as f32)
    }
    #[inline(always)]
    unsafe fn st(p: *mut f32, v: Self::V) {
        for (l, x) in v.into_iter().enumerate() {
            *p.add(l) = x;
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{Avx2, Avx512};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Isa;
    use std::arch::x86_64::*;

    /// AVX-512 (F + BW): one zmm register per panel. The 4-bit codes are turned into
    /// floats by `vpermps` from a 16-entry table (it reads only the low 4 bits of each
    /// index, so the mask is free).
    #[derive(Clone, Copy)]
    pub(crate) struct Avx512;

    impl Isa for Avx512 {
        type V = __m512;
        type U = __m512i;
        type T = __m512;

        #[inline(always)]
        unsafe fn zero() -> __m512 {
            _mm512_setzero_ps()
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
        unsafe fn splat(p: *const f32) -> __m512 {
            _mm512_set1_ps(*p)
        }
        #[inline(always)]
        unsafe fn splat_v(v: f32) -> __m512 {
            _mm512_set1_ps(v)
        }
        #[inline(always)]
        unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
            _mm512_fmadd_ps(a, b, c)
        }
        #[inline(always)]
        unsafe fn mul(a: __m512, b: __m512) -> __m512 {
            _mm512_mul_ps(a, b)
        }
        #[inline(always)]
        unsafe fn ld_f32(p: *const f32) -> __m512 {
            _mm512_loadu_ps(p)
        }
        #[inline(always)]
        unsafe fn ld_f16(p: *const u16) -> __m512 {
            _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
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
        unsafe fn ld_u32(p: *const u32) -> __m512i {
            _mm512_loadu_si512(p as *const __m512i)
        }
        #[inline(always)]
        unsafe fn nib(q: __m512i, shift: u32) -> __m512 {
            let table = _mm512_setr_ps(0., 1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12., 13., 14., 15.);
            // A constant shift after unrolling: LLVM emits the immediate form.
            _mm512_permutexvar_ps(_mm512_srlv_epi32(q, _mm512_set1_epi32(shift as i32)), table)
        }
        #[inline(always)]
        unsafe fn st(p: *mut f32, v: __m512) {
            _mm512_storeu_ps(p, v)
        }
        #[inline(always)]
        unsafe fn prefetch(p: *const u8) {
            _mm_prefetch::<_MM_HINT_T0>(p as *const i8)
        }
    }

    /// AVX2 + FMA + F16C: two ymm registers per panel (lanes 0..8 and 8..16).
    #[derive(Clone, Copy)]
    pub(crate) struct Avx2;

    impl Isa for Avx2 {
        type V = (__m256, __m256);
        type U = (__m256i, __m256i);
        type T = (__m256, __m256);

        #[inline(always)]
        unsafe fn zero() -> Self::V {
            (_mm256_setzero_ps(), _mm256_setzero_ps())
        }
        #[inline(always)]
        unsafe fn ld_u8(p: *const u8) -> Self::U {
            #[inline(always)]
            unsafe fn w(q: *const u8) -> __m256i {
                _mm256_cvtepu8_epi32(_mm_loadl_epi64(q as *const __m128i))
            }
            (w(p), w(p.add(8)))
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
        unsafe fn splat(p: *const f32) -> Self::V {
            let v = _mm256_broadcast_ss(&*p);
            (v, v)
        }
        #[inline(always)]
        unsafe fn splat_v(v: f32) -> Self::V {
            (_mm256_set1_ps(v), _mm256_set1_ps(v))
        }
        #[inline(always)]
        unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V {
            (_mm256_fmadd_ps(a.0, b.0, c.0), _mm256_fmadd_ps(a.1, b.1, c.1))
        }
        #[inline(always)]
        unsafe fn mul(a: Self::V, b: Self::V) -> Self::V {
            (_mm256_mul_ps(a.0, b.0), _mm256_mul_ps(a.1, b.1))
        }
        #[inline(always)]
        unsafe fn ld_f32(p: *const f32) -> Self::V {
            (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)))
        }
        #[inline(always)]
        unsafe fn ld_f16(p: *const u16) -> Self::V {
            let lo = _mm_loadu_si128(p as *const __m128i);
            let hi = _mm_loadu_si128(p.add(8) as *const __m128i);
            (_mm256_cvtph_ps(lo), _mm256_cvtph_ps(hi))
        }
        #[inline(always)]
        unsafe fn ld_bf16(p: *const u16) -> Self::V {
            #[inline(always)]
            unsafe fn w(q: *const u16) -> __m256 {
                let v = _mm256_cvtepu16_epi32(_mm_loadu_si128(q as *const __m128i));
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v))
            }
            (w(p), w(p.add(8)))
        }
        #[inline(always)]
        unsafe fn ld_i8(p: *const i8) -> Self::V {
            #[inline(always)]
            unsafe fn w(q: *const i8) -> __m256 {
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(q as *const __m128i)))
            }
            (w(p), w(p.add(8)))
        }
        #[inline(always)]
        unsafe fn ld_u32(p: *const u32) -> Self::U {
            (_mm256_loadu_si256(p as *const __m256i), _mm256_loadu_si256(p.add(8) as *const __m256i))
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
        unsafe fn st(p: *mut f32, v: Self::V) {
            _mm256_storeu_ps(p, v.0);
            _mm256_storeu_ps(p.add(8), v.1);
        }
        #[inline(always)]
        unsafe fn prefetch(p: *const u8) {
            _mm_prefetch::<_MM_HINT_T0>(p as *const i8)
        }
    }
}
