//! The int8-activation mode (docs/spec/numbers.md "q8 activations"): each activation row
//! quantized on its own in blocks of 32 ([`crate::int8_job::QRows`]), then integer dot products with the
//! weights' integer codes and the scales applied in a fixed order. Opt-in
//! ([`crate::Linear::with_activations`]); the exact f32 path stays the default.
//!
//! Kinds with an integer kernel: Q8_0 and Q4_0 / Q4_1 / int4 (their own panels,
//! [`crate::pack`]) and Q4_K, Q5_K, Q6_K (the generic panels, [`crate::blocks`]).
//! Per output `y[i][n]`, activation blocks `b` ascending, from +0.0:
//! - Q8_0 (`w = q d`), Q4_0 (`w = (c - 8) d`): `y = fma(d * dx, I, y)` with `I` the exact
//!   integer `Σ q qx` (Q4_0: `Σ c qx - 8 Σ qx`), as f32 (exact: `|I| < 2^24`);
//! - Q4_1 (`w = c d + m`): `y = fma(d * dx, Σ c qx, y)` then `y = fma(m * dx, Σ qx, y)`;
//! - Q4_K and Q5_K, per sub-block of 32: `y = fma((d sc) dx, Σ c qx, y)` then
//!   `y = fma((-dmin mn) dx, Σ qx, y)`;
//! - Q6_K (`w = d sc (u - 32)`, sub-blocks of 16): `y = fma(d * dx, T, y)` with `T = sc_a
//!   I_a + sc_b I_b` over the block's two sub-blocks, `I = Σ (u - 32) qx`; exact as an
//!   f32 too (`|T| <= 2 * 128 * 16 * 32 * 127 < 2^24`);
//!
//! where `dx` is the activation block's scale and `d * dx`, `m * dx` one f32 rounding each.
//! The integer sums are exact whatever order adds them, so every instruction set gives
//! the same bits: the portable code here, AVX2 ([`crate::int8_avx2`]), and AVX-512 with
//! VNNI and VBMI ([`crate::int8_avx512`]: `vpdpbusd` on codes made unsigned, Q8_0's
//! `q + 128`, the correction `128 Σ qx` subtracted exactly).
//! A row's result depends only on that row: batch, chunk and thread invariance hold as
//! on the exact path.

use rayon::prelude::*;

use crate::blocks;
use crate::format::Blk;
use crate::half_conv::f16_to_f32;
use crate::int8_job::{block_bytes, kind_index, weights_per_block, Cols};
pub(crate) use crate::int8_job::{quantize_rows, IntJob, IntPath};
use crate::pack::{Kind, QK};
use crate::simd::NR;

/// How a layer treats its input rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Activations {
    /// f32 rows, one FMA chain per output over the exact weights (the default).
    #[default]
    Exact,
    /// Rows quantized to int8 in blocks of 32, integer dot products (this module), for
    /// the kinds that have an integer kernel; the others stay exact.
    Q8,
}

impl std::str::FromStr for Activations {
    type Err = String;
    /// `exact` or `q8` (the `--activations` flag).
    fn from_str(s: &str) -> Result<Activations, String> {
        match s {
            "exact" => Ok(Activations::Exact),
            "q8" => Ok(Activations::Q8),
            other => Err(format!("activations {other:?}: expected \"exact\" or \"q8\"")),
        }
    }
}

impl std::fmt::Display for Activations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Activations::Exact => "exact",
            Activations::Q8 => "q8",
        })
    }
}

/// One activation row quantized by numbers.md's rule: its codes, and per block of 32 its
/// scale and the sum of its codes. What [`Activations::Q8`] layers compute with; public
/// so the rule can be checked on its own.
pub fn quantize_q8_row(x: &[f32]) -> Result<Q8Row, crate::QuantError> {
    if !x.len().is_multiple_of(QK) {
        return Err(crate::QuantError::BadBlocks { format: "q8 activations".into(), inp: x.len() });
    }
    let r = quantize_rows(x, 1, x.len(), Kind::Q8, IntPath::Portable);
    Ok(Q8Row { q: r.q, d: r.d, s: r.s })
}

/// One quantized activation row ([`quantize_q8_row`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Q8Row {
    /// The codes, one per value.
    pub q: Vec<i8>,
    /// Each block's scale.
    pub d: Vec<f32>,
    /// Each block's sum of codes.
    pub s: Vec<i32>,
}

/// Whether `kind` has an integer kernel.
pub(crate) fn supported(kind: Kind) -> bool {
    kind_index(kind).is_some()
}

