//! Symmetric int4 in groups of `g` columns (numbers.md, `int4-g<g>-sym`).

use crate::error::QuantError;
use crate::half_conv::{f16_to_f32, f32_to_f16};

/// The largest group magnitude whose scale fits f16: 7 * 65504 (exact in f32).
pub const MAX_GROUP_ABS: f32 = 7.0 * 65504.0;

fn checked_len(what: &'static str, rows: usize, cols: usize) -> Result<usize, QuantError> {
    rows.checked_mul(cols).ok_or(QuantError::ShapeOverflow { what, rows, cols })
}

fn check_len(what: &'static str, expected: usize, got: usize) -> Result<(), QuantError> {
    if expected == got {
        Ok(())
    } else {
        Err(QuantError::LengthMismatch { what, expected, got })
    }
}

fn check_group(inp: usize, group: usize) -> Result<(), QuantError> {
    if group == 0 || !group.is_multiple_of(2) || !inp.is_multiple_of(group) {
        return Err(QuantError::BadGroup { group, inp });
    }
    Ok(())
}

/// Pack `q` (`[rows, cols]`, values in [-8, 7]) two a byte, row-major: column `2b` in the low
/// nibble, `2b + 1` in the high nibble, 4-bit two's complement. Returns `[rows, cols / 2]` bytes.
pub fn pack_int4(q: &[i8], rows: usize, cols: usize) -> Result<Vec<u8>, QuantError> {
    if !cols.is_multiple_of(2) {
        return Err(QuantError::OddColumns { cols });
    }
    check_len("q", checked_len("q", rows, cols)?, q.len())?;
    if let Some((index, &value)) = q.iter().enumerate().find(|(_, v)| !(-8..=7).contains(*v)) {
        return Err(QuantError::QOutOfRange { index, value });
    }
    Ok(q.chunks_exact(2).map(|p| (p[0] as u8 & 0x0F) | ((p[1] as u8) << 4)).collect())
}

/// The two signed values of one packed byte: (even column, odd column).
#[inline(always)]
pub(crate) fn nibbles(b: u8) -> (i8, i8) {
    // Shifting the nibble to the top and back sign-extends it.
    (((b << 4) as i8) >> 4, (b as i8) >> 4)
}

/// Unpack bytes into signed values, two a byte (low nibble first). Every byte is valid.
pub fn unpack_int4(packed: &[u8]) -> Vec<i8> {
    packed
        .iter()
        .flat_map(|&b| {
            let (lo, hi) = nibbles(b);
            [lo, hi]
        })
        .collect()
}

/// An int4 linear weight `[out, inp]` with one f16 scale per group of `group` columns.
/// `W_hat[r][c] = q[r][c] * f32(scales[r][c / group])`.
#[derive(Clone, Debug, PartialEq)]
pub struct QLinear {
    /// Output features (rows of W).
    pub out: usize,
    /// Input features (columns of W).
    pub inp: usize,
    /// Columns per group (even, divides `inp`).
    pub group: usize,
    /// Packed values, `[out, inp / 2]` bytes (see [`pack_int4`]).
    pub qweight: Vec<u8>,
    /// f16 bit patterns, `[out, inp / group]`.
    pub scales: Vec<u16>,
}

impl QLinear {
    /// Quantize row-major f32 weights `w` (`[out, inp]`) with numbers.md's rule: per group,
    /// `s = f16(max|W| / 7)`, `q = clamp(rint(W / f32(s)), -8, 7)` with the STORED scale.
    pub fn quantize(w: &[f32], out: usize, inp: usize, group: usize) -> Result<QLinear, QuantError> {
        check_group(inp, group)?;
        check_len("w", checked_len("w", out, inp)?, w.len())?;
        let groups = inp / group;
        let mut q = vec![0i8; w.len()];
        let mut scales = Vec::with_capacity(out * groups);
        for r in 0..out {
            for g in 0..groups {
                let c0 = g * group;
                let ws = &w[r * inp + c0..r * inp + c0 + group];
                let mut max_abs = 0.0f32;
                for (j, &v) in ws.iter().enumerate() {
                    if !v.is_finite() {
                        return Err(QuantError::NonFiniteWeight { row: r, col: c0 + j, value: v });
                    }
                    max_abs = max_abs.max(v.abs());
                }
                if max_abs > MAX_GROUP_ABS {
                    return Err(QuantError::ScaleOverflow { row: r, group: g, max_abs });
                }
                let s16 = f32_to_f16(max_abs / 7.0);
                let s = f16_to_f32(s16);
                scales.push(s16);
                // A zero stored scale (all-zero group, or an f16 underflow) leaves q at 0.
                if s != 0.0 {
                    let qs = &mut q[r * inp + c0..r * inp + c0 + group];
                    for (qv, &v) in qs.iter_mut().zip(ws) {
                        *qv = (v / s).round_ties_even().clamp(-8.0, 7.0) as i8;
                    }
                }
            }
        }
        let qweight = pack_int4(&q, out, inp)?;
        Ok(QLinear { out, inp, group, qweight, scales })
    }

    /// Build from stored parts (an int4 checkpoint), checking the group, both lengths and that
    /// every scale is a finite, non-negative f16.
    pub fn from_parts(
        out: usize,
        inp: usize,
        group: usize,
        qweight: Vec<u8>,
        scales: Vec<u16>,
    ) -> Result<QLinear, QuantError> {
        let ql = QLinear { out, inp, group, qweight, scales };
        ql.validate()?;
        let groups = inp / group;
        for (i, &h) in ql.scales.iter().enumerate() {
            let v = f16_to_f32(h);
            if !v.is_finite() || v < 0.0 {
                return Err(QuantError::BadScale { row: i / groups, group: i % groups, value: v });
            }
        }
        Ok(ql)
    }

    /// Check the group and the lengths of `qweight` and `scales` (the fields are public).
    pub(crate) fn validate(&self) -> Result<(), QuantError> {
        check_group(self.inp, self.group)?;
        let n = checked_len("qweight", self.out, self.inp)?;
        check_len("qweight", n / 2, self.qweight.len())?;
        check_len("scales", self.out * (self.inp / self.group), self.scales.len())?;
        Ok(())
    }

    /// Write row `r` of `W_hat` into `dst` (`inp` floats). Exact: `q * s` has at most
    /// 4 + 11 significant bits.
    #[inline]
    fn dequantize_row(&self, r: usize, dst: &mut [f32]) {
        let groups = self.inp / self.group;
        let half_group = self.group / 2;
        let bytes = &self.qweight[r * self.inp / 2..(r + 1) * self.inp / 2];
        let scales = &self.scales[r * groups..(r + 1) * groups];
        for ((gb, gd), &sh) in bytes.chunks_exact(half_group).zip(dst.chunks_exact_mut(self.group)).zip(scales) {
            let s = f16_to_f32(sh);
            for (&b, d) in gb.iter().zip(gd.chunks_exact_mut(2)) {
                let (lo, hi) = nibbles(b);
                d[0] = lo as f32 * s;
                d[1] = hi as f32 * s;
            }
        }
    }

    /// The dequantized weights `W_hat`, `[out, inp]` row-major.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut w = vec![0.0f32; self.out * self.inp];
        if self.inp > 0 {
            for (r, row) in w.chunks_exact_mut(self.inp).enumerate() {
                self.dequantize_row(r, row);
            }
        }
        w
    }
    // `forward` is in linear.rs: it runs a `Linear`, which is built from this type.
}
