//! 16-lane f32 vectors for the forward's own loops (attention, RMSNorm, SwiGLU, K/V
//! writes), in three implementations chosen at run time: AVX-512, AVX2 + FMA + F16C, and
//! portable Rust, the reference.
//!
//! Why one trait: a kernel is written once against [`Lanes`], so each implementation runs
//! the very same sequence of operations. Every operation here is exact or correctly
//! rounded per lane in IEEE single precision the same way in all three (`fma` is the
//! fused multiply-add, `f32::mul_add` in the portable one; widening f16 is exact;
//! narrowing rounds to nearest, ties to even; `round` is to nearest, ties to even), so a
//! kernel gives the same bits on every path. Horizontal sums use one fixed pairwise tree
//! ([`Lanes::hsum`]); the exponential is our own polynomial ([`exp`]) built from those
//! operations, not a library call that could differ between paths.
//!
//! The path is `tl_quant::Path` (the matrix kernels' choice), so one CPU check covers both.

pub use tl_quant::Path;
use tl_quant::{f16_to_f32, f32_to_f16};

/// Lanes per vector.
pub const W: usize = 16;

/// One instruction set's 16-lane f32 vector.
///
/// # Safety
///
/// Loads and stores touch 16 elements through raw pointers: callers pass pointers valid
/// for that many. An implementation for an instruction set runs only inside a function
/// compiled for it, after checking the CPU has it ([`Path::available`]).
pub trait Lanes: Copy {
    /// 16 f32 lanes.
    type V: Copy;
    /// All lanes +0.0.
    unsafe fn zero() -> Self::V;
    /// All lanes `x`.
    unsafe fn splat(x: f32) -> Self::V;
    /// 16 f32.
    unsafe fn ld(p: *const f32) -> Self::V;
    /// Store 16 f32.
    unsafe fn st(p: *mut f32, v: Self::V);
    /// 16 f16, widened (exact).
    unsafe fn ld_h(p: *const u16) -> Self::V;
    /// Store 16 f16, rounded to nearest, ties to even (`tl_quant::f32_to_f16`).
    unsafe fn st_h(p: *mut u16, v: Self::V);
    /// `a + b`.
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    /// `a - b`.
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V;
    /// `a * b`.
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    /// `a / b`.
    unsafe fn div(a: Self::V, b: Self::V) -> Self::V;
    /// `a * b + c`, one rounding.
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `if a > b { a } else { b }` per lane (x86 `maxps` semantics, NaN gives `b`).
    unsafe fn max(a: Self::V, b: Self::V) -> Self::V;
    /// `if a < b { a } else { b }` per lane (x86 `minps` semantics, NaN gives `b`).
    unsafe fn min(a: Self::V, b: Self::V) -> Self::V;
    /// Round to an integral value, ties to even.
    unsafe fn round(a: Self::V) -> Self::V;
    /// `2^n` for integral `n` in `-126 ..= 127` (built from the exponent bits).
    unsafe fn pow2i(n: Self::V) -> Self::V;
    /// The lanes' sum by the fixed tree `s8[l] = v[l] + v[l+8]`, `s4[l] = s8[l] + s8[l+4]`,
    /// `s2[l] = s4[l] + s4[l+2]`, `s2[0] + s2[1]`.
    unsafe fn hsum(v: Self::V) -> f32;
    /// Lane `k` = `hsum(v[k])`: sixteen sums at once, by the same tree (an implementation
    /// may share the shuffles between vectors; each sum's additions stay the same).
    #[inline(always)]
    unsafe fn hsum16(v: &[Self::V; W]) -> Self::V {
        // A loop, not `array::from_fn`'s closure: code calling an implementation's
        // intrinsics must be inlined into its `target_feature` function (`simd_entry!`), and
        // a closure cannot be marked `inline(always)` (tl-quant's `lanes!` says why).
        let mut s = [0.0f32; W];
        for (s, v) in s.iter_mut().zip(v) {
            *s = Self::hsum(*v);
        }
        Self::ld(s.as_ptr())
    }
}

/// Plain Rust, one lane at a time: the reference.
#[derive(Clone, Copy)]
pub struct Portable;

impl Lanes for Portable {
    type V = [f32; W];

