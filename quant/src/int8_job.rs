//! What the int8-activation kernel reads and writes ([`crate::int8`] is the mode and its
//! dispatch, `int8_kernel` the kernel; both take their inputs from here and this file
//! imports neither): the rows quantized by numbers.md's rule in the order each kind's
//! panels give up their codes, the job (panels, rows, output columns), and the panel
//! blocks' sizes.

use rayon::prelude::*;

use crate::blocks;
use crate::pack::{q4_block, Kind, Q8_BLOCK, QK};
use crate::simd::NR;
use crate::Path;

/// Rows quantized by numbers.md's rule: `q` `(m, inp)` i8, and per block of 32 its scale
/// `d` and the sum of its codes `s`, `(m, inp / 32)` each; for Q6_K also the sum of each
/// half-block `s16` `(m, inp / 16)`. The codes are kept in the order the kind's panel
/// gives up its codes ([`Order`]), so the kernels broadcast 4 of them with one load.
pub(crate) struct QRows {
    pub q: Vec<i8>,
    pub d: Vec<f32>,
    pub s: Vec<i32>,
    pub s16: Vec<i32>,
}

/// How a block's 32 codes are ordered in [`QRows::q`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    /// As the row holds them (Q8_0).
    Natural,
    /// The 4-bit panels' (Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K): each 8 values as `0 2 4 6 1 3 5 7`,
    /// the order the low nibbles, then the high ones, come out of a 32-bit lane.
    Nibbles,
    /// Q6_K's whole 6-bit words (three per 16 codes, five codes each plus two bits of the
    /// 16th, [`crate::blocks`]): each 16 values as [`SIX`], the four groups of four the
    /// kernels cut out of a lane's words 0, 1, 2 and their fifth codes.
    Six,
}

/// The natural index (within 16) of the value at each position of [`Order::Six`].
pub(crate) const SIX: [usize; 16] = [0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13, 4, 9, 14, 15];

impl Order {
    /// The order of a kind with an integer kernel, by its bits per code: Q8_0's bytes, the
    /// 4-bit (Q5_0, Q5_1, Q5_K: 4 + 1) words' nibbles, Q6_K's whole 6-bit words.
    fn of(kind: Kind) -> Order {
        match kind.blk().map(|b| b.facts().bits) {
            Some(4 | 5) => Order::Nibbles,
            Some(6) => Order::Six,
            _ => Order::Natural,
        }
    }

    /// The natural index of the value at position `i` of a block.
    fn source(self, i: usize) -> usize {
        match self {
            Order::Natural => i,
            Order::Nibbles => {
                let (g, j) = (i / 8, i % 8);
                8 * g + if j < 4 { 2 * j } else { 2 * (j - 4) + 1 }
            }
            Order::Six => i / 16 * 16 + SIX[i % 16],
        }
    }
}

/// One block's scale and codes: `d = amax / 127`, `id = 1 / d` (0 when `d` is 0), `q =
/// clamp(rint(x * id), -127, 127)` with ties to even; the clamp as x86's `maxps`/`minps`
/// with the bound second, so a NaN product gives -127. Plain loops without closures, so
/// when [`quantize_rows`] inlines this into a function with SSE4.1 or better, `rint` is
/// one instruction rather than a libm call and the loops vectorize (the same IEEE
/// operations, so the same bits).
#[inline(always)]
pub(crate) fn quantize_block(x: &[f32], q: &mut [i8]) -> (f32, i32) {
    let mut amax = 0.0f32;
    for &v in x {
        let a = v.abs();
        amax = if a > amax { a } else { amax };
    }
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut s = 0i32;
    for (q, &v) in q.iter_mut().zip(x) {
        let r = (v * id).round_ties_even();
        let lo = if r > -127.0 { r } else { -127.0 };
        let c = if lo < 127.0 { lo } else { 127.0 };
        *q = c as i8;
        s += *q as i32;
    }
    (d, s)
}

