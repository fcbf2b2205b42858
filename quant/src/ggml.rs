//! The GGUF block types as llama.cpp stores them (ggml-quants.c's `block_*` structs), read
//! one block at a time into a plain form: the f16 scales, one signed scale and one min per
//! sub-block, and each weight's unsigned code in natural order. Both the packer (which
//! rearranges these into panels) and [`dequantize`] (the `--weights f32` path) read the
//! file through this one parser, and both compute a weight's value with [`value`], the
//! table of docs/spec/numbers.md "GGUF blocks".

use crate::error::QuantError;
use crate::half_conv::{bf16_to_f32, f16_to_f32};
use crate::linear::Format;

/// IQ4_NL's code book (ggml-common.h `kvalues_iq4nl`).
pub(crate) const IQ4NL: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// The block types kept as blocks by [`crate::pack`]'s generic block panels (Q4_0, Q4_1 and
/// Q8_0 have their own older panels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blk {
    Q5_0,
    Q5_1,
    Iq4Nl,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
}

impl Blk {
    /// Weights per block.
    pub(crate) const fn k(self) -> usize {
        match self {
            Blk::Q5_0 | Blk::Q5_1 | Blk::Iq4Nl => 32,
            _ => 256,
        }
    }
    /// Weights per sub-block scale.
    pub(crate) const fn sub(self) -> usize {
        match self {
            Blk::Q2K | Blk::Q3K | Blk::Q6K => 16,
            _ => 32,
        }
    }
}

/// One block, unpacked. `d` and `dm` are f16 bit patterns (`dm`: Q5_1's `m`, the K types'
/// `dmin`, else 0); `sc[s]`, `mn[s]` the scale and min of sub-block `s` as the value
/// formula uses them (Q3_K: the 6-bit scale minus 32; Q6_K: the int8); `u[k]` the
/// unsigned code of weight `k` (Q3_K: 2-bit code | high bit << 2; Q5_x: nibble | high bit
/// << 4; Q6_K: nibble | 2 high bits << 4).
pub(crate) struct Unpacked {
    pub d: u16,
    pub dm: u16,
    pub sc: [i8; 16],
    pub mn: [u8; 16],
    pub u: [u8; 256],
}

