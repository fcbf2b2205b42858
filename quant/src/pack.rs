//! Weight panels: a `[out, inp]` matrix repacked at load into panels of [`NR`] = 16 output
//! rows, each stored k-major so the kernel reads 16 columns' weights for one `k` from one
//! contiguous run. The stored values are never changed: a panel holds the file's own
//! f32, f16, bf16, i8 or 4-bit codes and scales, rearranged.
//!
//! Layouts of one panel (rows past `out` in the last panel are zeros):
//! - `F32`: `(inp, 16)` f32. `F16`, `BF16`: `(inp, 16)` u16.
//! - `Q8` (GGUF Q8_0), per block of 32 k: `d (16,)` f16, then `q (32, 16)` i8; 544 bytes.
//! - `Q4` (GGUF Q4_1 with `min`; GGUF Q4_0 and int4-sym without), per block of 32 k:
//!   `d (16,)` f16, [`m (16,)` f16], then `q (4, 16)` u32 where lane `r` of word `c`
//!   holds the codes of k = `8c .. 8c + 8` of row `r`, k = `8c + j` in bits `4j .. 4j + 4`.
//!   The code is unsigned (0..15); without `min` the value is `(code - 8) * d`, computed
//!   as `fma(code, d, -8 d)` (exact: `(code - 8) d` is representable and `-8 d` exact).

use crate::ggml::Blk;
use crate::simd::NR;

/// Values of k per quantized block.
pub(crate) const QK: usize = 32;

/// How a panel stores its weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    F32,
    F16,
    BF16,
    Q8,
    /// 4-bit codes; `min`: a stored offset per block (Q4_1), else `-8 d` (Q4_0, int4).
    Q4 {
        min: bool,
    },
    /// The other GGUF block types ([`crate::blocks`]).
    Blk(Blk),
}

impl Kind {
    /// Bytes of one panel for `inp` input columns (`inp % QK == 0` for the block kinds).
    pub(crate) fn panel_bytes(self, inp: usize) -> usize {
        match self {
            Kind::F32 => inp * NR * 4,
            Kind::F16 | Kind::BF16 => inp * NR * 2,
            Kind::Q8 => inp / QK * Q8_BLOCK,
            Kind::Q4 { min } => inp / QK * q4_block(min),
            Kind::Blk(f) => inp / f.k() * crate::blocks::layout(f).bytes,
        }
    }
}

/// Bytes of a Q8 panel block: 16 f16 scales and 32 x 16 codes.
pub(crate) const Q8_BLOCK: usize = NR * 2 + QK * NR;

/// Bytes of a Q4 panel block.
pub(crate) const fn q4_block(min: bool) -> usize {
    NR * 2 * (1 + min as usize) + QK * NR / 2
}

/// 64-byte aligned storage, so f32 panel rows start on cache lines.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Line([u8; 64]);

/// Zeroed aligned bytes.
pub(crate) fn alloc(bytes: usize) -> Vec<Line> {
    vec![Line([0; 64]); bytes.div_ceil(64)]
}

