//! [`Portable`]: plain Rust, one lane at a time, the reference the SIMD paths equal bit for
//! bit. It calls no intrinsic, so its `array::from_fn` closures cost nothing to inline.

use super::{Isa, W};
use crate::half_conv::{bf16_to_f32, f16_to_f32, f32_to_f16};

/// Plain Rust, one lane at a time: the reference.
#[derive(Clone, Copy)]
pub struct Portable;

impl Isa for Portable {
    type V = [f32; W];
    type U = [u32; W];
    type T = [f32; 16];

    #[inline(always)]
    unsafe fn zero() -> Self::V {
        [0.0; W]
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self::V {
        [x; W]
    }
    #[inline(always)]
    unsafe fn splat_at(p: *const f32) -> Self::V {
        [*p; W]
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
    unsafe fn ld_f16(p: *const u16) -> Self::V {
        std::ptr::read_unaligned(p as *const [u16; W]).map(f16_to_f32)
    }
    #[inline(always)]
    unsafe fn st_f16(p: *mut u16, v: Self::V) {
        std::ptr::write_unaligned(p as *mut [u16; W], v.map(f32_to_f16))
    }
    #[inline(always)]
    unsafe fn ld_bf16(p: *const u16) -> Self::V {
        std::ptr::read_unaligned(p as *const [u16; W]).map(bf16_to_f32)
    }
    #[inline(always)]
    unsafe fn ld_i8(p: *const i8) -> Self::V {
        std::ptr::read_unaligned(p as *const [i8; W]).map(|q| q as f32)
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
    #[inline(always)]
    unsafe fn ld_u32(p: *const u32) -> Self::U {
        std::ptr::read_unaligned(p as *const [u32; W])
    }
    #[inline(always)]
    unsafe fn ld_u8(p: *const u8) -> Self::U {
        std::ptr::read_unaligned(p as *const [u8; W]).map(|q| q as u32)
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
    unsafe fn nib(q: Self::U, shift: u32) -> Self::V {
        q.map(|v| ((v >> shift) & 15) as f32)
    }

    // Sums in i32 throughout: never a 16-bit pair, so nothing to settle and no bias.
    const I8_BIAS: i32 = 0;
    type D = [i32; W];
    #[inline(always)]
    unsafe fn splat_u(x: u32) -> Self::U {
        [x; W]
    }
    #[inline(always)]
    unsafe fn or(a: Self::U, b: Self::U) -> Self::U {
        std::array::from_fn(|l| a[l] | b[l])
    }
    #[inline(always)]
    unsafe fn fields(q: Self::U, at: [u32; 4], mask: u32) -> Self::U {
        q.map(|v| (0..4).fold(0, |f, i| f | (((v >> at[i]) & (mask >> (8 * i)) & 0xFF) << (8 * i))))
    }
    #[inline(always)]
    unsafe fn ld_t4(p: *const u8) -> Self::U {
        let b = std::ptr::read_unaligned(p as *const [u8; 64]);
        std::array::from_fn(|l| u32::from_le_bytes([b[l], b[16 + l], b[32 + l], b[48 + l]]))
    }
    #[inline(always)]
    unsafe fn dzero() -> Self::D {
        [0; W]
    }
    #[inline(always)]
    unsafe fn dot(d: Self::D, a: Self::U, b: Self::U) -> Self::D {
        let (a, b) = (a.map(u32::to_le_bytes), b.map(u32::to_le_bytes));
        std::array::from_fn(|l| d[l] + (0..4).map(|i| a[l][i] as i32 * b[l][i] as i8 as i32).sum::<i32>())
    }
    #[inline(always)]
    unsafe fn dot_i8(d: Self::D, a: Self::U, b: Self::U) -> Self::D {
        let (a, b) = (a.map(u32::to_le_bytes), b.map(u32::to_le_bytes));
        std::array::from_fn(|l| d[l] + (0..4).map(|i| a[l][i] as i8 as i32 * b[l][i] as i8 as i32).sum::<i32>())
    }
    #[inline(always)]
    unsafe fn settle(d: Self::D) -> Self::D {
        d
    }
    #[inline(always)]
    unsafe fn dcvt(d: Self::D, sub: i32) -> Self::V {
        d.map(|s| (s - sub) as f32)
    }
}
