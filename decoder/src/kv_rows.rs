//! How attention reads a row (one KV head's key or value at one slot) of a slab, for each
//! element type the pool may store ([`tl_core::KvElem`]): f16 values widened (F16C on the
//! SIMD paths), or q8 codes widened and multiplied by the row's f16 scale.
//!
//! Either way a loaded lane holds the stored value exactly: an f16 widens exactly, and a
//! q8 value `code * scale` has at most 8 + 11 significant bits, so the f32 product is
//! exact. The kernel's arithmetic after the load is the same for both, so the q8 path is
//! as reproducible as the f16 one: the same bits on every instruction set, batch, chunking
//! and thread count. It also equals attention over a dequantized f32 copy of the rows,
//! which is never made: the cache is read in place.

use tl_core::{quantize_q8, Q8Slab, Q8SlabMut};
use tl_quant::f16_to_f32;

use crate::lanes::{ld_h_part, Isa, W};

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
        (self.codes.as_ptr().add(r * d), f16_to_f32(*self.scales.get_unchecked(r)))
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

/// Quantize `src` `(n_kv_heads * d,)` (one token's keys or values) into `slot` of a q8
/// slab of `b` slots: head `h`'s row `h * b + slot` ([`quantize_q8`]'s rule, per row, so
/// what a position holds never depends on what else shares its step).
pub(crate) fn write_q8_rows(src: &[f32], slab: &mut Q8SlabMut<'_>, (b, slot, d): (usize, usize, usize)) {
    for (h, row) in src.chunks_exact(d).enumerate() {
        let r = h * b + slot;
        slab.scales[r] = quantize_q8(row, &mut slab.codes[r * d..(r + 1) * d]);
    }
}
