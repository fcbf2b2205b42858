//! The register tiles of the matrix kernel ([`crate::matmul`]): rows of `x` against
//! panels of 16 output rows (see [`crate::pack`]) with the weights widened in registers,
//! one tile function per panel kind. Each lane of a tile runs one FMA chain over k
//! ascending from +0.0, the crate's contract; the tile shape only decides which chains
//! run side by side.

use crate::blocks::Panels;
use crate::format::{per_type, Blk};
use crate::pack::{q4_block, Job, Kind, Q8_BLOCK, QK};
use crate::simd::{lanes, Isa, NR};

/// `acc[r][p] = fma(x[r][k], w[p], acc[r][p])` for every row and panel of the tile.
macro_rules! step {
    ($I:ty, $acc:ident, $x:ident, $inp:expr, $k:expr, $w:ident) => {
        for r in 0..MR {
            let xb = <$I>::splat_at($x.add(r * $inp + $k));
            for p in 0..NP {
                $acc[r][p] = <$I>::fma(xb, $w[p], $acc[r][p]);
            }
        }
    };
}

/// Where a tile reads: its rows of `x` and its panels, and the prefetch of the next panel
/// group's bytes.
struct At<'a> {
    j: &'a Job,
    r0: usize,
    p0: usize,
}

impl At<'_> {
    /// Row `r0` of `x`.
    #[inline(always)]
    unsafe fn x(&self) -> *const f32 {
        self.j.x.add(self.r0 * self.j.inp)
    }

    /// The start of panel `p0 + p`.
    #[inline(always)]
    unsafe fn panel(&self, p: usize) -> *const u8 {
        self.j.data.add((self.p0 + p) * self.j.panel_bytes)
    }

    /// The first row tile of a panel group streams the weights from memory: it asks for
    /// the next group's bytes at the same offset as it reads its own, so at decode (one
    /// row tile per group) the next panels are in cache when their turn comes.
    #[inline(always)]
    unsafe fn next<I: Isa, const NP: usize>(&self, p: usize, off: usize) {
        if self.r0 == 0 {
            I::prefetch(self.panel(p).wrapping_add(NP * self.j.panel_bytes + off))
        }
    }

    /// Write the tile's results to `y` (the last panel of a matrix may be partial).
    #[inline(always)]
    unsafe fn store<I: Isa, const MR: usize, const NP: usize>(&self, acc: &[[I::V; NP]; MR]) {
        for (r, row) in acc.iter().enumerate() {
            for (p, v) in row.iter().enumerate() {
                let col = (self.p0 + p) * NR;
                let yp = self.j.y.add((self.r0 + r) * self.j.out + col);
                if col + NR <= self.j.out {
                    I::st(yp, *v);
                } else {
                    let mut tmp = [0.0f32; NR];
                    I::st(tmp.as_mut_ptr(), *v);
                    for (l, t) in tmp.iter().enumerate().take(self.j.out - col) {
                        *yp.add(l) = *t;
                    }
                }
            }
        }
    }
}

/// Rows `r0 .. r0 + MR` of `x` against panels `p0 .. p0 + NP`, for a GGUF block kind
/// ([`Kind::Blk`]; the others: [`tile`]). Each kind runs in a function of its own with its
/// own accumulators: one body for every kind (with the block types' loops folded in eight
/// times) left the accumulators in memory, and every tile of two rows or more ran at half
/// speed (docs/kernels.md). The block kinds and the others are compiled as two functions
/// ([`crate::matmul::Tiles`]): with MXFP4's loop added, one function holding all of them
/// grew past LLVM's inlining budget and the f32 tiles' loads became calls.
#[inline(always)]
pub(crate) unsafe fn blk_kind_tile<I: Isa, const MR: usize, const NP: usize>(j: &Job, r0: usize, p0: usize) {
    let at = At { j, r0, p0 };
    if let Kind::Blk(f) = j.kind {
        per_type!(f, F => blk_tile::<I, MR, NP>(F, &at))
    }
}

/// Rows `r0 .. r0 + MR` of `x` against panels `p0 .. p0 + NP`, for the kinds with panels
/// of their own (float, Q8_0, Q4_0/Q4_1; the block types: [`blk_kind_tile`]).
#[inline(always)]
pub(crate) unsafe fn tile<I: Isa, const MR: usize, const NP: usize>(j: &Job, r0: usize, p0: usize) {
    let at = At { j, r0, p0 };
    match j.kind {
        Kind::Blk(_) => unreachable!("block kinds run blk_kind_tile"),
        Kind::F32 => f32_tile::<I, MR, NP>(&at),
        Kind::F16 => half_tile::<I, MR, NP, false>(&at),
        Kind::BF16 => half_tile::<I, MR, NP, true>(&at),
        Kind::Q8 => q8_tile::<I, MR, NP>(&at),
        Kind::Q4 { min: true } => q4_tile::<I, MR, NP, true>(&at),
        Kind::Q4 { min: false } => q4_tile::<I, MR, NP, false>(&at),
    }
}

