//! The int8-activation kernel ([`crate::int8`]'s formulas), written once against [`Isa`]:
//! `NP` panels of 16 lanes and up to `MR` activation rows per pass, so each weight code is
//! unpacked once for all of them. The dot products take 4 codes a lane ([`Isa::dot`]:
//! `vpdpbusd` with VNNI, `vpmaddubsw` pairs without): the 4-, 5- and 6-bit codes as they
//! are (Q4_0's `- 8` and Q6_K's `- 32` subtracted as `c Σ x`), Q8_0's signed codes by
//! [`Isa::dot_i8`] (its bias `I8_BIAS Σ x` subtracted per block). Every integer sum is
//! exact and the float steps are the formulas' in their order, so every instruction set
//! gives the same bits.
//!
//! Each block type gets its own copy of the loops (a const generic, `per_int_type!`), so
//! nothing branches on the kind per block (Q4_K +13%, Q6_K +17% when the raw-intrinsic
//! kernels did it), and each instruction set its own `#[target_feature]` functions
//! ([`IntTiles`]) into which everything here is inlined.

use rayon::prelude::*;

use crate::blocks::{self, Layout};
use crate::format::{per_int_type, Blk, Scales, Value};
use crate::int8_job::{block_bytes, Cols, IntJob};
use crate::pack::{Kind, QK};
use crate::simd::{dots_per_settle, Isa, Portable, NR};
#[cfg(target_arch = "x86_64")]
use crate::simd::{Avx2, Avx512};

