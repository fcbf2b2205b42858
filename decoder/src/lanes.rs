//! The forward's vector math over tl-quant's SIMD layer ([`tl_quant::simd`], the one
//! both crates' kernels are written against, so each instruction set runs the same
//! operations): `exp` as our own polynomial, and loads and stores of partial vectors.
//!
//! Why our own `exp`: a library call could differ between paths; this one is built from
//! [`Isa`] operations, each exact or correctly rounded the same way on every path, so it
//! gives the same bits on all of them. The path is `tl_quant::Path` (the matrix kernels'
//! choice), so one CPU check covers both crates.

pub use tl_quant::simd::{Isa, W};
pub(crate) use tl_quant::simd_entry;
pub use tl_quant::Path;

/// `e^x` per lane, to about 2 ulp, the same bits on every path: Cephes' `expf`
/// (range reduction by `ln 2` in two parts, a degree-5 polynomial) written with [`Isa`]
/// operations. `x` is clamped to `[-87, 88]`, so NaN gives `e^-87` and the result is
/// always finite and positive.
///
/// # Safety
///
/// Runs only where `L`'s instruction set is available (inside its `target_feature` code).
#[inline(always)]
pub unsafe fn exp<L: Isa>(x: L::V) -> L::V {
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
pub unsafe fn ld_part<L: Isa>(p: *const f32, len: usize) -> L::V {
    let mut buf = [0.0f32; W];
    std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), len.min(W));
    L::ld(buf.as_ptr())
}

/// Up to 16 f16 from `p`, widened, zeros after `len`.
#[inline(always)]
pub unsafe fn ld_h_part<L: Isa>(p: *const u16, len: usize) -> L::V {
    let mut buf = [0u16; W];
    std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), len.min(W));
    L::ld_f16(buf.as_ptr())
}

/// The first `len` (at most 16) lanes of `v` to `p`.
#[inline(always)]
pub unsafe fn st_part<L: Isa>(p: *mut f32, v: L::V, len: usize) {
    let mut buf = [0.0f32; W];
    L::st(buf.as_mut_ptr(), v);
    std::ptr::copy_nonoverlapping(buf.as_ptr(), p, len.min(W));
}

#[inline(always)]
unsafe fn exp16_impl<L: Isa>(x: &[f32; W]) -> [f32; W] {
    let mut o = [0.0f32; W];
    L::st(o.as_mut_ptr(), exp::<L>(L::ld(x.as_ptr())));
    o
}

simd_entry!(
    /// [`exp`] of 16 values on `path` (tests compare paths and accuracy).
    #[doc(hidden)]
    pub fn exp16 => exp16_impl(x: &[f32; W]) -> [f32; W]
);
