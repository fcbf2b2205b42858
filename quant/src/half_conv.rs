//! f16 and bf16 conversions (numbers.md), delegated to the `half` crate, which implements
//! exactly the spec's rules: exact widening; nearest-even narrowing with overflow to inf,
//! quiet NaN, subnormals and signed zero.

use half::{bf16, f16};

/// Widen an f16 bit pattern to f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    f16::from_bits(h).to_f32()
}

/// Narrow an f32 to an f16 bit pattern: round to nearest, ties to even.
pub fn f32_to_f16(x: f32) -> u16 {
    f16::from_f32(x).to_bits()
}

/// Widen a bf16 bit pattern to f32: the f32 whose bits are `h << 16` (exact).
pub fn bf16_to_f32(h: u16) -> f32 {
    bf16::from_bits(h).to_f32()
}
