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
//!
//! This file picks the pieces: the instruction set ([`Path`]), the tile shapes per set
//! ([`Tiles`]), the register tiles of [`crate::kernel`] or the staged path of
//! [`crate::staged`] for many rows, and the split of the panels over threads.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use rayon::prelude::*;

use crate::blocks::Panels;
use crate::pack::{self, Job, Line};
use crate::simd::{Isa, Portable, NR};
use crate::staged::{self, Chunk, KC};

static BEST: OnceLock<Path> = OnceLock::new();

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

    /// Whether this path's integer dot products (the int8-activation mode,
    /// [`crate::Activations::Q8`]) run on `vpdpbusd` on this CPU: AVX-512 VNNI on the
    /// AVX-512 path (with VBMI, whose byte shuffles the AVX-512 integer kernel also uses),
    /// AVX-VNNI on the AVX2 path. Without it the AVX-512 path's integer kernel is the AVX2
    /// path's, and the AVX2 one adds `vpmaddubsw` pairs; every one gives the same bits.
    pub fn vnni(self) -> bool {
        match self {
            Path::Portable => false,
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => Path::Avx2.available() && is_x86_feature_detected!("avxvnni"),
            #[cfg(target_arch = "x86_64")]
            Path::Avx512 => {
                Path::Avx512.available()
                    && is_x86_feature_detected!("avx512vnni")
                    && is_x86_feature_detected!("avx512vbmi")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Every path this CPU can run, the reference first.
    pub fn all_available() -> Vec<Path> {
        [Path::Portable, Path::Avx2, Path::Avx512].into_iter().filter(|p| p.available()).collect()
    }

    /// Make `self` the path every kernel of this process runs ([`Path::best`]'s answer
    /// from now on), so that one path's speed can be measured (`tl bench --path`). Every
    /// path gives the same bits. It must come before the first kernel runs; refused when
    /// this CPU cannot run it or another path is already in use.
    pub fn choose(self) -> Result<(), String> {
        if !self.available() {
            return Err(format!("this CPU cannot run the {self:?} path (it can: {:?})", Path::all_available()));
        }
        let _ = BEST.set(self);
        match Path::best() {
            p if p == self => Ok(()),
            p => Err(format!("the {p:?} path is already in use; choose the path before loading")),
        }
    }

    /// The fastest path this CPU can run (checked once), unless [`Path::choose`] chose one.
    pub fn best() -> Path {
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
/// One instruction set's compiled pieces and tile shapes. Each tile shape (and each piece
/// of the staged path) is a function of its own, compiled with the set's features, into
/// which the generic kernels of [`crate::kernel`] and [`crate::staged`] are inlined; the loops that pick the pieces
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
    /// A tile of `MR` rows and `NP` panels: [`Tiles::blk_tile`] or [`Tiles::own_tile`] by
    /// the kind (no vector code here: it only picks the compiled function).
    #[inline(always)]
    unsafe fn tile<const MR: usize, const NP: usize>(j: &Job, r0: usize, p0: usize) {
        match j.kind {
            pack::Kind::Blk(_) => Self::blk_tile::<MR, NP>(j, r0, p0),
            _ => Self::own_tile::<MR, NP>(j, r0, p0),
        }
    }
    /// [`crate::kernel::blk_kind_tile`] of `MR` rows and `NP` panels.
    unsafe fn blk_tile<const MR: usize, const NP: usize>(j: &Job, r0: usize, p0: usize);
    /// [`crate::kernel::tile`] of `MR` rows and `NP` panels.
    unsafe fn own_tile<const MR: usize, const NP: usize>(j: &Job, r0: usize, p0: usize);
    /// `staged::widen_chunk` of `NP` panels.
    unsafe fn widen_chunk<const NP: usize>(j: &Job, panels: Panels, c0: usize, c1: usize, w: *mut f32);
    /// `staged::tile` of `MR` rows and `NP` panels.
    unsafe fn staged_tile<const MR: usize, const NP: usize>(j: &Job, c: &staged::Chunk, r0: usize, p0: usize);
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
            unsafe fn blk_tile<const MR: usize, const NP: usize>(j: &Job, r0: usize, p0: usize) {
                crate::kernel::blk_kind_tile::<$isa, MR, NP>(j, r0, p0)
            }
            $(#[target_feature(enable = $feat)])?
            unsafe fn own_tile<const MR: usize, const NP: usize>(j: &Job, r0: usize, p0: usize) {
                crate::kernel::tile::<$isa, MR, NP>(j, r0, p0)
            }
            $(#[target_feature(enable = $feat)])?
            unsafe fn widen_chunk<const NP: usize>(j: &Job, panels: Panels, c0: usize, c1: usize, w: *mut f32) {
                staged::widen_chunk::<$isa, NP>(j, panels, c0, c1, w)
            }
            $(#[target_feature(enable = $feat)])?
            unsafe fn staged_tile<const MR: usize, const NP: usize>(
                j: &Job,
                c: &staged::Chunk,
                r0: usize,
                p0: usize,
            ) {
                staged::tile::<$isa, MR, NP>(j, c, r0, p0)
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
tiles!(crate::simd::Avx512, ["avx512f,avx512bw,avx512vl,avx2,fma,f16c"], 8, 2, 4, 2);
#[cfg(target_arch = "x86_64")]
tiles!(crate::simd::Avx2, ["avx2,fma,f16c"], 3, 1, 2, 1);
tiles!(Portable, [], 4, 1, 2, 2);

/// `$call` with `$R` a constant equal to `$mr`, the rows of a tile: 1 or 2, or 3 up to
/// `<$I>::MRX` (at most 8) where `$more` holds. Each count is a tile function of its own
/// (`Tiles`), so the count must be a constant at the call.
macro_rules! by_rows {
    ($I:ty, $mr:expr, $more:expr, $R:ident => $call:expr) => {
        match $mr {
            1 => {
                const $R: usize = 1;
                $call
            }
            2 => {
                const $R: usize = 2;
                $call
            }
            3 if $more && <$I>::MRX >= 3 => {
                const $R: usize = 3;
                $call
            }
            4 if $more && <$I>::MRX >= 4 => {
                const $R: usize = 4;
                $call
            }
            5 if $more && <$I>::MRX >= 5 => {
                const $R: usize = 5;
                $call
            }
            6 if $more && <$I>::MRX >= 6 => {
                const $R: usize = 6;
                $call
            }
            7 if $more && <$I>::MRX >= 7 => {
                const $R: usize = 7;
                $call
            }
            8 if $more && <$I>::MRX >= 8 => {
                const $R: usize = 8;
                $call
            }
            n => unreachable!("a tile of {n} rows"),
        }
    };
}

/// Every row of `x` against panels `pa .. pe`: tiles of up to `MRX` rows and `NPX`
/// panels (`NPS` for up to `MS` rows), each panel group kept hot while the rows stream
/// past it.
unsafe fn run<I: Tiles>(j: &Job, m: usize, pa: usize, pe: usize) {
    if staged::wanted(j.kind, m, I::MRX) {
        return staged_run::<I>(j, m, pa, pe);
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
            // Tiles of 3 rows or more exist up to 2 panels (the registers, `Tiles`).
            macro_rules! rows {
                ($np:literal) => {
                    by_rows!(I, mr, $np <= 2, R => I::tile::<R, $np>(j, r, p))
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

thread_local! {
    /// Each worker thread's scratch for the staged path, grown to the largest step it has
    /// run and then reused (no allocation per call once warm).
    static SCRATCH: Cell<Vec<Line>> = const { Cell::new(Vec::new()) };
}

/// Rows `0..m` of `x` against panels `pa .. pe` of a quantized kind (`staged::wanted`),
/// staged ([`crate::staged`]) in tiles of up to `I::MRX` rows and `I::NPX` panels.
unsafe fn staged_run<I: Tiles>(j: &Job, m: usize, pa: usize, pe: usize) {
    let Some(k) = j.kind.block_k() else { unreachable!("staged run of a float panel") };
    let npx = I::NPX;
    // f32 lines: the widened chunk `(NPX, KC, 16)`, then the accumulators `(m, NPX, 16)`.
    let (wl, al) = (npx * KC, m * npx);
    let mut buf = SCRATCH.take();
    if buf.len() < (wl + al) * NR * 4 / 64 {
        buf = pack::alloc((wl + al) * NR * 4);
    }
    let w = buf.as_mut_ptr() as *mut f32;
    let acc = w.add(wl * NR);
    let nb = j.inp / k;
    let cb = (KC / k).max(1); // blocks per chunk
    let mut p = pa;
    while p < pe {
        let np = npx.min(pe - p);
        let panels = Panels { base: j.data.add(p * j.panel_bytes), bytes: j.panel_bytes };
        let mut c0 = 0;
        while c0 < nb {
            let c1 = (c0 + cb).min(nb);
            match np {
                2 => I::widen_chunk::<2>(j, panels, c0, c1, w),
                _ => I::widen_chunk::<1>(j, panels, c0, c1, w),
            }
            let c = Chunk { k0: c0 * k, kc: (c1 - c0) * k, first: c0 == 0, last: c1 == nb, w, acc, npx };
            let mut r = 0;
            while r < m {
                let mr = I::MRX.min(m - r);
                macro_rules! rows {
                    ($np:literal) => {
                        by_rows!(I, mr, true, R => I::staged_tile::<R, $np>(j, &c, r, p))
                    };
                }
                match np {
                    2 if npx >= 2 => rows!(2),
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
