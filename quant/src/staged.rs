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
//! path computes (the same [`crate::blocks::block_weights`] loop, the same `fma(code, d, m)`
//! and `q * d` of the Q4 and Q8 panels), a store and a load of an
//! f32 are exact, and each lane still runs `acc = fma(x[k], w[k], acc)` for k ascending
//! from +0.0, whichever chunk, tile or thread it falls in. So the results are the same
//! bits as the register path's, and as the f32 layer's.

use std::cell::Cell;

use crate::blocks;
use crate::kernel::Job;
use crate::pack::{self, q4_block, Kind, Line, Q8_BLOCK, QK};
use crate::simd::{Isa, NR};

/// Weights per chunk: 256 k (one K-quant super-block, 8 blocks of the 32-weight types), so
/// 2 panels of widened weights are 32 KiB.
const KC: usize = 256;

thread_local! {
    /// Each worker thread's scratch, grown to the largest step it has run and then reused
    /// (no allocation per call once warm).
    static SCRATCH: Cell<Vec<Line>> = const { Cell::new(Vec::new()) };
}

/// Whether a product of `m` rows of `kind` should take the staged path: quantized blocks
/// and more than one tile of rows (with one, nothing is unpacked twice).
pub(crate) fn wanted(kind: Kind, m: usize, mrx: usize) -> bool {
    m > mrx && block_k(kind).is_some()
}

/// Weights per block of a quantized kind (`None`: stored as floats, nothing to unpack).
fn block_k(kind: Kind) -> Option<usize> {
    match kind {
        Kind::Blk(f) => Some(f.k()),
        Kind::Q8 | Kind::Q4 { .. } => Some(QK),
        Kind::F32 | Kind::F16 | Kind::BF16 => None,
    }
}

/// Widen block `b` of `NP` panels of `kind` into f32 at `dst + p * stride`, `(k, 16)`
/// k-major, the values the register tile of [`crate::kernel`] multiplies by.
#[inline(always)]
unsafe fn widen<I: Isa, const NP: usize>(
    kind: Kind,
    panel: &impl Fn(usize) -> *const u8,
    b: usize,
    table: I::T,
    dst: *mut f32,
    stride: usize,
) {
    match kind {
        Kind::Blk(f) => blocks::per_type!(f, F => blocks::widen::<I, NP>(F, panel, b, table, dst, stride)),
        Kind::Q8 => {
            for p in 0..NP {
                let base = panel(p).add(b * Q8_BLOCK);
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
                let base = panel(p).add(b * q4_block(min));
                let d = I::ld_f16(base as *const u16);
                let m = if min { I::ld_f16(base.add(NR * 2) as *const u16) } else { I::mul(d, I::splat_v(-8.0)) };
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

/// Rows `0..m` of `x` against panels `pa .. pe` of a quantized kind ([`wanted`]), in tiles
/// of up to `MRX` rows and `NPX` panels.
#[inline(always)]
pub(crate) unsafe fn run<I: Isa, const MRX: usize, const NPX: usize>(j: &Job, m: usize, pa: usize, pe: usize) {
    let Some(k) = block_k(j.kind) else { unreachable!("staged run of a float panel") };
    // f32 lines: the widened chunk `(NPX, KC, 16)`, then the accumulators `(m, NPX, 16)`.
    let (wl, al) = (NPX * KC, m * NPX);
    let mut buf = SCRATCH.take();
    if buf.len() < (wl + al) * NR * 4 / 64 {
        buf = pack::alloc((wl + al) * NR * 4);
    }
    let w = buf.as_mut_ptr() as *mut f32;
    let acc = w.add(wl * NR);
    let table = blocks::table::<I>();
    let nb = j.inp / k;
    let cb = (KC / k).max(1); // blocks per chunk
    let mut p = pa;
    while p < pe {
        let np = NPX.min(pe - p);
        let panel = |q: usize| j.data.add((p + q) * j.panel_bytes);
        let mut c0 = 0;
        while c0 < nb {
            let c1 = (c0 + cb).min(nb);
            for b in c0..c1 {
                let dst = w.add((b - c0) * k * NR);
                match np {
                    2 => widen::<I, 2>(j.kind, &panel, b, table, dst, KC * NR),
                    _ => widen::<I, 1>(j.kind, &panel, b, table, dst, KC * NR),
                }
            }
            let c = Chunk { k0: c0 * k, kc: (c1 - c0) * k, first: c0 == 0, last: c1 == nb, w, acc, npx: NPX };
            let mut r = 0;
            while r < m {
                let mr = MRX.min(m - r);
                macro_rules! rows {
                    ($np:literal) => {
                        match mr {
                            1 => tile::<I, 1, $np>(j, &c, r, p),
                            2 => tile::<I, 2, $np>(j, &c, r, p),
                            3 => tile::<I, 3, $np>(j, &c, r, p),
                            4 => tile::<I, 4, $np>(j, &c, r, p),
                            5 if MRX >= 5 => tile::<I, 5, $np>(j, &c, r, p),
                            6 if MRX >= 6 => tile::<I, 6, $np>(j, &c, r, p),
                            7 if MRX >= 7 => tile::<I, 7, $np>(j, &c, r, p),
                            8 if MRX >= 8 => tile::<I, 8, $np>(j, &c, r, p),
                            _ => unreachable!("staged tile of {mr} rows"),
                        }
                    };
                }
                match np {
                    2 if NPX >= 2 => rows!(2),
                    _ => rows!(1),
                }
                r += mr;
            }
            c0 = c1;
        }
        p += np;
    }
    SCRATCH.set(buf);
}

/// One chunk of k: `kc` weights from `k0`, widened at `w` (`(NP, KC, 16)`); the rows'
/// accumulators at `acc` (`(m, npx, 16)`, row `r` at `r * npx * 16`).
struct Chunk {
    k0: usize,
    kc: usize,
    /// The chunk starts the chains (accumulators from +0.0).
    first: bool,
    /// The chunk ends them (results go to `y`).
    last: bool,
    w: *mut f32,
    acc: *mut f32,
    /// Panels per accumulator row.
    npx: usize,
}

/// Rows `r0 .. r0 + MR` against panels `p0 .. p0 + NP` over one chunk.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn tile<I: Isa, const MR: usize, const NP: usize>(j: &Job, c: &Chunk, r0: usize, p0: usize) {
    let inp = j.inp;
    // The accumulator scratch holds NPX panels a row whatever this tile's NP is.
    let slot = |r: usize, p: usize| c.acc.add(((r0 + r) * c.npx + p) * NR);
    let mut acc = [[I::zero(); NP]; MR];
    if !c.first {
        for r in 0..MR {
            for p in 0..NP {
                acc[r][p] = I::ld_f32(slot(r, p));
            }
        }
    }
    let x = j.x.add(r0 * inp + c.k0);
    for kk in 0..c.kc {
        let w: [I::V; NP] = std::array::from_fn(|p| I::ld_f32(c.w.add(p * KC * NR + kk * NR)));
        for r in 0..MR {
            let xb = I::splat(x.add(r * inp + kk));
            for p in 0..NP {
                acc[r][p] = I::fma(xb, w[p], acc[r][p]);
            }
        }
    }
    if !c.last {
        for r in 0..MR {
            for p in 0..NP {
                I::st(slot(r, p), acc[r][p]);
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