/// One instruction set's integer kernel: its pass shape and its compiled entry.
pub(crate) trait IntTiles: Isa {
    /// Most rows per pass (1 to 4).
    const MR: usize;
    /// Panels per pass (1 or 2).
    const NP: usize;
    /// Every row against the `NP` panels at `panels` (their columns from `cols`' first),
    /// block type `Blk::ALL[B]`.
    unsafe fn panels<const B: usize, const NP: usize>(j: &IntJob<'_>, panels: [*const u8; NP], m: usize, cols: Cols);
}

/// [`IntTiles`] for `$isa`, compiled with the target features `$feat` (none: portable).
macro_rules! int_tiles {
    ($isa:ty, [$($feat:literal)?], $mr:literal, $np:literal) => {
        impl IntTiles for $isa {
            const MR: usize = $mr;
            const NP: usize = $np;
            $(#[target_feature(enable = $feat)])?
            unsafe fn panels<const B: usize, const NP: usize>(
                j: &IntJob<'_>,
                panels: [*const u8; NP],
                m: usize,
                cols: Cols,
            ) {
                by_rows::<$isa, B, NP>(j, panels, m, cols)
            }
        }
    };
}

// The registers set the shapes: AVX-512's 32 hold 4 rows x 2 panels of integer and float
// accumulators, AVX2's 16 (two a panel) 2 rows x 1 panel.
#[cfg(target_arch = "x86_64")]
int_tiles!(Avx512, ["avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c"], 4, 2);
#[cfg(target_arch = "x86_64")]
int_tiles!(Avx2<true>, ["avx2,fma,f16c,avxvnni"], 2, 1);
#[cfg(target_arch = "x86_64")]
int_tiles!(Avx2<false>, ["avx2,fma,f16c"], 2, 1);
int_tiles!(Portable, [], 2, 1);

/// `y` `(m, out)` for the quantized rows of `j` on `I`, pairs of panels split over the
/// current rayon pool (each pair's columns computed whole by one thread, in place).
///
/// # Safety
///
/// The CPU has `I`'s instructions (`Path::available`, and `Path::vnni` for VNNI).
pub(crate) unsafe fn run<I: IntTiles>(j: &IntJob<'_>, m: usize, y: &mut [f32]) {
    assert!(y.len() >= m * j.out);
    let Some(f) = j.kind.blk() else { unreachable!("no integer kernel for {:?}", j.kind) };
    per_int_type!(f, B => run_type::<I, B>(j, m, y))
}

/// [`run`] for block type `Blk::ALL[B]` (no vector code: it picks compiled functions).
unsafe fn run_type<I: IntTiles, const B: usize>(j: &IntJob<'_>, m: usize, y: &mut [f32]) {
    let panels = j.out.div_ceil(NR);
    let y = Cols::new(y, j.out);
    (0..panels.div_ceil(2)).into_par_iter().with_min_len(2).for_each(|q| {
        let at = |p: usize| j.data[p * j.panel_bytes..(p + 1) * j.panel_bytes].as_ptr();
        // SAFETY: the caller's CPU check; each task writes its own panels' columns of `y`,
        // which holds `m` rows.
        unsafe {
            if I::NP == 2 && 2 * q + 1 < panels {
                I::panels::<B, 2>(j, [at(2 * q), at(2 * q + 1)], m, y.from(2 * q * NR));
            } else {
                for p in 2 * q..panels.min(2 * q + 2) {
                    I::panels::<B, 1>(j, [at(p)], m, y.from(p * NR));
                }
            }
        }
    });
}

/// Every row, `I::MR` at a time.
#[inline(always)]
unsafe fn by_rows<I: IntTiles, const B: usize, const NP: usize>(
    j: &IntJob<'_>,
    panels: [*const u8; NP],
    m: usize,
    cols: Cols,
) {
    const { assert!(I::MR >= 1 && I::MR <= 4) };
    let mut r = 0;
    while r < m {
        let n = I::MR.min(m - r);
        match n {
            1 => rows::<I, 1, NP, B>(j, panels, r, cols),
            2 => rows::<I, 2, NP, B>(j, panels, r, cols),
            3 => rows::<I, 3, NP, B>(j, panels, r, cols),
            _ => rows::<I, 4, NP, B>(j, panels, r, cols),
        }
        r += n;
    }
}

// The pieces below are functions, never closures: a closure cannot be `inline(always)`,
// and one LLVM leaves out of line is compiled without the instruction set, each intrinsic
// in it a call (issue 36; tests/codegen.rs).

/// `$body` once for each `$i` of the list, written out: the short loops over a block's
/// words and groups must be unrolled, so the word index is a constant (an immediate
/// rotate, and no test for when to settle); LLVM kept the AVX2 Q5_K loop rolled, and
/// it ran 1.6x slower.
macro_rules! unroll {
    ($i:ident in [$($n:literal),*] => $body:block) => {
        $({
            let $i: usize = $n;
            $body
        })*
    };
}

/// Row `r`'s 4 codes at `x + at` (rows `inp` apart), in every lane.
#[inline(always)]
unsafe fn x4<I: Isa>(x: *const i8, r: usize, inp: usize, at: usize) -> I::U {
    I::splat_u((x.add(r * inp + at) as *const u32).read_unaligned())
}

/// Add `d`'s 16-bit pair sums into its 32-bit ones after every `per`-th of its dots
/// (`n`: the dots so far), so no pair sum overflows ([`dots_per_settle`]).
#[inline(always)]
unsafe fn settle_after<I: Isa>(d: I::D, n: usize, per: usize) -> I::D {
    if n.is_multiple_of(per) {
        I::settle(d)
    } else {
        d
    }
}

/// Q8_0: `dot[r][p] += Σ q x` over a block's 32 codes, the panels' `q (32, 16)` i8 at `q`
/// (4 codes a lane by one transposing load), each row's 32 codes at `x` (rows `inp`
/// apart), plus `I8_BIAS Σ x`.
#[inline(always)]
unsafe fn q8<I: Isa, const R: usize, const NP: usize>(
    q: [*const u8; NP],
    x: *const i8,
    inp: usize,
    dot: &mut [[I::D; NP]; R],
) {
    // One dot per settle, so no test: this loop may stay rolled (it is short, and
    // unrolled it ran out of AVX2 registers).
    let per = dots_per_settle(128); // |q| of a -128
    for g in 0..QK / 4 {
        let mut u = [I::splat_u(0); NP];
        for (u, q) in u.iter_mut().zip(q) {
            *u = I::ld_t4(q.add(g * 4 * NR));
        }
        for (r, dot) in dot.iter_mut().enumerate() {
            let xr = x4::<I>(x, r, inp, 4 * g);
            for (d, u) in dot.iter_mut().zip(u) {
                *d = settle_after::<I>(I::dot_i8(*d, u, xr), g + 1, per);
            }
        }
    }
}

/// `dot[r][p] += Σ c x` over 32 codes: the 4-bit (`hi`: 5-bit) codes of 4 low words from
/// each panel's `q` (8 a lane each) against 32 codes of each row (`x`, rows `inp` apart)
/// in QRows' nibble order (bytes 0..4 of a lane hold codes 8c + 0, 2, 4, 6, the low
/// nibbles, then 8c + 1, 3, 5, 7, the high ones). With `hi` (Q5_0, Q5_1, Q5_K), the fifth bits come
/// from one high word per panel: low word `c`'s are that word rotated right by `c`, weight
/// `j`'s at bit `4 (j + 1)` (blocks.rs), so bit 4 of byte `i` holds even weight `2 i`'s
/// and, rotated 4 more, odd weight `2 i + 1`'s.
#[inline(always)]
unsafe fn nibbles<I: Isa, const R: usize, const NP: usize>(
    q: [*const u8; NP],
    hi: Option<[*const u8; NP]>,
    x: *const i8,
    inp: usize,
    dot: &mut [[I::D; NP]; R],
) {
    let per = dots_per_settle(if hi.is_some() { 31 } else { 15 });
    const { assert!(QK / 8 == 4) };
    unroll!(c in [0, 1, 2, 3] => {
        let mut lo = [I::splat_u(0); NP];
        let mut up = [I::splat_u(0); NP];
        for p in 0..NP {
            let word = I::ld_u32(q[p].add(c * NR * 4) as *const u32);
            lo[p] = I::and(word, 0x0F0F_0F0F);
            up[p] = I::and(I::shr(word, 4), 0x0F0F_0F0F);
            if let Some(h) = hi {
                let hw = I::ld_u32(h[p] as *const u32);
                lo[p] = I::or(lo[p], I::and(I::rotr(hw, c as u32), 0x1010_1010));
                up[p] = I::or(up[p], I::and(I::rotr(hw, c as u32 + 4), 0x1010_1010));
            }
        }
        for (r, dot) in dot.iter_mut().enumerate() {
            let (xl, xh) = (x4::<I>(x, r, inp, 8 * c), x4::<I>(x, r, inp, 8 * c + 4));
            for p in 0..NP {
                let d = settle_after::<I>(I::dot(dot[p], lo[p], xl), 2 * c + 1, per);
                dot[p] = settle_after::<I>(I::dot(d, up[p], xh), 2 * c + 2, per);
            }
        }
    });
}

/// Q6_K: the 16 codes of one sub-block of the 16 lanes at `q` (a lane's three words:
/// codes 0..5, 5..10, 10..15 at bits `6 i`, code 15's bits in their top two bits), as four
/// vectors of 4 codes a lane in [`crate::int8_job::SIX`]'s order: codes 0..4, 5..9,
/// 10..14 (each word's first four), then 4, 9, 14, 15.
#[inline(always)]
unsafe fn six<I: Isa>(q: *const u8) -> [I::U; 4] {
    let mut w = [I::splat_u(0); 3];
    let mut first4 = [I::splat_u(0); 3];
    for t in 0..3 {
        w[t] = I::ld_u32(q.add(t * NR * 4) as *const u32);
        first4[t] = I::fields(w[t], [0, 6, 12, 18], 0x3F3F_3F3F);
    }
    // Word t's fifth code (bits 24..30) to byte t, its top two bits to bits 2t, 2t + 1 of
    // byte 3.
    let m0 = I::fields(w[0], [24, 0, 0, 30], 0x0300_003F);
    let m1 = I::fields(w[1], [0, 24, 0, 28], 0x0C00_3F00);
    let m2 = I::fields(w[2], [0, 0, 24, 26], 0x303F_0000);
    [first4[0], first4[1], first4[2], I::or(I::or(m0, m1), m2)]
}

/// Q6_K: `T[r][p] = sc_a I_a + sc_b I_b` (as f32, exact) for sub-blocks `2 sub`, `2 sub +
/// 1` of the panel blocks `blk`, each row's codes of this activation block at `x` (rows
/// `inp` apart) and its two half-block code sums at `halves` (rows `inp / 16` apart).
#[allow(clippy::needless_range_loop)] // rows and panels index the accumulators
#[inline(always)]
unsafe fn q6k<I: Isa, const R: usize, const NP: usize>(
    inp: usize,
    lay: Layout,
    blk: [*const u8; NP],
    x: *const i8,
    halves: *const i32,
    sub: usize,
) -> [[I::V; NP]; R] {
    let per = dots_per_settle(63);
    let mut tsum = [[I::zero(); NP]; R];
    for h in 0..2 {
        let s = 2 * sub + h;
        let mut dot = [[I::dzero(); NP]; R];
        let mut codes = [[I::splat_u(0); 4]; NP];
        for p in 0..NP {
            codes[p] = six::<I>(blk[p].add(lay.lo + s * 3 * NR * 4));
        }
        for r in 0..R {
            unroll!(g in [0, 1, 2, 3] => {
                // One broadcast of the row's 4 codes serves every panel.
                let xr = x4::<I>(x, r, inp, 16 * h + 4 * g);
                for p in 0..NP {
                    dot[r][p] = settle_after::<I>(I::dot(dot[r][p], codes[p][g], xr), g + 1, per);
                }
            });
        }
        for p in 0..NP {
            let sc = I::ld_i8(blk[p].add(lay.sc + s * NR) as *const i8);
            for r in 0..R {
                let corr = 32 * *halves.add(r * inp / 16 + h);
                tsum[r][p] = I::fma(sc, I::dcvt(dot[r][p], corr), tsum[r][p]);
            }
        }
    }
    tsum
}

/// Rows `r0 .. r0 + R` against the panels at `panels`, block type `Blk::ALL[B]`: the
/// module's formulas, one activation block (32 values) at a time.
#[allow(clippy::needless_range_loop)] // rows and panels index the accumulators
#[inline(always)]
unsafe fn rows<I: Isa, const R: usize, const NP: usize, const B: usize>(
    j: &IntJob<'_>,
    panels: [*const u8; NP],
    r0: usize,
    cols: Cols,
) {
    let f = Blk::ALL[B];
    let kind = Kind::of_blk(f);
    // Q8_0, Q4_0 and Q4_1 have panels of their own, without a `Layout`.
    let lay = blocks::layout(if let Kind::Blk(f) = kind { f } else { Blk::Q4K });
    let nb = j.inp / QK;
    let (bb, per) = (block_bytes(kind), f.k() / QK); // activation blocks per weight block
    let mut acc = [[I::zero(); NP]; R];
    for ab in 0..nb {
        let (b, sub) = (ab / per, ab % per);
        let blk = panels.map(|p| p.add(b * bb));
        // Row r0's codes of this activation block (in the kind's order); row r's are
        // `r * inp` further.
        let x0 = j.rows.q.as_ptr().add(r0 * j.inp + ab * QK);
        if f == Blk::Q6K {
            let tsum = q6k::<I, R, NP>(j.inp, lay, blk, x0, j.rows.s16.as_ptr().add(2 * (r0 * nb + ab)), sub);
            for p in 0..NP {
                let d = I::ld_f16(blk[p] as *const u16);
                for r in 0..R {
                    let dx = I::splat(j.rows.d[(r0 + r) * nb + ab]);
                    acc[r][p] = I::fma(I::mul(d, dx), tsum[r][p], acc[r][p]);
                }
            }
            continue;
        }
        let mut dot = [[I::dzero(); NP]; R];
        match kind {
            Kind::Q8 => q8::<I, R, NP>(blk.map(|b| b.add(NR * 2)), x0, j.inp, &mut dot),
            Kind::Q4 { min } => {
                nibbles::<I, R, NP>(blk.map(|b| b.add(NR * 2 * (1 + min as usize))), None, x0, j.inp, &mut dot)
            }
            // Q4_K, Q5_K: sub-block `sub`'s 32 codes are low words 4 sub .. 4 sub + 4
            // (and, Q5_K, high word `sub`); Q5_0, Q5_1: the block's 4 low words and its
            // high word (sub 0).
            _ => {
                let hi = (lay.hb > 0).then(|| blk.map(|b| b.add(lay.hi + sub * NR * 4)));
                nibbles::<I, R, NP>(blk.map(|b| b.add(lay.lo + sub * 4 * NR * 4)), hi, x0, j.inp, &mut dot)
            }
        }
        // What multiplies each row's scale: d (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), d * sc (Q4_K,
        // Q5_K), and the offset's factor: m (Q4_1, Q5_1), -dmin * mn (Q4_K, Q5_K; the panel
        // keeps -dmin).
        let facts = f.facts();
        let sub_scales = facts.scales == Scales::Pairs;
        let mut a = [I::zero(); NP];
        let mut off = [I::zero(); NP];
        for p in 0..NP {
            let d = I::ld_f16(blk[p] as *const u16);
            let dm = blk[p].add(NR * 2) as *const u16; // Q4_1, Q5_1, Q4_K, Q5_K
            (a[p], off[p]) = match facts.value {
                Value::SubMin if sub_scales => (
                    I::mul(d, I::cvt(I::ld_u8(blk[p].add(lay.sc + sub * NR)))),
                    I::mul(I::ld_f16(dm), I::cvt(I::ld_u8(blk[p].add(lay.sc + (per + sub) * NR)))),
                ),
                Value::Min => (d, I::ld_f16(dm)),
                _ => (d, I::zero()),
            };
        }
        let has_off = f.has_dm();
        for r in 0..R {
            let (dx, sx) = (j.rows.d[(r0 + r) * nb + ab], j.rows.s[(r0 + r) * nb + ab]);
            let (dxv, sxv) = (I::splat(dx), I::splat(sx as f32));
            // The centre of a centred code (Q4_0's 8, Q5_0's 16) comes off as `c Σ x`;
            // Q8_0's signed codes are read with a bias instead.
            let corr = match (kind, facts.value) {
                (Kind::Q8, _) => I::I8_BIAS * sx,
                (_, Value::Centered(c)) => c as i32 * sx,
                _ => 0,
            };
            for p in 0..NP {
                acc[r][p] = I::fma(I::mul(a[p], dxv), I::dcvt(dot[r][p], corr), acc[r][p]);
                if has_off {
                    acc[r][p] = I::fma(I::mul(off[p], dxv), sxv, acc[r][p]);
                }
            }
        }
    }
    // A partial panel goes through a buffer aligned to a cache line. Its alignment also
    // makes LLVM realign the stack before it allocates registers, so the spills of the
    // AVX2 passes (2 rows' codes and sums overflow its 16 registers) are aligned: without
    // it they were unaligned, split cache lines, and the AVX2 kernel ran 1.6x slower.
    let mut tmp = Line([0.0; NR]);
    for r in 0..R {
        for p in 0..NP {
            let (dst, n) = cols.at(r0 + r, p);
            if n == NR {
                I::st(dst, acc[r][p]);
            } else {
                I::st(tmp.0.as_mut_ptr(), acc[r][p]);
                std::ptr::copy_nonoverlapping(tmp.0.as_ptr(), dst, n);
            }
        }
    }
}

/// 16 f32 on a cache line of their own.
#[repr(align(64))]
struct Line([f32; NR]);