/// Quantize `m` rows of `inp` (a multiple of 32) values, for panels of `kind`, compiled
/// with AVX2 on the x86 paths (the same bits on each). Rows are independent, so a
/// batch of them is split over the current rayon pool (the step's other threads would
/// otherwise wait for this serial part before every layer).
pub(crate) fn quantize_rows(x: &[f32], m: usize, inp: usize, kind: Kind, path: Path) -> QRows {
    let nb = inp / QK;
    let order = Order::of(kind);
    // s16 is only filled for Q6_K's order, but always there so every task gets its rows'.
    let mut r = QRows { q: vec![0; m * inp], d: vec![0.0; m * nb], s: vec![0; m * nb], s16: vec![0; 2 * m * nb] };
    if m == 0 || nb == 0 {
        return r;
    }
    // Rows per task: about 16k values, so a decode step's one row stays on this thread.
    let per = (16384 / inp.max(1)).max(1);
    let tasks = r.q.par_chunks_mut(per * inp).zip(r.d.par_chunks_mut(per * nb)).zip(r.s.par_chunks_mut(per * nb));
    let tasks = tasks.zip(r.s16.par_chunks_mut(per * 2 * nb)).zip(x.par_chunks(per * inp));
    tasks.for_each(|((((q, d), s), s16), x)| {
        let out = Out { q, d, s, s16 };
        #[cfg(target_arch = "x86_64")]
        if path != Path::Portable && path.available() {
            // SAFETY: both x86 paths have AVX2 (`Path::available`).
            return unsafe { quantize_avx2(x, out, order) };
        }
        quantize_with(x, out, order)
    });
    let _ = path;
    r
}

/// One task's share of [`QRows`]' buffers (whole rows).
struct Out<'a> {
    q: &'a mut [i8],
    d: &'a mut [f32],
    s: &'a mut [i32],
    s16: &'a mut [i32],
}

/// [`quantize_with`] with AVX2 (so SSE4.1's `roundps`) in reach of the compiler.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_avx2(x: &[f32], out: Out<'_>, order: Order) {
    quantize_with(x, out, order)
}

#[inline(always)]
fn quantize_with(x: &[f32], out: Out<'_>, order: Order) {
    let mut tmp = [0i8; QK];
    let mut perm = [0usize; QK];
    for (i, p) in perm.iter_mut().enumerate() {
        *p = order.source(i);
    }
    for (b, (xb, qb)) in x.chunks_exact(QK).zip(out.q.chunks_exact_mut(QK)).enumerate() {
        (out.d[b], out.s[b]) = quantize_block(xb, &mut tmp);
        for (q, &p) in qb.iter_mut().zip(&perm) {
            *q = tmp[p];
        }
        if order == Order::Six {
            for h in 0..2 {
                let mut sum = 0;
                for &q in &tmp[16 * h..16 * h + 16] {
                    sum += q as i32;
                }
                out.s16[2 * b + h] = sum;
            }
        }
    }
}

/// The panels of one layer and the rows against them.
pub(crate) struct IntJob<'a> {
    pub kind: Kind,
    pub inp: usize,
    pub out: usize,
    pub data: &'a [u8],
    pub panel_bytes: usize,
    pub rows: &'a QRows,
}

/// Where one task writes its panels' results: `y` `(m, out)`, the columns of panels
/// `c0 / 16 ..` (tasks own disjoint columns, so they share `y` without a copy).
#[derive(Clone, Copy)]
pub(crate) struct Cols {
    y: *mut f32,
    out: usize,
    c0: usize,
}

// SAFETY: each task writes only its own columns of `y` (`matmul`).
unsafe impl Send for Cols {}
unsafe impl Sync for Cols {}

impl Cols {
    /// All of `y` `(m, out)`, from column 0.
    pub(crate) fn new(y: &mut [f32], out: usize) -> Cols {
        Cols { y: y.as_mut_ptr(), out, c0: 0 }
    }

    /// The same `y`, a task's columns starting at `c0`. (A method: a closure naming
    /// `y.y` would capture the bare pointer, which is not `Sync`.)
    pub(crate) fn from(self, c0: usize) -> Cols {
        Cols { c0, ..self }
    }

    /// Row `r`'s first column of the task's panel `p`, and how many of the panel's 16
    /// columns exist (the last panel of a layer may be partial).
    #[inline(always)]
    pub(crate) fn at(self, r: usize, p: usize) -> (*mut f32, usize) {
        let col = self.c0 + p * NR;
        // SAFETY: in bounds of `y` for every column that exists.
        (unsafe { self.y.add(r * self.out + col) }, (self.out - col).min(NR))
    }
}

/// Bytes of one panel block of an integer kind.
pub(crate) fn block_bytes(kind: Kind) -> usize {
    match kind {
        Kind::Q8 => Q8_BLOCK,
        Kind::Q4 { min } => q4_block(min),
        Kind::Blk(f) => blocks::layout(f).bytes,
        _ => unreachable!("no integer kernel for {kind:?}"),
    }
}
