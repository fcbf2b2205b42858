//! Prefill over quantized blocks (GGUF Q4_0/Q4_1/Q8_0, int4 and the generic block types):
//! unpack once, multiply many times.
//!
//! Unpacking a K-quant code costs a few integer operations per 16 weights (shift, mask,
//! or, convert, the `fma(u, a, b)` of [`crate::blocks`]), as many as the multiply-adds a
//! row of `x` spends on them. A tile that unpacks in registers does that work again for
//! every tile of rows, so at 128 rows the unpacking is redone 16 times. Here a panel group
//! is widened one chunk of k at a time into a per-thread f32 scratch (the f32 panel
//! layout, `(kc, 16)` per panel, small enough to stay in L1), and every row tile of the
//! step runs its multiply-adds over that chunk from the scratch. The accumulators of the
//! rows are kept in a second scratch between chunks.
//!
//! The chains are those of [`crate::kernel`]: the widened value is the one the register
//! path computes (the same `blocks::block_weights` loop, the same `fma(code, d, m)`
//! and `q * d` of the Q4 and Q8 panels), a store and a load of an
//! f32 are exact, and each lane still runs `acc = fma(x[k], w[k], acc)` for k ascending
//! from +0.0, whichever chunk, tile or thread it falls in. So the results are the same
//! bits as the register path's, and as the f32 layer's.

use crate::blocks::{self, Panels};
use crate::format::per_type;
use crate::pack::{q4_block, Job, Kind, Q8_BLOCK, QK};
use crate::simd::{lanes, Isa, NR};

/// Weights per chunk: 256 k (one K-quant super-block, 8 blocks of the 32-weight types), so
/// 2 panels of widened weights are 32 KiB.
pub(crate) const KC: usize = 256;

/// Whether a product of `m` rows of `kind` should take the staged path: quantized blocks
/// and more than one tile of rows (with one, nothing is unpacked twice).
pub(crate) fn wanted(kind: Kind, m: usize, mrx: usize) -> bool {
    m > mrx && kind.block_k().is_some()
}

/// Widen block `b` of `NP` panels of `kind` into f32 at `dst + p * stride`, `(k, 16)`
/// k-major, the values the register tile of [`crate::kernel`] multiplies by.
#[inline(always)]
unsafe fn widen<I: Isa, const NP: usize>(
    kind: Kind,
    panels: Panels,
    b: usize,
    table: I::T,
    dst: *mut f32,
    stride: usize,
) {
    match kind {
        Kind::Blk(f) => per_type!(f, F => blocks::widen::<I, NP>(F, panels, b, table, dst, stride)),
        Kind::Q8 => {
            for p in 0..NP {
                let base = panels.at(p).add(b * Q8_BLOCK);
                let d = I::ld_f16(base as *const u16);
                for kk in 0..QK {
                    let q = base.add(NR * 2 + kk * NR) as *const i8;
                    I::st(dst.add(p * stride + kk * NR), I::mul(I::ld_i8(q), d));
                    // exact
                }
            }
        }
        Kind::Q4 { min } => {
            for p in 0..NP {
                let base = panels.at(p).add(b * q4_block(min));
                let d = I::ld_f16(base as *const u16);
                let m = if min { I::ld_f16(base.add(NR * 2) as *const u16) } else { I::mul(d, I::splat(-8.0)) };
                let q0 = base.add(NR * 2 * (1 + min as usize));
                for c in 0..QK / 8 {
                    let q = I::ld_u32(q0.add(c * NR * 4) as *const u32);
                    for jj in 0..8 {
                        let v = I::fma(I::nib(q, 4 * jj as u32), d, m);
                        I::st(dst.add(p * stride + (c * 8 + jj) * NR), v);
                    }
                }
            }
        }
        Kind::F32 | Kind::F16 | Kind::BF16 => unreachable!("staged run of a float panel"),
    }
}

/// Blocks `c0 .. c1` of `NP` panels widened into the chunk scratch at `w`
/// (`(NP, KC, 16)`).
#[inline(always)]
pub(crate) unsafe fn widen_chunk<I: Isa, const NP: usize>(j: &Job, panels: Panels, c0: usize, c1: usize, w: *mut f32) {
    let Some(k) = j.kind.block_k() else { unreachable!("staged run of a float panel") };
    // IQ4_NL's code book (the other kinds never read it).
    let table = if let Kind::Blk(f) = j.kind { blocks::table::<I>(f) } else { I::table(&[0.0; 16]) };
    for b in c0..c1 {
        widen::<I, NP>(j.kind, panels, b, table, w.add((b - c0) * k * NR), KC * NR);
    }
}

/// One chunk of k: `kc` weights from `k0`, widened at `w` (`(NP, KC, 16)`); the rows'
/// accumulators at `acc` (`(m, npx, 16)`, row `r` at `r * npx * 16`).
pub(crate) struct Chunk {
    /// The chunk's first k.
    pub k0: usize,
    /// Its length in k.
    pub kc: usize,
    /// The chunk starts the chains (accumulators from +0.0).
    pub first: bool,
    /// The chunk ends them (results go to `y`).
    pub last: bool,
    /// The widened weights.
    pub w: *mut f32,
    /// The rows' accumulators.
    pub acc: *mut f32,
    /// Panels per accumulator row.
    pub npx: usize,
}

impl Chunk {
    /// Row `r`'s accumulators of panel `p`.
    #[inline(always)]
    unsafe fn slot(&self, r: usize, p: usize) -> *mut f32 {
        self.acc.add((r * self.npx + p) * NR)
    }
}

/// Rows `r0 .. r0 + MR` against panels `p0 .. p0 + NP` over one chunk.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
pub(crate) unsafe fn tile<I: Isa, const MR: usize, const NP: usize>(j: &Job, c: &Chunk, r0: usize, p0: usize) {
    let inp = j.inp;
    // The accumulator scratch holds NPX panels a row whatever this tile's NP is.
    let mut acc = [[I::zero(); NP]; MR];
    if !c.first {
        for r in 0..MR {
            for p in 0..NP {
                acc[r][p] = I::ld(c.slot(r0 + r, p));
            }
        }
    }
    let x = j.x.add(r0 * inp + c.k0);
    for kk in 0..c.kc {
        let w: [I::V; NP] = lanes!(NP, |p| I::ld(c.w.add(p * KC * NR + kk * NR)));
        for r in 0..MR {
            let xb = I::splat_at(x.add(r * inp + kk));
            for p in 0..NP {
                acc[r][p] = I::fma(xb, w[p], acc[r][p]);
            }
        }
    }
    if !c.last {
        for r in 0..MR {
            for p in 0..NP {
                I::st(c.slot(r0 + r, p), acc[r][p]);
            }
        }
        return;
    }
    for (r, row) in acc.iter().enumerate() {
        for (p, v) in row.iter().enumerate() {
            let col = (p0 + p) * NR;
            let yp = j.y.add((r0 + r) * j.out + col);
            if col + NR <= j.out {
                I::st(yp, *v);
            } else {
                let mut tmp = [0.0f32; NR];
                I::st(tmp.as_mut_ptr(), *v);
                for (l, t) in tmp.iter().enumerate().take(j.out - col) {
                    *yp.add(l) = *t;
                }
            }
        }
    }
}
