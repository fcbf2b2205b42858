//! The int8-activation mode (docs/spec/numbers.md "q8 activations"): each activation row
//! quantized on its own in blocks of 32 ([`crate::int8_job::QRows`]), then integer dot
//! products with the weights' integer codes and the scales applied in a fixed order. Opt-in
//! ([`crate::Linear::with_activations`]); the exact f32 path stays the default.
//!
//! Kinds with an integer kernel (the `int8` column of format.rs's facts): Q8_0 and Q4_0 /
//! Q4_1 / int4 (their own panels, [`crate::pack`]) and Q5_0, Q5_1, Q4_K, Q5_K, Q6_K (the
//! generic panels, [`crate::blocks`]).
//! Per output `y[i][n]`, activation blocks `b` ascending, from +0.0:
//! - Q8_0 (`w = q d`), Q4_0 (`w = (c - 8) d`), Q5_0 (`w = (c - 16) d`): `y = fma(d * dx,
//!   I, y)` with `I` the exact integer `Σ q qx` (Q4_0: `Σ c qx - 8 Σ qx`, Q5_0: `Σ c qx -
//!   16 Σ qx`), as f32 (exact: `|I| < 2^24`);
//! - Q4_1, Q5_1 (`w = c d + m`): `y = fma(d * dx, Σ c qx, y)` then `y = fma(m * dx, Σ qx,
//!   y)`;
//! - Q4_K and Q5_K, per sub-block of 32: `y = fma((d sc) dx, Σ c qx, y)` then
//!   `y = fma((-dmin mn) dx, Σ qx, y)`;
//! - Q6_K (`w = d sc (u - 32)`, sub-blocks of 16): `y = fma(d * dx, T, y)` with `T = sc_a
//!   I_a + sc_b I_b` over the block's two sub-blocks, `I = Σ (u - 32) qx`; exact as an
//!   f32 too (`|T| <= 2 * 128 * 16 * 32 * 127 < 2^24`);
//!
//! where `dx` is the activation block's scale and `d * dx`, `m * dx` one f32 rounding each.
//! The integer sums are exact whatever order adds them, so every instruction set gives
//! the same bits: one kernel over the SIMD layer (`int8_kernel`), run on the portable
//! lanes, AVX2 (`vpmaddubsw` pair sums, or AVX-VNNI's `vpdpbusd`) and AVX-512 with VNNI
//! and VBMI ([`Path::vnni`]).
//! A row's result depends only on that row: batch, chunk and thread invariance hold as
//! on the exact path.

use crate::int8_job::{quantize_rows, IntJob};
use crate::int8_kernel::run;
use crate::pack::{Kind, QK};
use crate::simd::Portable;
#[cfg(target_arch = "x86_64")]
use crate::simd::{Avx2, Avx512};
use crate::Path;

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
    let r = quantize_rows(x, 1, x.len(), Kind::Q8, Path::Portable);
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
    kind.blk().is_some_and(|b| b.facts().int8)
}

/// `y` `(m, out)` for the quantized rows of `j` on `path`'s integer kernel: AVX-512 with
/// VNNI and VBMI, else AVX2 with AVX-VNNI, else AVX2 (also on AVX-512 CPUs without them),
/// else portable; all give the same bits.
pub(crate) fn matmul(j: &IntJob<'_>, m: usize, y: &mut [f32], path: Path) {
    // SAFETY: each kernel runs only where the CPU has its instructions (`available` for
    // the path, `vnni` for VNNI: the AVX-512 path includes AVX2).
    #[cfg(target_arch = "x86_64")]
    unsafe {
        match path {
            Path::Avx512 if path.vnni() => return run::<Avx512>(j, m, y),
            Path::Avx512 | Path::Avx2 if path.available() && Path::Avx2.vnni() => return run::<Avx2<true>>(j, m, y),
            Path::Avx512 | Path::Avx2 if path.available() => return run::<Avx2>(j, m, y),
            _ => {}
        }
    }
    // SAFETY: the portable lanes need no instruction set.
    unsafe { run::<Portable>(j, m, y) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Blk;
    use crate::int8_kernel::IntTiles;
    use crate::{f32_to_f16, Linear};

    /// `y`'s bits for `layer` and rows `x` on the integer kernel `I` (the caller checks
    /// the CPU has it).
    fn on<I: IntTiles>(layer: &Linear, x: &[f32], m: usize) -> Vec<u32> {
        let (kind, data) = layer.panels();
        let inp = layer.inp();
        let rows = quantize_rows(x, m, inp, kind, Path::Portable);
        let job = IntJob { kind, inp, out: layer.out(), data, panel_bytes: kind.panel_bytes(inp), rows: &rows };
        let mut y = vec![f32::NAN; m * layer.out()];
        // SAFETY: the caller's check.
        unsafe { run::<I>(&job, m, &mut y) };
        y.iter().map(|v| v.to_bits()).collect()
    }

    // `Path::all_available` reaches each path's best integer kernel only: on a CPU with
    // VNNI the AVX2 kernel without it, the one AVX2 and AVX-512 CPUs without VNNI run,
    // would go untested. So every kernel this CPU can run is checked against the portable
    // one here, on random blocks and on every code bit set against activations all +1 or
    // all -1 (the 16-bit pair sums at their bounds), for 1 to 5 rows (every pass height)
    // and 3 panels, the last partial (a pair and a single).
    #[test]
    fn every_integer_kernel_this_cpu_has_gives_the_portable_bits() {
        let (out, inp) = (40, 512);
        let mut seed = 7u64;
        let mut rnd = move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as f32 / (1u64 << 31) as f32 - 0.5
        };
        for blk in Blk::ALL.into_iter().filter(|b| b.facts().int8) {
            let facts = blk.facts();
            for fill in [None, Some(0xFFu8), Some(0x80)] {
                let n = out * inp / facts.k * facts.bytes;
                let mut bytes: Vec<u8> = (0..n).map(|_| fill.unwrap_or((rnd() * 512.0) as i32 as u8)).collect();
                for b in bytes.chunks_exact_mut(facts.bytes) {
                    for &at in facts.f16 {
                        b[at..at + 2].copy_from_slice(&f32_to_f16(rnd() * 0.1).to_le_bytes());
                    }
                }
                let layer = Linear::from_stored(facts.format, &bytes, out, inp).unwrap();
                for m in 1..=5 {
                    let random: Vec<f32> = (0..m * inp).map(|_| rnd()).collect();
                    for x in [random, vec![1.0; m * inp], vec![-1.0; m * inp]] {
                        let want = on::<Portable>(&layer, &x, m);
                        let what = format!("{} fill {fill:?}, {m} rows", facts.name);
                        #[cfg(target_arch = "x86_64")]
                        {
                            if Path::Avx2.available() {
                                assert_eq!(on::<Avx2<false>>(&layer, &x, m), want, "AVX2, {what}");
                            }
                            if Path::Avx2.vnni() {
                                assert_eq!(on::<Avx2<true>>(&layer, &x, m), want, "AVX-VNNI, {what}");
                            }
                            if Path::Avx512.vnni() {
                                assert_eq!(on::<Avx512>(&layer, &x, m), want, "AVX-512 VNNI, {what}");
                            }
                        }
                        let _ = what;
                    }
                }
            }
        }
    }
}
