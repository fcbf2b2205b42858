//! How attention reads a row (one KV head's key or value at one slot) of a slab, for each
//! element type the pool may store ([`tl_core::KvElem`]): f16 values widened (F16C on the
//! SIMD paths), or q8 codes widened and multiplied by the row's f16 scale; and how a row
//! is stored ([`crate::kv_write`]): narrowed to f16, or quantized once ([`quantize_q8`]).
//!
//! Either way a loaded lane holds the stored value exactly: an f16 widens exactly, and a
//! q8 value `code * scale` has at most 8 + 11 significant bits, so the f32 product is
//! exact. The kernel's arithmetic after the load is the same for both, so the q8 path is
//! as reproducible as the f16 one: the same bits on every instruction set, batch, chunking
//! and thread count. It also equals attention over a dequantized f32 copy of the rows,
//! which is never made: the cache is read in place.

use tl_core::{quantize_q8, Q8Slab, Q8SlabMut};
use tl_quant::f32_to_f16;

use crate::lanes::{ld_h_part, simd_entry, Isa, W};

/// One slab as the kernel reads it: rows of `d` values at row index `h * B + slot`.
pub trait Rows: Copy + Send + Sync {
    /// Where one row is: what [`Rows::ld`] needs to load its lanes.
    type Row: Copy;
    /// Whole rows of `d` values the slab holds.
    fn rows(&self, d: usize) -> usize;
    /// Row `r`.
    ///
    /// # Safety
    /// `r < self.rows(d)`.
    unsafe fn row(&self, r: usize, d: usize) -> Self::Row;
    /// 16 values of `row` from column `at`, widened to f32.
    ///
    /// # Safety
    /// `at + 16 <= d`; inside a function compiled for `L`.
    unsafe fn ld<L: Isa>(row: Self::Row, at: usize) -> L::V;
    /// `len < 16` values of `row` from column `at`, zeros after them.
    ///
    /// # Safety
    /// `at + len <= d`; inside a function compiled for `L`.
    unsafe fn ld_part<L: Isa>(row: Self::Row, at: usize, len: usize) -> L::V;
}

impl Rows for &[u16] {
    type Row = *const u16;
    #[inline(always)]
    fn rows(&self, d: usize) -> usize {
        self.len() / d.max(1)
    }
    #[inline(always)]
    unsafe fn row(&self, r: usize, d: usize) -> *const u16 {
        self.as_ptr().add(r * d)
    }
    #[inline(always)]
    unsafe fn ld<L: Isa>(row: *const u16, at: usize) -> L::V {
        L::ld_f16(row.add(at))
    }
    #[inline(always)]
    unsafe fn ld_part<L: Isa>(row: *const u16, at: usize, len: usize) -> L::V {
        ld_h_part::<L>(row.add(at), len)
    }
}

impl Rows for Q8Slab<'_> {
    /// The row's codes and its scale widened to f32.
    type Row = (*const i8, f32);
    #[inline(always)]
    fn rows(&self, d: usize) -> usize {
        (self.codes.len() / d.max(1)).min(self.scales.len())
    }
    #[inline(always)]
    unsafe fn row(&self, r: usize, d: usize) -> (*const i8, f32) {
        (self.codes.as_ptr().add(r * d), widen(*self.scales.get_unchecked(r)))
    }
    #[inline(always)]
    unsafe fn ld<L: Isa>((codes, scale): (*const i8, f32), at: usize) -> L::V {
        L::mul(L::ld_i8(codes.add(at)), L::splat(scale))
    }
    #[inline(always)]
    unsafe fn ld_part<L: Isa>((codes, scale): (*const i8, f32), at: usize, len: usize) -> L::V {
        let mut buf = [0i8; W];
        std::ptr::copy_nonoverlapping(codes.add(at), buf.as_mut_ptr(), len.min(W));
        L::mul(L::ld_i8(buf.as_ptr()), L::splat(scale))
    }
}

/// f16 bits to f32, exactly as [`tl_quant::f16_to_f32`] for every non-NaN pattern (a NaN stays a
/// NaN), in a few inlined integer and float operations: once per row in the kernel's inner
/// loop, where a library call per row cost as much as the row's arithmetic.
///
/// The exponent and mantissa shifted into f32's places read as `2^-112` times the value
/// (subnormals included, as f32 subnormals), so one exact multiply by `2^112` rescales
/// them; the all-ones exponent (infinity, NaN) is set directly.
#[inline(always)]
pub fn widen(h: u16) -> f32 {
    let h = u32::from(h);
    let sign = (h & 0x8000) << 16;
    let rest = (h & 0x7fff) << 13;
    let mag = if h & 0x7c00 == 0x7c00 {
        f32::from_bits(0x7f80_0000 | rest)
    } else {
        f32::from_bits(rest) * f32::from_bits(0x7780_0000) // 2^112
    };
    f32::from_bits(mag.to_bits() | sign)
}

/// Quantize `src` `(n_kv_heads * d,)` (one token's keys or values) into `slot` of a q8
/// slab of `b` slots: head `h`'s row `h * b + slot` ([`quantize_q8`]'s rule, per row, so
/// what a position holds never depends on what else shares its step).
pub(crate) fn write_q8_rows(src: &[f32], slab: &mut Q8SlabMut<'_>, (b, slot, d): (usize, usize, usize)) {
    for (h, row) in src.chunks_exact(d).enumerate() {
        let r = h * b + slot;
        slab.scales[r] = quantize_q8(row, &mut slab.codes[r * d..(r + 1) * d]);
    }
}

/// f32 to f16, nearest-even, 16 at a time, the tail one by one (the same rounding).
#[inline(always)]
unsafe fn narrow_impl<L: Isa>(src: &[f32], dst: &mut [u16]) {
    let n = src.len().min(dst.len());
    let full = n / W * W;
    for c in (0..full).step_by(W) {
        L::st_f16(dst.as_mut_ptr().add(c), L::ld(src.as_ptr().add(c)));
    }
    for (d, &x) in dst[full..n].iter_mut().zip(&src[full..n]) {
        *d = f32_to_f16(x);
    }
}

simd_entry!(
    /// `dst[i] = f16(src[i])`, rounded to nearest, ties to even (`tl_quant::f32_to_f16`),
    /// for `i < min(len)`: F16C's `cvtps2ph` on the SIMD paths.
    #[doc(hidden)]
    pub fn narrow_f16 => narrow_impl(src: &[f32], dst: &mut [u16])
);
