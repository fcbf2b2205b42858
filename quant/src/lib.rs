//! tl-quant: the numbers of docs/spec/numbers.md.
//!
//! - [`f16_to_f32`], [`f32_to_f16`], [`bf16_to_f32`]: exact widening and round-to-nearest-even
//!   narrowing, through the `half` crate.
//! - [`pack_int4`], [`unpack_int4`], [`QLinear`]: symmetric int4 in groups of `g` columns
//!   (`int4-g<g>-sym`), low nibble = even column.
//! - [`Linear`]: one `y = x W^T` for weights kept in their stored [`Format`] (f32, f16,
//!   bf16, every common GGUF block type, int4), batch-invariant bit for bit and equal to the f32
//!   layer over the widened weights, on AVX-512, AVX2 or portable code chosen at run time
//!   ([`Path`]), all bit-identical.
//! - [`dequantize`]: stored bytes of any [`Format`] widened to f32 by docs/spec/numbers.md
//!   (the `--weights f32` path), the values [`Linear`] computes with.
//! - [`simd`]: the 16-lane vector layer (AVX-512, AVX2, portable) that these kernels and
//!   tl-decoder's are written against.
//!
//! Inside, from the bottom: `format` (every block type's facts and its file layout),
//! `ggml` (widening and checking a file's blocks), `blocks` and `pack` (the panels the
//! kernels read), `kernel` and `staged` (register tiles and the staged prefill), `matmul`
//! (instruction set, tile shapes, threads), `linear` (the layer).
#![deny(missing_docs)]

mod blocks;
mod error;
mod format;
mod ggml;
mod half_conv;
mod int4;
mod int8;
mod int8_job;
mod int8_kernel;
mod kernel;
mod linear;
mod matmul;
mod pack;
pub mod simd;
mod staged;

pub use error::QuantError;
pub use format::{BlockShape, Format, E8M0_MAX};
pub use ggml::dequantize;
pub use half_conv::{bf16_to_f32, f16_to_f32, f32_to_f16};
pub use int4::{pack_int4, unpack_int4, QLinear, MAX_GROUP_ABS};
pub use int8::{quantize_q8_row, Activations, Q8Row};
pub use linear::Linear;
pub use matmul::Path;
