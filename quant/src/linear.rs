//! One linear layer for f32 and int4 weights.

use crate::error::QuantError;
use crate::int4::QLinear;
use crate::kernel::{matmul_t, Rows};

/// A linear weight `[out, inp]` (Hugging Face layout), f32 or int4. `y = x W^T`.
#[derive(Clone, Debug, PartialEq)]
pub enum Linear {
    /// Row-major f32 weights.
    F32 {
        /// `[out, inp]`, row-major.
        w: Vec<f32>,
        /// Output features.
        out: usize,
        /// Input features.
        inp: usize,
    },
    /// int4 weights with f16 group scales.
    Q4(QLinear),
}

impl Linear {
    /// An f32 layer, checking that `w` holds `out * inp` values.
    pub fn new_f32(w: Vec<f32>, out: usize, inp: usize) -> Result<Linear, QuantError> {
        let n = out.checked_mul(inp).ok_or(QuantError::ShapeOverflow { what: "w", rows: out, cols: inp })?;
        if w.len() != n {
            return Err(QuantError::LengthMismatch { what: "w", expected: n, got: w.len() });
        }
        Ok(Linear::F32 { w, out, inp })
    }

    /// Output features.
    pub fn out(&self) -> usize {
        match self {
            Linear::F32 { out, .. } => *out,
            Linear::Q4(q) => q.out,
        }
    }

    /// Input features.
    pub fn inp(&self) -> usize {
        match self {
            Linear::F32 { inp, .. } => *inp,
            Linear::Q4(q) => q.inp,
        }
    }

    /// `y = x W^T` with `x` `[m, inp]` and `y` `[m, out]`, both row-major.
    ///
    /// Batch-invariant bit for bit: each `y[i][n]` is the dot product of row `i` of `x` and
    /// row `n` of `W` with a fixed summation order (8 lane accumulators over chunks of 8,
    /// combined in a fixed order, then the tail), computed by a single thread. So row `i`
    /// of `y` has the same bits whatever `m` is, whichever other rows share the batch, and
    /// however many threads run. The int4 variant dequantizes a block of rows at a time
    /// (exactly) and runs the same dot, so it equals the f32 variant over
    /// [`QLinear::dequantize`] bit for bit.
    pub fn forward(&self, x: &[f32], m: usize, y: &mut [f32]) -> Result<(), QuantError> {
        match self {
            Linear::F32 { w, out, inp } => {
                let n = out.checked_mul(*inp).ok_or(QuantError::ShapeOverflow { what: "w", rows: *out, cols: *inp })?;
                if w.len() != n {
                    return Err(QuantError::LengthMismatch { what: "w", expected: n, got: w.len() });
                }
                matmul_t(x, m, *inp, *out, y, Rows::F32(w))
            }
            Linear::Q4(q) => q.forward(x, m, y),
        }
    }
}
