//! The crate's error type.

use thiserror::Error;

/// What went wrong building or running a quantized or f32 linear layer.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum QuantError {
    /// A buffer whose length does not match the shape it is used with.
    #[error("{what}: expected {expected} elements, got {got}")]
    LengthMismatch {
        /// Which buffer ("x", "y", "w", "qweight", "scales", "q").
        what: &'static str,
        /// The length the shape implies.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// A shape whose element count overflows `usize`.
    #[error("{what}: shape {rows} x {cols} overflows usize")]
    ShapeOverflow {
        /// Which buffer.
        what: &'static str,
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
    },
    /// A group size that is zero, odd, or does not divide the input width.
    #[error("int4 group {group} is invalid for in = {inp} (must be even, nonzero and divide in)")]
    BadGroup {
        /// The group size.
        group: usize,
        /// The input width.
        inp: usize,
    },
    /// An odd number of columns to pack two a byte.
    #[error("pack_int4: {cols} columns is odd (two values share a byte)")]
    OddColumns {
        /// The column count.
        cols: usize,
    },
    /// A quantized value outside [-8, 7].
    #[error("pack_int4: q[{index}] = {value} is outside [-8, 7]")]
    QOutOfRange {
        /// Its flat index.
        index: usize,
        /// Its value.
        value: i8,
    },
    /// A NaN or infinite weight.
    #[error("quantize: weight [{row}, {col}] is {value} (not finite)")]
    NonFiniteWeight {
        /// Output row.
        row: usize,
        /// Input column.
        col: usize,
        /// Its value.
        value: f32,
    },
    /// A group whose scale would overflow f16 (max |W| > 7 * 65504).
    #[error("quantize: row {row} group {group} has max |W| = {max_abs} > 7 * 65504 (scale overflows f16)")]
    ScaleOverflow {
        /// Output row.
        row: usize,
        /// Group index within the row.
        group: usize,
        /// The group's largest magnitude.
        max_abs: f32,
    },
    /// A stored scale that is negative, infinite or NaN.
    #[error("int4 scale [{row}, {group}] = {value} is not a finite non-negative f16")]
    BadScale {
        /// Output row.
        row: usize,
        /// Group index within the row.
        group: usize,
        /// The widened value.
        value: f32,
    },
    /// Rows of a block format whose length is not a whole number of blocks.
    #[error("{format}: rows of {inp} values do not split into its blocks")]
    BadBlocks {
        /// The format.
        format: String,
        /// The row length.
        inp: usize,
    },
    /// A GGUF block whose f16 scale (`d`, `dmin` or `m`) is infinite or NaN.
    #[error("{format}: row {row} block {block} has a scale of {value} (not finite)")]
    NonFiniteScale {
        /// The format.
        format: String,
        /// Row of the matrix.
        row: usize,
        /// Block within the row.
        block: usize,
        /// The widened scale.
        value: f32,
    },
    /// An MXFP4 block whose e8m0 exponent lets a weight overflow f32 (or is OCP's NaN).
    #[error("{format}: row {row} block {block} has a scale exponent of {exponent} (at most 252: a larger one overflows f32)")]
    ScaleOutOfRange {
        /// The format.
        format: String,
        /// Row of the matrix.
        row: usize,
        /// Block within the row.
        block: usize,
        /// The stored e8m0 byte.
        exponent: u8,
    },
    /// Layers that cannot be stacked into one.
    #[error("concat: {reason}")]
    Concat {
        /// Why.
        reason: String,
    },
    /// A row index past the matrix.
    #[error("row {row} is outside a matrix of {rows} rows")]
    RowOutOfRange {
        /// The row asked for.
        row: usize,
        /// Rows in the matrix.
        rows: usize,
    },
    /// An instruction set this CPU does not have.
    #[error("this CPU cannot run the {path} kernels")]
    PathUnavailable {
        /// The path.
        path: String,
    },
}
