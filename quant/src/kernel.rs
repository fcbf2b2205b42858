//! The matrix kernel behind every linear layer: `y = x W^T`, `x` `(m, inp)`, `W` in
//! panels of 16 output rows (see [`crate::pack`]), `y` `(m, out)`.
//!
//! Batch invariance, by construction: every output element `y[i][n]` is ONE chain of
//! fused multiply-adds over k ascending, started from +0.0:
//! `acc = fma(x[i][k], w[n][k], acc)`, where `w[n][k]` is the stored weight widened
//! exactly to f32. A register tile computes several rows and panels at once, but each
//! of its lanes runs exactly that chain; the tile shape, the number of rows `m`, the
//! instruction set and the thread count only decide which chains run side by side,
//! never which operations a chain performs. Work is split over output panels, never over
//! k, so no reduction is ever cut in pieces.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use rayon::prelude::*;

use crate::blocks::Panels;
use crate::pack::{q4_block, Kind, Q8_BLOCK, QK};
use crate::simd::{lanes, Isa, Portable, NR};

/// One matrix product's operands (raw, so the threads can share them).
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
// (inside `matmul`), and each thread writes a disjoint set of output columns.
unsafe impl Send for Job {}
unsafe impl Sync for Job {}

/// Which implementation runs the tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// Plain Rust (`f32::mul_add`): the reference.
    Portable,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX-512 F/BW/VL (+ FMA, F16C).
    Avx512,
}

