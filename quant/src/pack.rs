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

use crate::format::{unpack, Blk, Format, Unpacked};
use crate::half_conv::{bf16_to_f32, f16_to_f32};
use crate::simd::NR;

/// Values of k per block of the Q8 and Q4 panels: Q8_0's, Q4_0's and Q4_1's block (int4
/// groups are cut into blocks of this size).
pub(crate) const QK: usize = Blk::Q8_0.k();
const _: () = assert!(Blk::Q4_0.k() == QK && Blk::Q4_1.k() == QK);

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
    /// The panels of stored `format` ([`Format::Int4`]: none, it is packed from a
    /// [`crate::QLinear`] as `Q4 { min: false }`).
    pub(crate) fn of(format: Format) -> Option<Kind> {
        Some(match format {
            Format::F32 => Kind::F32,
            Format::F16 => Kind::F16,
            Format::BF16 => Kind::BF16,
            Format::Int4 { .. } => return None,
            _ => Kind::of_blk(Blk::of(format)?),
        })
    }

    /// The panels of block type `f`: Q8_0, Q4_0 and Q4_1 have their own, the others the
    /// generic ones.
    pub(crate) const fn of_blk(f: Blk) -> Kind {
        match f {
            Blk::Q8_0 => Kind::Q8,
            Blk::Q4_0 => Kind::Q4 { min: false },
            Blk::Q4_1 => Kind::Q4 { min: true },
            b => Kind::Blk(b),
        }
    }

    /// The block type whose facts a quantized kind follows (int4's panels are Q4_0's).
    pub(crate) const fn blk(self) -> Option<Blk> {
        match self {
            Kind::Q8 => Some(Blk::Q8_0),
            Kind::Q4 { min: false } => Some(Blk::Q4_0),
            Kind::Q4 { min: true } => Some(Blk::Q4_1),
            Kind::Blk(b) => Some(b),
            Kind::F32 | Kind::F16 | Kind::BF16 => None,
        }
    }

    /// Weights per block of a quantized kind (`None`: stored as floats).
    pub(crate) fn block_k(self) -> Option<usize> {
        match self {
            Kind::Blk(f) => Some(f.k()),
            Kind::Q8 | Kind::Q4 { .. } => Some(QK),
            Kind::F32 | Kind::F16 | Kind::BF16 => None,
        }
    }

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

/// One matrix product's operands (raw, so the threads can share them): `x` `(m, inp)`
/// against the panels of `W` `[out, inp]`, into `y` `(m, out)`.
#[derive(Clone, Copy)]
pub(crate) struct Job {
    pub kind: Kind,
    pub inp: usize,
    pub out: usize,
    /// Panel data, `panel_bytes` per panel.
    pub data: *const u8,
    pub panel_bytes: usize,
    /// `(m, inp)` row-major.
    pub x: *const f32,
    /// `(m, out)` row-major.
    pub y: *mut f32,
}

// SAFETY: a `Job` is only used while the borrowed x, W and y it points into are alive
// (inside `crate::matmul::matmul`), and each thread writes a disjoint set of output columns.
unsafe impl Send for Job {}
unsafe impl Sync for Job {}

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

/// Repack GGUF Q8_0 rows (read by [`unpack`]: f16 d, 32 i8 as offset-binary codes).
pub(crate) fn pack_q8_0(src: &[u8], out: usize, inp: usize, dst: &mut [u8]) {
    let (nb, pb, sb) = (inp / QK, Kind::Q8.panel_bytes(inp), Blk::Q8_0.facts().bytes);
    let mut o = Unpacked::zero();
    for r in 0..out {
        let (p, lane) = (r / NR, r % NR);
        for b in 0..nb {
            unpack(Blk::Q8_0, &src[(r * nb + b) * sb..(r * nb + b + 1) * sb], &mut o);
            let base = p * pb + b * Q8_BLOCK;
            put_u16(dst, base + lane * 2, o.d);
            for k in 0..QK {
                dst[base + NR * 2 + k * NR + lane] = o.u[k] ^ 0x80; // the i8 again
            }
        }
    }
}

/// Write the 32 codes of one row's block into a Q4 panel block at `base`.
fn put_codes(dst: &mut [u8], base: usize, lane: usize, codes: &[u8]) {
    for c in 0..QK / 8 {
        let word = (0..8).fold(0u32, |w, j| w | (codes[c * 8 + j] as u32 & 15) << (4 * j));
        let at = base + (c * NR + lane) * 4;
        dst[at..at + 4].copy_from_slice(&word.to_le_bytes());
    }
}

/// Repack GGUF Q4_0 (`min = false`: f16 d, 4-bit codes) or Q4_1 (`min = true`: f16 d,
/// f16 m, codes), read by [`unpack`].
pub(crate) fn pack_q4_gguf(src: &[u8], min: bool, out: usize, inp: usize, dst: &mut [u8]) {
    let (kind, f) = (Kind::Q4 { min }, if min { Blk::Q4_1 } else { Blk::Q4_0 });
    let (nb, pb, sb) = (inp / QK, kind.panel_bytes(inp), f.facts().bytes);
    let mut o = Unpacked::zero();
    for r in 0..out {
        let (p, lane) = (r / NR, r % NR);
        for b in 0..nb {
            unpack(f, &src[(r * nb + b) * sb..(r * nb + b + 1) * sb], &mut o);
            let base = p * pb + b * q4_block(min);
            put_u16(dst, base + lane * 2, o.d);
            if min {
                put_u16(dst, base + NR * 2 + lane * 2, o.dm);
            }
            put_codes(dst, base + NR * 2 * (1 + min as usize), lane, &o.u[..QK]);
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
        Kind::F16 => dst.iter_mut().enumerate().for_each(|(k, d)| *d = f16_to_f32(u16_at((k * NR + lane) * 2))),
        Kind::BF16 => dst.iter_mut().enumerate().for_each(|(k, d)| *d = bf16_to_f32(u16_at((k * NR + lane) * 2))),
        Kind::Q8 => {
            for (b, blk) in dst.chunks_exact_mut(QK).enumerate() {
                let base = b * Q8_BLOCK;
                let d = f16_to_f32(u16_at(base + lane * 2));
                for (k, v) in blk.iter_mut().enumerate() {
                    *v = panel[base + NR * 2 + k * NR + lane] as i8 as f32 * d;
                }
            }
        }
        Kind::Q4 { min } => {
            for (b, blk) in dst.chunks_exact_mut(QK).enumerate() {
                let base = b * q4_block(min);
                let d = f16_to_f32(u16_at(base + lane * 2));
                let m = if min { f16_to_f32(u16_at(base + NR * 2 + lane * 2)) } else { 0.0 };
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