fn h(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// Q4_K / Q5_K: scale and min `j` (0..8) from the 12 packed 6-bit bytes (`get_scale_min_k4`).
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// Bytes of one block of `f` in the file.
pub(crate) const fn file_bytes(f: Blk) -> usize {
    match f {
        Blk::Q5_0 => 22,
        Blk::Q5_1 => 24,
        Blk::Iq4Nl => 18,
        Blk::Q2K => 84,
        Blk::Q3K => 110,
        Blk::Q4K => 144,
        Blk::Q5K => 176,
        Blk::Q6K => 210,
    }
}

/// Read one block of `f` (`b` holds exactly [`file_bytes`]).
pub(crate) fn unpack(f: Blk, b: &[u8], o: &mut Unpacked) {
    o.dm = 0;
    match f {
        Blk::Q5_0 | Blk::Q5_1 | Blk::Iq4Nl => {
            o.d = h(b, 0);
            let (qh, qs) = match f {
                Blk::Q5_0 => (u32::from_le_bytes([b[2], b[3], b[4], b[5]]), &b[6..22]),
                Blk::Q5_1 => {
                    o.dm = h(b, 2);
                    (u32::from_le_bytes([b[4], b[5], b[6], b[7]]), &b[8..24])
                }
                _ => (0, &b[2..18]),
            };
            // Byte j: weight j in the low nibble, j + 16 in the high; bit k of qh is weight
            // k's fifth bit.
            for j in 0..16 {
                o.u[j] = (qs[j] & 15) | (((qh >> j) & 1) << 4) as u8;
                o.u[j + 16] = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4) as u8;
            }
        }
        Blk::Q2K => {
            let (scales, qs) = (&b[0..16], &b[16..80]);
            o.d = h(b, 80);
            o.dm = h(b, 82);
            for s in 0..16 {
                o.sc[s] = (scales[s] & 15) as i8;
                o.mn[s] = scales[s] >> 4;
            }
            // Per 128 weights, 32 bytes; shift 2j picks the j-th group of 32 (16 from
            // bytes 0..16, then 16 from bytes 16..32).
            for k in 0..256 {
                let (n, j, l) = (k / 128, (k % 128) / 32, k % 32);
                o.u[k] = (qs[32 * n + l] >> (2 * j)) & 3;
            }
        }
        Blk::Q3K => {
            let (hm, qs, sb) = (&b[0..32], &b[32..96], &b[96..108]);
            o.d = h(b, 108);
            for s in 0..16 {
                let lo = (sb[s % 8] >> (4 * (s / 8))) & 15;
                let hi = (sb[8 + s % 4] >> (2 * (s / 4))) & 3;
                o.sc[s] = (lo | hi << 4) as i8 - 32;
            }
            for k in 0..256 {
                let (n, j, l) = (k / 128, (k % 128) / 32, k % 32);
                let low = (qs[32 * n + l] >> (2 * j)) & 3;
                let high = (hm[l] >> (4 * n + j)) & 1;
                o.u[k] = low | high << 2;
            }
        }
        Blk::Q4K | Blk::Q5K => {
            o.d = h(b, 0);
            o.dm = h(b, 2);
            let sb = &b[4..16];
            for s in 0..8 {
                let (sc, mn) = scale_min_k4(s, sb);
                o.sc[s] = sc as i8;
                o.mn[s] = mn;
            }
            let (qh, qs) = if f == Blk::Q5K { (&b[16..48], &b[48..176]) } else { (&b[0..0], &b[16..144]) };
            // Per 64 weights, 32 bytes: low nibbles first, then high nibbles; Q5_K's fifth
            // bit of weight (c, half, l) is bit 2c + half of qh[l].
            for k in 0..256 {
                let (c, half, l) = (k / 64, (k % 64) / 32, k % 32);
                let nib = (qs[32 * c + l] >> (4 * half)) & 15;
                let high = if f == Blk::Q5K { (qh[l] >> (2 * c + half)) & 1 } else { 0 };
                o.u[k] = nib | high << 4;
            }
        }
        Blk::Q6K => {
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            o.d = h(b, 208);
            for s in 0..16 {
                o.sc[s] = sc[s] as i8;
            }
            // Per 128 weights: 64 low bytes, 32 high bytes; quarter q of the 128 takes
            // nibble q / 2 of ql[l + 32 (q % 2)] and bits 2q of qh[l].
            for k in 0..256 {
                let (n, q, l) = (k / 128, (k % 128) / 32, k % 32);
                let nib = (ql[64 * n + l + 32 * (q % 2)] >> (4 * (q / 2))) & 15;
                let high = (qh[32 * n + l] >> (2 * q)) & 3;
                o.u[k] = nib | high << 4;
            }
        }
    }
}

/// The f32 value of a weight (docs/spec/numbers.md "GGUF blocks"), from its block's widened
/// `d`, `dm` and its sub-block's `sc`, `mn` and its code `u`.
#[inline(always)]
pub(crate) fn value(f: Blk, d: f32, dm: f32, sc: i8, mn: u8, u: u8) -> f32 {
    match f {
        Blk::Q5_0 => (u as i32 - 16) as f32 * d,
        Blk::Q5_1 => u as f32 * d + dm,
        Blk::Iq4Nl => d * IQ4NL[u as usize] as f32,
        Blk::Q2K | Blk::Q4K | Blk::Q5K => (d * sc as f32) * u as f32 - dm * mn as f32,
        Blk::Q3K => (d * sc as f32) * (u as i32 - 4) as f32,
        Blk::Q6K => (d * sc as f32) * (u as i32 - 32) as f32,
    }
}

/// The generic block type of a format, if it has one.
pub(crate) fn blk(format: Format) -> Option<Blk> {
    Some(match format {
        Format::Q5_0 => Blk::Q5_0,
        Format::Q5_1 => Blk::Q5_1,
        Format::IQ4_NL => Blk::Iq4Nl,
        Format::Q2_K => Blk::Q2K,
        Format::Q3_K => Blk::Q3K,
        Format::Q4_K => Blk::Q4K,
        Format::Q5_K => Blk::Q5K,
        Format::Q6_K => Blk::Q6K,
        _ => return None,
    })
}