/// `y` `(m, out)` for the quantized rows, panels split over the current rayon pool (each
/// panel's columns are computed whole by one thread and written in place).
pub(crate) fn matmul(j: &IntJob<'_>, m: usize, y: &mut [f32], path: IntPath) {
    assert!(y.len() >= m * j.out);
    let panels = j.out.div_ceil(NR);
    let y = Cols::new(y, j.out);
    // Pairs of panels: the AVX-512 tile reads each row's codes once for both.
    (0..panels.div_ceil(2)).into_par_iter().with_min_len(2).for_each(|q| {
        let np = 2.min(panels - 2 * q);
        let cols = y.from(2 * q * NR);
        let at = |p: usize| &j.data[p * j.panel_bytes..(p + 1) * j.panel_bytes];
        #[cfg(target_arch = "x86_64")]
        match path {
            // SAFETY: `IntPath::of` picks a path only where the CPU has it; `cols` holds
            // `m` rows.
            IntPath::Avx512 => unsafe {
                match np {
                    2 => crate::int8_avx512::panels::<2>(j, [at(2 * q), at(2 * q + 1)], m, cols),
                    _ => crate::int8_avx512::panels::<1>(j, [at(2 * q)], m, cols),
                }
                return;
            },
            IntPath::Avx2 => unsafe {
                for p in 0..np {
                    crate::int8_avx2::panel(j, at(2 * q + p), m, cols, p);
                }
                return;
            },
            IntPath::Portable => {}
        }
        for p in 0..np {
            panel_portable(j, at(2 * q + p), m, cols, p);
        }
    });
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// The unsigned code of weight `k` of lane `l` of a panel block (Q8_0's: the i8 itself).
fn code(kind: Kind, blk: &[u8], l: usize, k: usize) -> i32 {
    let word = |at: usize| u32::from_le_bytes([blk[at], blk[at + 1], blk[at + 2], blk[at + 3]]);
    match kind {
        Kind::Q8 => blk[NR * 2 + k * NR + l] as i8 as i32,
        Kind::Q4 { min } => {
            let at = NR * 2 * (1 + min as usize) + ((k / 8) * NR + l) * 4;
            ((word(at) >> (4 * (k % 8))) & 15) as i32
        }
        Kind::Blk(f) => blocks::code(blocks::layout(f), blk, l, k) as i32,
        _ => unreachable!("no integer kernel for {kind:?}"),
    }
}

/// The reference: the task's panel `p` (its columns in `cols`), every row, by the
/// module's formulas, one activation block (32 values) at a time.
fn panel_portable(j: &IntJob<'_>, panel: &[u8], m: usize, cols: Cols, p: usize) {
    let nb = j.inp / QK;
    let (bb, per) = (block_bytes(j.kind), weights_per_block(j.kind) / QK); // activation blocks per weight block
    for r in 0..m {
        let (dst, n) = cols.at(r, p);
        for l in 0..n {
            let mut y = 0.0f32;
            for ab in 0..nb {
                let (b, sub) = (ab / per, ab % per);
                let blk = &panel[b * bb..(b + 1) * bb];
                let (dx, sx) = (j.rows.d[r * nb + ab], j.rows.s[r * nb + ab]);
                let x = |k: usize| j.rows.at(r, j.inp, ab * QK + k) as i32;
                // Σ u x over this block's values `k0 .. k0 + n`.
                let dot =
                    |k0: usize, n: usize| (k0..k0 + n).map(|k| code(j.kind, blk, l, sub * QK + k) * x(k)).sum::<i32>();
                let d = f16_at(blk, 2 * l);
                match j.kind {
                    Kind::Q4 { min: true } => {
                        y = (d * dx).mul_add(dot(0, QK) as f32, y);
                        y = (f16_at(blk, NR * 2 + 2 * l) * dx).mul_add(sx as f32, y);
                    }
                    Kind::Q4 { min: false } => y = (d * dx).mul_add((dot(0, QK) - 8 * sx) as f32, y),
                    Kind::Q8 => y = (d * dx).mul_add(dot(0, QK) as f32, y),
                    Kind::Blk(Blk::Q6K) => {
                        // Two sub-blocks of 16, each `sc (u - 32)`: one exact integer.
                        let lay = blocks::layout(Blk::Q6K);
                        let t: i32 = (0..2)
                            .map(|h| {
                                let sc = blk[lay.sc + (2 * sub + h) * NR + l] as i8 as i32;
                                sc * (dot(16 * h, 16) - 32 * (16 * h..16 * h + 16).map(x).sum::<i32>())
                            })
                            .sum();
                        y = (d * dx).mul_add(t as f32, y);
                    }
                    _ => {
                        // Q4_K, Q5_K: `(d sc) u - dmin mn`; the panel keeps -dmin, and both
                        // products with a 6-bit integer are exact.
                        let Kind::Blk(f) = j.kind else { unreachable!() };
                        let lay = blocks::layout(f);
                        let (sc, mn) = (blk[lay.sc + sub * NR + l] as f32, blk[lay.sc + (per + sub) * NR + l] as f32);
                        y = ((d * sc) * dx).mul_add(dot(0, QK) as f32, y);
                        y = ((f16_at(blk, NR * 2 + 2 * l) * mn) * dx).mul_add(sx as f32, y);
                    }
                }
            }
            // SAFETY: lane `l < n` of the task's own columns.
            unsafe { *dst.add(l) = y };
        }
    }
}