    #[inline(always)]
    unsafe fn zero() -> Self::V {
        [0.0; W]
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self::V {
        [x; W]
    }
    #[inline(always)]
    unsafe fn ld(p: *const f32) -> Self::V {
        std::ptr::read_unaligned(p as *const [f32; W])
    }
    #[inline(always)]
    unsafe fn st(p: *mut f32, v: Self::V) {
        std::ptr::write_unaligned(p as *mut [f32; W], v)
    }
    #[inline(always)]
    unsafe fn ld_h(p: *const u16) -> Self::V {
        let h = std::ptr::read_unaligned(p as *const [u16; W]);
        h.map(f16_to_f32)
    }
    #[inline(always)]
    unsafe fn st_h(p: *mut u16, v: Self::V) {
        std::ptr::write_unaligned(p as *mut [u16; W], v.map(f32_to_f16))
    }
    #[inline(always)]
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V {
        std::array::from_fn(|l| a[l] + b[l])
    }
    #[inline(always)]
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V {
        std::array::from_fn(|l| a[l] - b[l])
    }
    #[inline(always)]
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V {
        std::array::from_fn(|l| a[l] * b[l])
    }
    #[inline(always)]
    unsafe fn div(a: Self::V, b: Self::V) -> Self::V {
        std::array::from_fn(|l| a[l] / b[l])
    }
    #[inline(always)]
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        std::array::from_fn(|l| a[l].mul_add(b[l], c[l]))
    }
    #[inline(always)]
    unsafe fn max(a: Self::V, b: Self::V) -> Self::V {
        std::array::from_fn(|l| if a[l] > b[l] { a[l] } else { b[l] })
    }
    #[inline(always)]
    unsafe fn min(a: Self::V, b: Self::V) -> Self::V {
        std::array::from_fn(|l| if a[l] < b[l] { a[l] } else { b[l] })
    }
    #[inline(always)]
    unsafe fn round(a: Self::V) -> Self::V {
        a.map(f32::round_ties_even)
    }
    #[inline(always)]
    unsafe fn pow2i(n: Self::V) -> Self::V {
        n.map(|n| f32::from_bits(((n as i32 + 127) as u32) << 23))
    }
    #[inline(always)]
    unsafe fn hsum(v: Self::V) -> f32 {
        let s8: [f32; 8] = std::array::from_fn(|l| v[l] + v[l + 8]);
        let s4: [f32; 4] = std::array::from_fn(|l| s8[l] + s8[l + 4]);
        let s2: [f32; 2] = std::array::from_fn(|l| s4[l] + s4[l + 2]);
        s2[0] + s2[1]
    }
}

#[cfg(target_arch = "x86_64")]
pub use x86::{Avx2, Avx512};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Lanes, W};
    use std::arch::x86_64::*;

    /// The last three levels of [`Lanes::hsum`]'s tree on 8 lanes.
    #[inline(always)]
    unsafe fn hsum8(s8: __m256) -> f32 {
        let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4)); // lanes 0, 1: s4[0]+s4[2], s4[1]+s4[3]
        let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<1>(s2, s2)); // s2[0] + s2[1]
        _mm_cvtss_f32(s1)
    }

    /// AVX-512F (+ AVX2, FMA, F16C): one zmm register.
    #[derive(Clone, Copy)]
    pub struct Avx512;

    impl Lanes for Avx512 {
        type V = __m512;

        #[inline(always)]
        unsafe fn zero() -> __m512 {
            _mm512_setzero_ps()
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> __m512 {
            _mm512_set1_ps(x)
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
        unsafe fn ld_h(p: *const u16) -> __m512 {
            _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
        }
        #[inline(always)]
        unsafe fn st_h(p: *mut u16, v: __m512) {
            _mm256_storeu_si256(p as *mut __m256i, _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v))
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
            // Loops, not `array::from_fn`: no closure around an intrinsic (`Lanes::hsum16`).
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
    }

    /// AVX2 + FMA + F16C: two ymm registers, lanes `0..8` and `8..16`.
    #[derive(Clone, Copy)]
    pub struct Avx2;

    impl Lanes for Avx2 {
        type V = (__m256, __m256);

        #[inline(always)]
        unsafe fn zero() -> Self::V {
            (_mm256_setzero_ps(), _mm256_setzero_ps())
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> Self::V {
            (_mm256_set1_ps(x), _mm256_set1_ps(x))
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
        unsafe fn ld_h(p: *const u16) -> Self::V {
            let h = _mm256_loadu_si256(p as *const __m256i);
            (_mm256_cvtph_ps(_mm256_castsi256_si128(h)), _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(h)))
        }
        #[inline(always)]
        unsafe fn st_h(p: *mut u16, v: Self::V) {
            let lo = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v.0);
            let hi = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v.1);
            _mm256_storeu_si256(p as *mut __m256i, _mm256_set_m128i(hi, lo));
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
    }
}

/// `e^x` per lane, to about 2 ulp, the same bits on every path: Cephes' `expf`
/// (range reduction by `ln 2` in two parts, a degree-5 polynomial) written with [`Lanes`]
/// operations. `x` is clamped to `[-87, 88]`, so NaN gives `e^-87` and the result is
/// always finite and positive.
#[inline(always)]
pub unsafe fn exp<L: Lanes>(x: L::V) -> L::V {
    let x = L::min(L::max(x, L::splat(-87.0)), L::splat(88.0));
    let n = L::round(L::mul(x, L::splat(std::f32::consts::LOG2_E)));
    let r = L::fma(n, L::splat(-0.693_359_4), x); // ln 2, high part: 0.693359375, 9 bits
    let r = L::fma(n, L::splat(2.121_944_4e-4), r); // minus the low part
    let mut p = L::splat(1.987_569_1e-4);
    for c in [1.398_199_9e-3, 8.333_345e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5] {
        p = L::fma(p, r, L::splat(c));
    }
    let y = L::add(L::fma(p, L::mul(r, r), r), L::splat(1.0));
    L::mul(y, L::pow2i(n))
}

/// Up to 16 f32 from `p`, zeros after `len`.
#[inline(always)]
pub unsafe fn ld_part<L: Lanes>(p: *const f32, len: usize) -> L::V {
    let mut buf = [0.0f32; W];
    std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), len.min(W));
    L::ld(buf.as_ptr())
}