/// A tile over GGUF blocks of type `f` (a constant at each call, see `per_type`).
#[inline(always)]
unsafe fn blk_tile<I: Isa, const MR: usize, const NP: usize>(f: Blk, at: &At) {
    let mut acc = [[I::zero(); NP]; MR];
    let panels = Panels { base: at.panel(0), bytes: at.j.panel_bytes };
    // The first row tile of a group streams the weights (`At::next`).
    crate::blocks::accumulate::<I, MR, NP>(f, at.x(), at.j.inp, panels, at.r0 == 0, &mut acc);
    at.store::<I, MR, NP>(&acc);
}

/// A tile over f32 panels.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn f32_tile<I: Isa, const MR: usize, const NP: usize>(at: &At) {
    let (x, inp) = (at.x(), at.j.inp);
    let mut acc = [[I::zero(); NP]; MR];
    let mut w = [I::zero(); NP];
    for k in 0..inp {
        for p in 0..NP {
            at.next::<I, NP>(p, k * NR * 4);
            w[p] = I::ld((at.panel(p) as *const f32).add(k * NR));
        }
        step!(I, acc, x, inp, k, w);
    }
    at.store::<I, MR, NP>(&acc);
}

/// A tile over 16-bit float panels (`BF`: bf16, else f16): two k per 64-byte line of a
/// panel, so one prefetch per two k.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn half_tile<I: Isa, const MR: usize, const NP: usize, const BF: bool>(at: &At) {
    let (x, inp) = (at.x(), at.j.inp);
    let mut acc = [[I::zero(); NP]; MR];
    let mut w = [I::zero(); NP];
    for k in 0..inp {
        for p in 0..NP {
            if k % 2 == 0 {
                at.next::<I, NP>(p, k * NR * 2);
            }
            let q = (at.panel(p) as *const u16).add(k * NR);
            w[p] = if BF { I::ld_bf16(q) } else { I::ld_f16(q) };
        }
        step!(I, acc, x, inp, k, w);
    }
    at.store::<I, MR, NP>(&acc);
}

/// A tile over Q8_0 panels.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn q8_tile<I: Isa, const MR: usize, const NP: usize>(at: &At) {
    let (x, inp) = (at.x(), at.j.inp);
    let mut acc = [[I::zero(); NP]; MR];
    let mut w = [I::zero(); NP];
    let mut d = [I::zero(); NP];
    for b in 0..inp / QK {
        for p in 0..NP {
            for l in 0..Q8_BLOCK.div_ceil(64) {
                at.next::<I, NP>(p, b * Q8_BLOCK + l * 64);
            }
            d[p] = I::ld_f16(at.panel(p).add(b * Q8_BLOCK) as *const u16);
        }
        for kk in 0..QK {
            for p in 0..NP {
                let q = at.panel(p).add(b * Q8_BLOCK + NR * 2 + kk * NR) as *const i8;
                w[p] = I::mul(I::ld_i8(q), d[p]); // exact: 8 bits times 11
            }
            step!(I, acc, x, inp, b * QK + kk, w);
        }
    }
    at.store::<I, MR, NP>(&acc);
}

/// A tile over Q4_0 (`MIN` false) or Q4_1 panels.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn q4_tile<I: Isa, const MR: usize, const NP: usize, const MIN: bool>(at: &At) {
    let min = MIN;
    let (x, inp) = (at.x(), at.j.inp);
    let mut acc = [[I::zero(); NP]; MR];
    let mut w = [I::zero(); NP];
    let (bb, qoff) = (q4_block(min), NR * 2 * (1 + min as usize));
    let (mut d, mut m) = ([I::zero(); NP], [I::zero(); NP]);
    for b in 0..inp / QK {
        for p in 0..NP {
            for l in 0..bb.div_ceil(64) {
                at.next::<I, NP>(p, b * bb + l * 64);
            }
            let base = at.panel(p).add(b * bb);
            d[p] = I::ld_f16(base as *const u16);
            m[p] = if min { I::ld_f16(base.add(NR * 2) as *const u16) } else { I::mul(d[p], I::splat(-8.0)) };
        }
        for c in 0..QK / 8 {
            let q: [I::U; NP] = lanes!(NP, |p| I::ld_u32(at.panel(p).add(b * bb + qoff + c * NR * 4) as *const u32));
            // code * d is exact (4 bits times 11), so fma(code, d, m) is the
            // dequantizers' `code * d + m` with its one rounding.
            for jj in 0..8 {
                for p in 0..NP {
                    w[p] = I::fma(I::nib(q[p], 4 * jj as u32), d[p], m[p]);
                }
                step!(I, acc, x, inp, b * QK + c * 8 + jj, w);
            }
        }
    }
    at.store::<I, MR, NP>(&acc);
}
