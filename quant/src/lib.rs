//! tl-quant: the numbers of ../shared/spec/numbers.md.
//!
//! - [`f16_to_f32`], [`f32_to_f16`], [`bf16_to_f32`]: exact widening and round-to-nearest-even
//!   narrowing, through the `half` crate.
//! - [`pack_int4`], [`unpack_int4`], [`QLinear`]: symmetric int4 in groups of `g` columns
//!   (`int4-g<g>-sym`), low nibble = even column.
//! - [`Linear`]: one `y = x W^T` for f32 and int4 weights, batch-invariant bit for bit.
#![deny(missing_docs)]

mod error;
mod half_conv;
mod int4;
mod kernel;
mod linear;

pub use error::QuantError;
pub use half_conv::{bf16_to_f32, f16_to_f32, f32_to_f16};
pub use int4::{pack_int4, unpack_int4, QLinear, MAX_GROUP_ABS};
pub use linear::Linear;