/// The bytes of aligned storage.
pub(crate) fn bytes(v: &[Line]) -> &[u8] {
    // SAFETY: `Line` is 64 plain bytes with no padding; the slice covers exactly them.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

/// The bytes of aligned storage, writable.
pub(crate) fn bytes_mut(v: &mut [Line]) -> &mut [u8] {
    // SAFETY: as in `bytes`; any byte pattern is a valid `Line`.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(v)) }
}

fn put_u16(dst: &mut [u8], at: usize, v: u16) {
    dst[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

/// Repack element-wise formats: `elem` bytes per value, row-major `[out, inp]` source.
pub(crate) fn pack_elems(src: &[u8], elem: usize, out: usize, inp: usize, dst: &mut [u8]) {
    let pb = inp * NR * elem;
    for r in 0..out {
        let (p, lane) = (r / NR, r % NR);
        let row = &src[r * inp * elem..(r + 1) * inp * elem];
        for k in 0..inp {
            let at = p * pb + (k * NR + lane) * elem;
            dst[at..at + elem].copy_from_slice(&row[k * elem..(k + 1) * elem]);
        }
    }
}

/// Repack row-major f32 values (no byte copy of the whole matrix first: a widened
/// checkpoint is already the largest thing in memory at load).
pub(crate) fn pack_f32(w: &[f32], out: usize, inp: usize, dst: &mut [u8]) {
    let pb = inp * NR * 4;
    for r in 0..out {
        let (p, lane) = (r / NR, r % NR);
        for (k, v) in w[r * inp..(r + 1) * inp].iter().enumerate() {
            let at = p * pb + (k * NR + lane) * 4;
            dst[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// Repack GGUF Q8_0 rows (blocks of 34 bytes: f16 d, 32 i8).
pub(crate) fn pack_q8_0(src: &[u8], out: usize, inp: usize, dst: &mut [u8]) {
    let (nb, pb) = (inp / QK, Kind::Q8.panel_bytes(inp));
    for r in 0..out {
        let (p, lane) = (r / NR, r % NR);
        for b in 0..nb {
            let s = &src[(r * nb + b) * 34..(r * nb + b + 1) * 34];
            let base = p * pb + b * Q8_BLOCK;
            dst[base + lane * 2..base + lane * 2 + 2].copy_from_slice(&s[..2]);
            for k in 0..QK {
                dst[base + NR * 2 + k * NR + lane] = s[2 + k];
            }
        }
    }
}

/// Write the 32 codes of one row's block into a Q4 panel block at `base`.
fn put_codes(dst: &mut [u8], base: usize, lane: usize, codes: &[u8; QK]) {
    for c in 0..QK / 8 {
        let word = (0..8).fold(0u32, |w, j| w | (codes[c * 8 + j] as u32 & 15) << (4 * j));
        let at = base + (c * NR + lane) * 4;
        dst[at..at + 4].copy_from_slice(&word.to_le_bytes());
    }
}

/// Repack GGUF Q4_0 (`min = false`: 18-byte blocks, f16 d, 16 bytes of codes) or Q4_1
/// (`min = true`: 20-byte blocks, f16 d, f16 m, 16 bytes). In both, byte `j` holds
/// element `j` in its low nibble and element `j + 16` in its high nibble.
pub(crate) fn pack_q4_gguf(src: &[u8], min: bool, out: usize, inp: usize, dst: &mut [u8]) {
    let kind = Kind::Q4 { min };
    let (nb, pb, sb) = (inp / QK, kind.panel_bytes(inp), if min { 20 } else { 18 });
    let head = if min { 4 } else { 2 };
    for r in 0..out {
        let (p, lane) = (r / NR, r % NR);
        for b in 0..nb {
            let s = &src[(r * nb + b) * sb..(r * nb + b + 1) * sb];
            let base = p * pb + b * q4_block(min);
            dst[base + lane * 2..base + lane * 2 + 2].copy_from_slice(&s[..2]);
            if min {
                dst[base + NR * 2 + lane * 2..base + NR * 2 + lane * 2 + 2].copy_from_slice(&s[2..4]);
            }
            let mut codes = [0u8; QK];
            for j in 0..QK / 2 {
                codes[j] = s[head + j] & 15;
                codes[j + QK / 2] = s[head + j] >> 4;
            }
            put_codes(dst, base + NR * 2 * (1 + min as usize), lane, &codes);
        }
    }
}

/// Repack symmetric int4 (`qweight` `[out, inp/2]`: column `2b` in the low nibble, two's
/// complement; `scales` `[out, inp/group]` f16) with `group % 32 == 0`: code = q + 8.
pub(crate) fn pack_int4_sym(qweight: &[u8], scales: &[u16], group: usize, out: usize, inp: usize, dst: &mut [u8]) {
    let kind = Kind::Q4 { min: false };
    let (nb, pb, groups) = (inp / QK, kind.panel_bytes(inp), inp / group);
    for r in 0..out {
        let (p, lane) = (r / NR, r % NR);
        for b in 0..nb {
            let base = p * pb + b * q4_block(false);
            put_u16(dst, base + lane * 2, scales[r * groups + b * QK / group]);
            let mut codes = [0u8; QK];
            for (j, c) in codes.iter_mut().enumerate() {
                let k = b * QK + j;
                let byte = qweight[(r * inp + k) / 2];
                let q = if k.is_multiple_of(2) { byte & 15 } else { byte >> 4 };
                *c = (q ^ 8) & 15; // 4-bit two's complement q -> q + 8
            }
            put_codes(dst, base + NR * 2, lane, &codes);
        }
    }
}

/// Row `r` of the matrix, widened exactly as the kernel widens it, into `dst` (`inp`).
pub(crate) fn widen_row(kind: Kind, data: &[u8], inp: usize, r: usize, dst: &mut [f32]) {
    let pb = kind.panel_bytes(inp);
    let (panel, lane) = (&data[r / NR * pb..(r / NR + 1) * pb], r % NR);
    let u16_at = |at: usize| u16::from_le_bytes([panel[at], panel[at + 1]]);
    match kind {
        Kind::Blk(f) => crate::blocks::widen_row(f, panel, lane, dst),
        Kind::F32 => {
            for (k, d) in dst.iter_mut().enumerate() {
                let at = (k * NR + lane) * 4;
                *d = f32::from_le_bytes([panel[at], panel[at + 1], panel[at + 2], panel[at + 3]]);
            }
        }
        Kind::F16 => dst.iter_mut().enumerate().for_each(|(k, d)| *d = crate::f16_to_f32(u16_at((k * NR + lane) * 2))),
        Kind::BF16 => {
            dst.iter_mut().enumerate().for_each(|(k, d)| *d = crate::bf16_to_f32(u16_at((k * NR + lane) * 2)))
        }
        Kind::Q8 => {
            for (b, blk) in dst.chunks_exact_mut(QK).enumerate() {
                let base = b * Q8_BLOCK;
                let d = crate::f16_to_f32(u16_at(base + lane * 2));
                for (k, v) in blk.iter_mut().enumerate() {
                    *v = panel[base + NR * 2 + k * NR + lane] as i8 as f32 * d;
                }
            }
        }
        Kind::Q4 { min } => {
            for (b, blk) in dst.chunks_exact_mut(QK).enumerate() {
                let base = b * q4_block(min);
                let d = crate::f16_to_f32(u16_at(base + lane * 2));
                let m = if min { crate::f16_to_f32(u16_at(base + NR * 2 + lane * 2)) } else { 0.0 };
                let qb = base + NR * 2 * (1 + min as usize);
                for (k, v) in blk.iter_mut().enumerate() {
                    let at = qb + (k / 8 * NR + lane) * 4;
                    let word = u32::from_le_bytes([panel[at], panel[at + 1], panel[at + 2], panel[at + 3]]);
                    let code = (word >> (4 * (k % 8))) & 15;
                    // The dequantizers' own formulas (llama.cpp, Candle). The kernel's
                    // `fma(code, d, m or -8 d)` gives the same value, except that it may
                    // turn a -0 weight into +0, which no sum started from +0 can see.
                    *v = if min { code as f32 * d + m } else { (code as i32 - 8) as f32 * d };
                }
            }
        }
    }
}
