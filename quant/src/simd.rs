//! tl's one SIMD layer: 16-lane f32 and u32 vectors in three instruction sets chosen at run
//! time, AVX-512, AVX2 + FMA + F16C, and portable Rust (the reference). tl-quant's matrix
//! kernels and tl-decoder's own loops (attention, RMSNorm, the gated activations) are
//! written once against [`Isa`], so each implementation runs the very same sequence of
//! operations.
//!
//! Every operation is exact or correctly rounded per lane in IEEE single precision the same
//! way in all three: widening f16, bf16, i8 and small integer codes to f32 is exact; `fma`
//! is the fused multiply-add (`f32::mul_add` in the portable one); narrowing to f16 and
//! `round` are to nearest, ties to even; horizontal sums use one fixed pairwise tree
//! ([`Isa::hsum`]). So a kernel gives the same bits on every path.
//!
//! The intrinsics are only inlined into code compiled with their features: every method is
//! `inline(always)`, and a kernel runs inside one `#[target_feature]` function per path
//! ([`simd_entry!`](crate::simd_entry), tl-quant's `Tiles`). A closure around an intrinsic
//! is not inlined reliably and then costs a call per operation (issue 36); the tests
//! `tests/codegen.rs` of both crates fail if any intrinsic is left out of line.

mod portable;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use portable::Portable;
#[cfg(target_arch = "x86_64")]
pub use x86::{Avx2, Avx512};

/// Lanes per vector.
pub const W: usize = 16;

/// Output columns per weight panel: one vector's lanes (one AVX-512 register of f32, two
/// AVX2 registers).
pub(crate) const NR: usize = W;

/// `[e(0), e(1), .., e(n - 1)]` for `lanes!(n, |p| e)`, written out as a loop rather than
/// `std::array::from_fn`'s closure: a closure LLVM declines to inline is compiled without
/// the instruction set's features, and each intrinsic in it then becomes a function call.
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

/// Generates a safe entry point `$name(path, args..)` for a kernel `$imp::<I>(args..)`
/// written against [`Isa`]: one copy compiled for each instruction set (the features of
/// [`crate::Path::available`]), chosen by `path`. A path the CPU lacks falls back to the
/// portable copy (the same bits), so the entry point is safe whatever `path` is passed.
#[macro_export]
#[doc(hidden)]
macro_rules! simd_entry {
    ($(#[$m:meta])* $vis:vis fn $name:ident => $imp:ident ( $($arg:ident : $ty:ty),* $(,)? ) $(-> $ret:ty)?) => {
        $(#[$m])*
        $vis fn $name(path: $crate::Path, $($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
                unsafe fn avx512($($arg: $ty),*) $(-> $ret)? {
                    unsafe { $imp::<$crate::simd::Avx512>($($arg),*) }
                }
                #[target_feature(enable = "avx2,fma,f16c")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                    unsafe { $imp::<$crate::simd::Avx2>($($arg),*) }
                }
                match path {
                    // SAFETY: the CPU has the instructions (checked by `available`).
                    $crate::Path::Avx512 if path.available() => return unsafe { avx512($($arg),*) },
                    $crate::Path::Avx2 if path.available() => return unsafe { avx2($($arg),*) },
                    _ => {}
                }
            }
            let _ = path;
            // SAFETY: the portable lanes need no instruction set.
            unsafe { $imp::<$crate::simd::Portable>($($arg),*) }
        }
    };
}

/// One instruction set: 16-lane f32 vectors (`V`), 16-lane u32 vectors (`U`) and a
/// 16-entry f32 table (`T`).
///
/// # Safety
///
/// Loads and stores touch 16 elements through raw pointers: callers pass pointers valid
/// for that many. An implementation for an instruction set runs only inside a function
/// compiled for it, after checking the CPU has it ([`crate::Path::available`]).
#[allow(clippy::missing_safety_doc)] // the trait's Safety section covers every method
pub trait Isa: Copy {
    /// 16 f32 lanes.
    type V: Copy;
    /// 16 u32 lanes.
    type U: Copy;
    /// A 16-entry f32 lookup table.
    type T: Copy;
    /// All lanes +0.0.
    unsafe fn zero() -> Self::V;
    /// All lanes `x`.
    unsafe fn splat(x: f32) -> Self::V;
    /// All lanes `*p` (a broadcast from memory).
    unsafe fn splat_at(p: *const f32) -> Self::V;
    /// 16 f32.
    unsafe fn ld(p: *const f32) -> Self::V;
    /// Store 16 f32.
    unsafe fn st(p: *mut f32, v: Self::V);
    /// 16 f16, widened (exact).
    unsafe fn ld_f16(p: *const u16) -> Self::V;
    /// Store 16 f16, rounded to nearest, ties to even ([`crate::f32_to_f16`]).
    unsafe fn st_f16(p: *mut u16, v: Self::V);
    /// 16 bf16, widened (exact).
    unsafe fn ld_bf16(p: *const u16) -> Self::V;
    /// 16 i8, widened (exact).
    unsafe fn ld_i8(p: *const i8) -> Self::V;
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
        // A loop, not `array::from_fn`'s closure (the module comment says why).
        let mut s = [0.0f32; W];
        for (s, v) in s.iter_mut().zip(v) {
            *s = Self::hsum(*v);
        }
        Self::ld(s.as_ptr())
    }
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
    /// Ask for the cache line at `p` (any address: a prefetch never faults).
    unsafe fn prefetch(_p: *const u8) {}
}
