//! tl's one SIMD layer: 16-lane f32 and u32 vectors in three instruction sets chosen at run
//! time, AVX-512, AVX2 + FMA + F16C, and portable Rust (the reference). tl-quant's matrix
//! kernels (the integer one of the int8-activation mode too: 4-byte dot products a lane,
//! `vpdpbusd` where the CPU has VNNI) and tl-decoder's own loops (attention, RMSNorm, the
//! gated activations) are written once against [`Isa`], so each implementation runs the
//! very same sequence of operations.
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

/// One instruction set: 16-lane f32 vectors (`V`), 16-lane u32 vectors (`U`), a 16-entry
/// f32 table (`T`) and 16 lanes of integer dot products (`D`).
///
/// # Safety
///
/// Loads and stores touch 16 elements through raw pointers: callers pass pointers valid
/// for that many. An implementation for an instruction set runs only inside a function
/// compiled for it, after checking the CPU has it ([`crate::Path::available`]); the
/// integer operations of [`Avx512`] and of `Avx2<true>` also need VNNI
/// ([`crate::Path::vnni`]).
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

    // The integer operations of the int8-activation kernel (`crate::int8`): a `U` lane is
    // 4 bytes, and `D` holds 16 lanes' running integer dot products.

    /// What [`Isa::dot_i8`] adds beyond `Σ a b`, times `Σ b` (0 or 128).
    const I8_BIAS: i32;
    /// 16 lanes of running integer sums of [`Isa::dot`]s.
    type D: Copy;
    /// All lanes `x`.
    unsafe fn splat_u(x: u32) -> Self::U;
    /// `a | b` per lane.
    unsafe fn or(a: Self::U, b: Self::U) -> Self::U;
    /// Byte `i` of each lane = the lane's 8 bits from bit `at[i]` up, masked by byte `i` of
    /// `mask`: bit fields cut out of each lane, one to a byte. Each field lies within its
    /// lane (`mask`'s byte `i` below `2^(32 - at[i])`), so AVX-512 VBMI's
    /// `vpmultishiftqb`, which reads on across the lane, gives the same bytes.
    unsafe fn fields(q: Self::U, at: [u32; 4], mask: u32) -> Self::U;
    /// 64 bytes at `p` as 4 rows of 16, transposed: lane `l` holds `p[l]`, `p[16 + l]`,
    /// `p[32 + l]`, `p[48 + l]` (its 4 codes from a panel that stores each code's 16 lanes
    /// together).
    unsafe fn ld_t4(p: *const u8) -> Self::U;
    /// No sums yet.
    unsafe fn dzero() -> Self::D;
    /// `d` plus, per lane, the 4 products of `a`'s bytes, unsigned, and `b`'s, signed.
    /// AVX2 without VNNI adds products in 16-bit pairs (`vpmaddubsw`) until
    /// [`Isa::settle`]: callers settle before a pair's sum can leave the i16 range, after
    /// at most [`dots_per_settle`] dots.
    unsafe fn dot(d: Self::D, a: Self::U, b: Self::U) -> Self::D;
    /// `d` plus, per lane, the 4 products of `a`'s bytes and `b`'s, both signed, plus
    /// [`Isa::I8_BIAS`] times the sum of `b`'s (`b`'s bytes are not -128). The VNNI
    /// implementations make `a` unsigned as `a + 128` and leave the bias to the caller,
    /// who subtracts it once per block from the block's code sum; AVX2 without VNNI
    /// multiplies `|a|` by `b` with `a`'s sign (pairs up to 2 * 128 * 127: one dot per
    /// settle).
    unsafe fn dot_i8(d: Self::D, a: Self::U, b: Self::U) -> Self::D;
    /// Move the 16-bit pair sums into the 32-bit lanes (a no-op with VNNI).
    unsafe fn settle(d: Self::D) -> Self::D;
    /// The lanes' sums minus `sub`, as f32 (settled first; exact: callers keep the
    /// difference below 2^24 in magnitude).
    unsafe fn dcvt(d: Self::D, sub: i32) -> Self::V;
}

/// How many [`Isa::dot`]s of unsigned bytes up to `max` against signed bytes of at most
/// 127 in magnitude a 16-bit pair sum holds exactly: the longest run between
/// [`Isa::settle`]s (4-bit codes 8, 5-bit 4, 6-bit 2, Q8_0's `|q|` 1).
pub const fn dots_per_settle(max: u32) -> usize {
    (i16::MAX as u32 / (2 * max * 127)) as usize
}
