//! GGUF files' blocks widened to f32 (the `--weights f32` path), and the check every
//! reader of them runs first: a block's f16 scales must be finite, its e8m0 exponent at
//! most [`E8M0_MAX`]. Both read the block
//! types through [`crate::format`]'s facts and parser, as the packers do, so the values
//! here are the ones [`crate::Linear`] computes with.

use crate::error::QuantError;
use crate::format::{h, scale_value, unpack, value, Blk, Format, Unpacked, E8M0_MAX};
use crate::half_conv::{bf16_to_f32, f16_to_f32};

/// Refuse a block whose f16 scale (`d`, `dmin` or `m`) is infinite or NaN: its weights
/// would have no defined value (the kernel's fused form and the table's would disagree on
/// which are NaN and which inf), so such a file is an error, naming the row and block.
pub(crate) fn check_scales(format: Format, bytes: &[u8], inp: usize) -> Result<(), QuantError> {
    let Some(b) = format.block_shape() else { return Ok(()) };
    let per_row = inp / b.weights;
    for (i, blk) in bytes.chunks_exact(b.bytes).enumerate() {
        let (row, block) = (i / per_row.max(1), i % per_row.max(1));
        for &a in b.f16_scales {
            let v = f16_to_f32(h(blk, a));
            if !v.is_finite() {
                return Err(QuantError::NonFiniteScale { format: format.to_string(), row, block, value: v });
            }
        }
        if b.e8m0_scale && blk[0] > E8M0_MAX {
            return Err(QuantError::ScaleOutOfRange { format: format.to_string(), row, block, exponent: blk[0] });
        }
    }
    Ok(())
}

/// The f32 weights `[out, inp]` of stored bytes in `format` (row-major, little-endian):
/// every value as docs/spec/numbers.md defines it. This is what `--weights f32` loads, and
/// [`crate::Linear::from_stored`] on the same bytes computes with exactly these values.
pub fn dequantize(format: Format, bytes: &[u8], out: usize, inp: usize) -> Result<Vec<f32>, QuantError> {
    let row = format.row_bytes(inp).ok_or(QuantError::BadBlocks { format: format.to_string(), inp })?;
    let n = out.checked_mul(row).ok_or(QuantError::ShapeOverflow { what: "w", rows: out, cols: row })?;
    let elems = out.checked_mul(inp).ok_or(QuantError::ShapeOverflow { what: "w", rows: out, cols: inp })?;
    if bytes.len() != n {
        return Err(QuantError::LengthMismatch { what: "w", expected: n, got: bytes.len() });
    }
    check_scales(format, bytes, inp)?;
    let mut w = Vec::with_capacity(elems);
    match format {
        Format::F32 => w.extend(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
        Format::F16 => w.extend(bytes.chunks_exact(2).map(|c| f16_to_f32(h(c, 0)))),
        Format::BF16 => w.extend(bytes.chunks_exact(2).map(|c| bf16_to_f32(h(c, 0)))),
        Format::Int4 { .. } => return Err(QuantError::BadBlocks { format: format.to_string(), inp }),
        _ => {
            let Some(f) = Blk::of(format) else {
                return Err(QuantError::BadBlocks { format: format.to_string(), inp });
            };
            let (facts, mut o) = (f.facts(), Unpacked::zero());
            for b in bytes.chunks_exact(facts.bytes) {
                unpack(f, b, &mut o);
                let (d, dm) = (scale_value(&facts, o.d), f16_to_f32(o.dm));
                for k in 0..facts.k {
                    let s = k / facts.sub;
                    w.push(value(&facts, d, dm, o.sc[s], o.mn[s], o.u[k]));
                }
            }
        }
    }
    Ok(w)
}