/// `(bytes per block, weights per block, offsets of its f16 scales)` of a GGML block format.
fn block_scales(format: Format) -> Option<(usize, usize, &'static [usize])> {
    Some(match format {
        Format::Q4_0 => (18, 32, &[0]),
        Format::Q4_1 => (20, 32, &[0, 2]),
        Format::Q8_0 => (34, 32, &[0]),
        Format::Q5_0 => (22, 32, &[0]),
        Format::Q5_1 => (24, 32, &[0, 2]),
        Format::IQ4_NL => (18, 32, &[0]),
        Format::Q2_K => (84, 256, &[80, 82]),
        Format::Q3_K => (110, 256, &[108]),
        Format::Q4_K => (144, 256, &[0, 2]),
        Format::Q5_K => (176, 256, &[0, 2]),
        Format::Q6_K => (210, 256, &[208]),
        _ => return None,
    })
}

/// `(bytes, weights)` of one block of a GGML block format (`None` for F32/F16/BF16/int4).
pub(crate) fn block_shape(format: Format) -> Option<(usize, usize)> {
    block_scales(format).map(|(b, k, _)| (b, k))
}

/// Refuse a block whose f16 scale (`d`, `dmin` or `m`) is infinite or NaN: its weights
/// would have no defined value (the kernel's fused form and the table's would disagree on
/// which are NaN and which inf), so such a file is an error, naming the row and block.
pub(crate) fn check_scales(format: Format, bytes: &[u8], inp: usize) -> Result<(), QuantError> {
    let Some((bb, k, at)) = block_scales(format) else { return Ok(()) };
    let per_row = inp / k;
    for (i, blk) in bytes.chunks_exact(bb).enumerate() {
        for &a in at {
            let v = f16_to_f32(h(blk, a));
            if !v.is_finite() {
                let (row, block) = (i / per_row.max(1), i % per_row.max(1));
                return Err(QuantError::NonFiniteScale { format: format.to_string(), row, block, value: v });
            }
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
    let h16 = |c: &[u8]| u16::from_le_bytes([c[0], c[1]]);
    match format {
        Format::F32 => w.extend(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
        Format::F16 => w.extend(bytes.chunks_exact(2).map(|c| f16_to_f32(h16(c)))),
        Format::BF16 => w.extend(bytes.chunks_exact(2).map(|c| bf16_to_f32(h16(c)))),
        Format::Q8_0 => {
            for b in bytes.chunks_exact(34) {
                let d = f16_to_f32(h16(b));
                w.extend(b[2..].iter().map(|&q| q as i8 as f32 * d));
            }
        }
        Format::Q4_0 | Format::Q4_1 => {
            let min = format == Format::Q4_1;
            for b in bytes.chunks_exact(if min { 20 } else { 18 }) {
                let d = f16_to_f32(h16(b));
                let m = if min { f16_to_f32(h16(&b[2..])) } else { 0.0 };
                let qs = &b[if min { 4 } else { 2 }..];
                let v = |q: u8| if min { q as f32 * d + m } else { (q as i32 - 8) as f32 * d };
                w.extend(qs.iter().map(|&q| v(q & 15)));
                w.extend(qs.iter().map(|&q| v(q >> 4)));
            }
        }
        Format::Int4 { .. } => return Err(QuantError::BadBlocks { format: format.to_string(), inp }),
        _ => {
            let f = blk(format).expect("every other format is a generic block type");
            let mut o = Unpacked { d: 0, dm: 0, sc: [0; 16], mn: [0; 16], u: [0; 256] };
            for b in bytes.chunks_exact(file_bytes(f)) {
                unpack(f, b, &mut o);
                let (d, dm) = (f16_to_f32(o.d), f16_to_f32(o.dm));
                for k in 0..f.k() {
                    let s = k / f.sub();
                    w.push(value(f, d, dm, o.sc[s], o.mn[s], o.u[k]));
                }
            }
        }
    }
    Ok(w)
}