/// Up to 16 f16 from `p`, widened, zeros after `len`.
#[inline(always)]
pub unsafe fn ld_h_part<L: Lanes>(p: *const u16, len: usize) -> L::V {
    let mut buf = [0u16; W];
    std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), len.min(W));
    L::ld_h(buf.as_ptr())
}

/// The first `len` (at most 16) lanes of `v` to `p`.
#[inline(always)]
pub unsafe fn st_part<L: Lanes>(p: *mut f32, v: L::V, len: usize) {
    let mut buf = [0.0f32; W];
    L::st(buf.as_mut_ptr(), v);
    std::ptr::copy_nonoverlapping(buf.as_ptr(), p, len.min(W));
}

/// Generates a safe entry point `$name(path, args..)` for a kernel `$imp::<L>(args..)`
/// written against [`Lanes`]: one copy compiled for each instruction set, chosen by
/// `path`. A path the CPU lacks falls back to the portable copy (the same bits), so the
/// entry point is safe whatever `path` a caller passes.
macro_rules! simd_entry {
    ($(#[$m:meta])* $vis:vis fn $name:ident => $imp:ident ( $($arg:ident : $ty:ty),* $(,)? ) $(-> $ret:ty)?) => {
        $(#[$m])*
        $vis fn $name(path: $crate::lanes::Path, $($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx2,fma,f16c")]
                unsafe fn avx512($($arg: $ty),*) $(-> $ret)? {
                    unsafe { $imp::<$crate::lanes::Avx512>($($arg),*) }
                }
                #[target_feature(enable = "avx2,fma,f16c")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                    unsafe { $imp::<$crate::lanes::Avx2>($($arg),*) }
                }
                match path {
                    // SAFETY: the CPU has the instructions (checked by `available`).
                    $crate::lanes::Path::Avx512 if path.available() => return unsafe { avx512($($arg),*) },
                    $crate::lanes::Path::Avx2 if path.available() => return unsafe { avx2($($arg),*) },
                    _ => {}
                }
            }
            let _ = path;
            // SAFETY: the portable lanes need no instruction set.
            unsafe { $imp::<$crate::lanes::Portable>($($arg),*) }
        }
    };
}
pub(crate) use simd_entry;

#[inline(always)]
unsafe fn exp16_impl<L: Lanes>(x: &[f32; W]) -> [f32; W] {
    let mut o = [0.0f32; W];
    L::st(o.as_mut_ptr(), exp::<L>(L::ld(x.as_ptr())));
    o
}

simd_entry!(
    /// [`exp`] of 16 values on `path` (tests compare paths and accuracy).
    #[doc(hidden)]
    pub fn exp16 => exp16_impl(x: &[f32; W]) -> [f32; W]
);