impl Path {
    /// Whether this CPU can run the path.
    pub fn available(self) -> bool {
        match self {
            Path::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => {
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Path::Avx512 => {
                Path::Avx2.available()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Every path this CPU can run, the reference first.
    pub fn all_available() -> Vec<Path> {
        [Path::Portable, Path::Avx2, Path::Avx512].into_iter().filter(|p| p.available()).collect()
    }

    /// The fastest path this CPU can run (checked once).
    pub fn best() -> Path {
        static BEST: std::sync::OnceLock<Path> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| {
            if Path::Avx512.available() {
                Path::Avx512
            } else if Path::Avx2.available() {
                Path::Avx2
            } else {
                Path::Portable
            }
        })
    }
}

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

/// Rows `r0 .. r0 + MR` of `x` against panels `p0 .. p0 + NP`. Each kind runs in a
/// function of its own with its own accumulators: one body for every kind (with the
/// block types' loops folded in eight times) left the accumulators in memory, and every
/// tile of two rows or more ran at half speed (docs/kernels.md).
#[inline(always)]
unsafe fn tile<I: Isa, const MR: usize, const NP: usize>(j: &Job, r0: usize, p0: usize) {
    let at = At { j, r0, p0 };
    match j.kind {
        Kind::Blk(f) => crate::blocks::per_type!(f, F => blk_tile::<I, MR, NP>(F, &at)),
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
unsafe fn blk_tile<I: Isa, const MR: usize, const NP: usize>(f: crate::ggml::Blk, at: &At) {
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

/// One instruction set's compiled pieces and tile shapes. Each tile shape (and each piece
/// of the staged path) is a function of its own, compiled with the set's features, into
/// which the generic kernels above are inlined; the loops that pick the pieces
/// ([`run`], `staged::run`) hold no vector code. Two reasons: an intrinsic is only inlined
/// into code compiled with its features (otherwise it is a call per operation: issue 36's
/// 20-50x slower small batches), and one function per tile keeps each of LLVM's units of
/// work small (one function holding every tile of a path took minutes to compile alone).
///
/// The shapes are set by the registers (docs/kernels.md, "Small batches"): AVX-512's 32
/// hold a 2-row x 4-panel tile of a block type (8 accumulators, each panel's scale, offset
/// and code words); AVX2's 16 (two a panel) hold 3 rows x 1 panel, and a fourth row or a
/// second panel at 2 rows spilled (2-4 row products 1.4-4x slower than 3 rows).
pub(crate) trait Tiles: Isa {
    /// Most rows in a tile.
    const MRX: usize;
    /// Panels in a tile of more than [`Tiles::MS`] rows.
    const NPX: usize;
    /// Panels in a tile of up to `MS` rows (decode): enough independent FMA chains in
    /// flight to hide the FMA latency (each chain is serial in k by contract).
    const NPS: usize;
    /// Rows up to which tiles take `NPS` panels.
    const MS: usize;
    /// [`tile`] of `MR` rows and `NP` panels.
    unsafe fn tile<const MR: usize, const NP: usize>(j: &Job, r0: usize, p0: usize);
    /// `staged::widen_chunk` of `NP` panels.
    unsafe fn widen_chunk<const NP: usize>(j: &Job, panels: Panels, c0: usize, c1: usize, w: *mut f32);
    /// `staged::tile` of `MR` rows and `NP` panels.
    unsafe fn staged_tile<const MR: usize, const NP: usize>(j: &Job, c: &crate::staged::Chunk, r0: usize, p0: usize);
}

/// [`Tiles`] for `$isa`, compiled with the target features `$feat` (none: portable).
macro_rules! tiles {
    ($isa:ty, [$($feat:literal)?], $mrx:literal, $npx:literal, $nps:literal, $ms:literal) => {
        impl Tiles for $isa {
            const MRX: usize = $mrx;
            const NPX: usize = $npx;
            const NPS: usize = $nps;
            const MS: usize = $ms;
            $(#[target_feature(enable = $feat)])?
            unsafe fn tile<const MR: usize, const NP: usize>(j: &Job, r0: usize, p0: usize) {
                tile::<$isa, MR, NP>(j, r0, p0)
            }
            $(#[target_feature(enable = $feat)])?
            unsafe fn widen_chunk<const NP: usize>(j: &Job, panels: Panels, c0: usize, c1: usize, w: *mut f32) {
                crate::staged::widen_chunk::<$isa, NP>(j, panels, c0, c1, w)
            }
            $(#[target_feature(enable = $feat)])?
            unsafe fn staged_tile<const MR: usize, const NP: usize>(
                j: &Job,
                c: &crate::staged::Chunk,
                r0: usize,
                p0: usize,
            ) {
                crate::staged::tile::<$isa, MR, NP>(j, c, r0, p0)
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
tiles!(crate::simd::Avx512, ["avx512f,avx512bw,avx512vl,avx2,fma,f16c"], 8, 2, 4, 2);
#[cfg(target_arch = "x86_64")]
tiles!(crate::simd::Avx2, ["avx2,fma,f16c"], 3, 1, 2, 1);
tiles!(Portable, [], 4, 1, 2, 2);

/// Every row of `x` against panels `pa .. pe`: tiles of up to `MRX` rows and `NPX`
/// panels (`NPS` for up to `MS` rows), each panel group kept hot while the rows stream
/// past it.
unsafe fn run<I: Tiles>(j: &Job, m: usize, pa: usize, pe: usize) {
    if crate::staged::wanted(j.kind, m, I::MRX) {
        return crate::staged::run::<I>(j, m, pa, pe);
    }
    let wide = if m <= I::MS { I::NPS } else { I::NPX };
    let mut p = pa;
    while p < pe {
        let np = match wide.min(pe - p) {
            3 => 2,
            n => n,
        };
        let mut r = 0;
        while r < m {
            let mr = I::MRX.min(m - r);
            macro_rules! rows {
                ($np:literal) => {
                    match mr {
                        1 => I::tile::<1, $np>(j, r, p),
                        2 => I::tile::<2, $np>(j, r, p),
                        3 if $np <= 2 => I::tile::<3, $np>(j, r, p),
                        4 if $np <= 2 => I::tile::<4, $np>(j, r, p),
                        5 if $np <= 2 && I::MRX >= 5 => I::tile::<5, $np>(j, r, p),
                        6 if $np <= 2 && I::MRX >= 6 => I::tile::<6, $np>(j, r, p),
                        7 if $np <= 2 && I::MRX >= 7 => I::tile::<7, $np>(j, r, p),
                        8 if $np <= 2 && I::MRX >= 8 => I::tile::<8, $np>(j, r, p),
                        _ => unreachable!("tile of {mr} rows x {} panels", $np),
                    }
                };
            }
            match np {
                4 if I::NPS >= 4 => rows!(4),
                2 if I::NPX >= 2 || I::NPS >= 2 => rows!(2),
                _ => rows!(1),
            }
            r += mr;
        }
        p += np;
    }
}

/// Run `j` for `m` rows on `path`, output panels split over the current rayon pool.
///
/// # Safety
///
/// `j`'s pointers are valid for `m` rows of `x` and `y` and every panel of `W`, and
/// `path` is available on this CPU.
pub(crate) unsafe fn matmul(j: Job, m: usize, path: Path) {
    let panels = j.out.div_ceil(NR);
    if m == 0 || panels == 0 {
        return;
    }
    let one = move |pa: usize, pe: usize| match path {
        #[cfg(target_arch = "x86_64")]
        Path::Avx512 => run::<crate::simd::Avx512>(&j, m, pa, pe),
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => run::<crate::simd::Avx2>(&j, m, pa, pe),
        _ => run::<Portable>(&j, m, pa, pe),
    };
    // Enough panels per thread to be worth a hand-off (a 16-column panel of a 576-wide
    // matrix is ~37 KB of f32).
    let nt = rayon::current_num_threads().min(panels.div_ceil(2)).max(1);
    if nt == 1 {
        return one(0, panels);
    }
    // The panels go out in chunks claimed from a counter, not one fixed range per
    // thread: a thread that starts late or runs on a slower (shared, preempted, or
    // efficiency) core takes fewer chunks instead of holding the step up. Threads get
    // disjoint panel ranges, so disjoint output columns, and which thread computes a
    // column changes none of its operations. Chunks are of at least 256 KiB and, when
    // over 4 panels, a multiple of 4 (the widest decode tile): at SmolLM2-135M's sizes
    // (a product is ~200 KiB) smaller chunks cost decode 10% (105 against 117 tok/s), so
    // there each thread claims about one range, as with a fixed split, but a late one's
    // is taken.
    let even = panels.div_ceil(nt);
    let per = panels.div_ceil(nt * chunks_per_thread()).max((256 << 10) / j.panel_bytes.max(1)).min(even);
    // per >= 1: panels >= 1 makes the div_ceil >= 1, and even >= 1.
    let per = if per > 4 { per.next_multiple_of(4) } else { per };
    let chunks = panels.div_ceil(per);
    let claimed = AtomicUsize::new(0);
    (0..nt).into_par_iter().for_each(|_| loop {
        let c = claimed.fetch_add(1, Ordering::Relaxed);
        if c >= chunks {
            break;
        }
        one(c * per, ((c + 1) * per).min(panels));
    });
}

/// Chunks per thread of one product: `TL_MATMUL_CHUNKS` (1 is the fixed split of one
/// range per thread), read once; default 4.
fn chunks_per_thread() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("TL_MATMUL_CHUNKS").ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0).unwrap_or(4)
    })
}
