//! What the int8-activation kernels read and write ([`crate::int8`] is the mode, its
//! dispatch and portable reference; `int8_avx2` and `int8_avx512` the kernels, which all
//! take their inputs from here): the rows quantized by numbers.md's rule in the order
//! each kind's panels give up their codes, the job (panels, rows, output columns), the
//! kinds with a kernel and the kernel paths.

use rayon::prelude::*;

use crate::blocks;
use crate::format::Blk;
use crate::pack::{q4_block, Kind, Q8_BLOCK, QK};
use crate::simd::NR;

/// Rows quantized by numbers.md's rule: `q` `(m, inp)` i8, and per block of 32 its scale
/// `d` and the sum of its codes `s`, `(m, inp / 32)` each; for Q6_K also the sum of each
/// half-block `s16` `(m, inp / 16)`. The codes are kept in the order the kind's panel
/// gives up its codes ([`Order`]), so the kernels broadcast 4 of them with one load;
/// [`QRows::at`] reads them in natural order.
pub(crate) struct QRows {
    pub q: Vec<i8>,
    pub d: Vec<f32>,
    pub s: Vec<i32>,
    pub s16: Vec<i32>,
    pub order: Order,
}

/// How a block's 32 codes are ordered in [`QRows::q`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    /// As the row holds them (Q8_0).
    Natural,
    /// The 4-bit panels' (Q4_0, Q4_1, Q4_K, Q5_K): each 8 values as `0 2 4 6 1 3 5 7`,
    /// the order the low nibbles, then the high ones, come out of a 32-bit lane.
    Nibbles,
    /// Q6_K's whole 6-bit words (three per 16 codes, five codes each plus two bits of the
    /// 16th, [`crate::blocks`]): each 16 values as [`SIX`], the four groups of four the
    /// kernels cut out of a lane's words 0, 1, 2 and their fifth codes.
    Six,
}

/// The natural index (within 16) of the value at each position of [`Order::Six`].
pub(crate) const SIX: [usize; 16] = [0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13, 4, 9, 14, 15];

/// [`SIX`] inverted: the position of natural index `k` (derived, so the two cannot part).
const SIX_AT: [usize; 16] = {
    let mut at = [0; 16];
    let mut i = 0;
    while i < 16 {
        at[SIX[i]] = i;
        i += 1;
    }
    at
};

impl Order {
    fn of(kind: Kind) -> Order {
        match kind {
            Kind::Q4 { .. } | Kind::Blk(Blk::Q4K | Blk::Q5K) => Order::Nibbles,
            Kind::Blk(Blk::Q6K) => Order::Six,
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

impl QRows {
    /// The code of value `k` of row `r` (`inp` values a row).
    pub(crate) fn at(&self, r: usize, inp: usize, k: usize) -> i8 {
        let i = match self.order {
            Order::Natural => k,
            Order::Nibbles => k / 8 * 8 + (k % 2) * 4 + (k % 8) / 2,
            Order::Six => k / 16 * 16 + SIX_AT[k % 16],
        };
        self.q[r * inp + i]
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
/// for the instruction set of `path` (the same bits on each). Rows are independent, so a
/// batch of them is split over the current rayon pool (the step's other threads would
/// otherwise wait for this serial part before every layer).
pub(crate) fn quantize_rows(x: &[f32], m: usize, inp: usize, kind: Kind, path: IntPath) -> QRows {
    let nb = inp / QK;
    let order = Order::of(kind);
    // s16 is only filled for Q6_K's order, but always there so every task gets its rows'.
    let mut r =
        QRows { q: vec![0; m * inp], d: vec![0.0; m * nb], s: vec![0; m * nb], s16: vec![0; 2 * m * nb], order };
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
        if path != IntPath::Portable {
            // SAFETY: both x86 integer paths require AVX2 (`IntPath::of`).
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

/// The kinds with an integer kernel, indexed by the x86 kernels' `K`: each gets a copy of
/// the loops with its kind a constant, so no branch on the kind runs per block.
pub(crate) const KINDS: [Kind; 6] = [
    Kind::Q8,
    Kind::Q4 { min: false },
    Kind::Q4 { min: true },
    Kind::Blk(Blk::Q4K),
    Kind::Blk(Blk::Q5K),
    Kind::Blk(Blk::Q6K),
];

/// `kind`'s index in [`KINDS`].
pub(crate) fn kind_index(kind: Kind) -> Option<usize> {
    KINDS.iter().position(|&k| k == kind)
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

/// Weights per panel block of an integer kind.
pub(crate) fn weights_per_block(kind: Kind) -> usize {
    match kind {
        Kind::Blk(f) => f.k(),
        _ => QK,
    }
}

/// Which integer kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IntPath {
    Portable,
    /// AVX2 + FMA + F16C ([`crate::int8_avx2`]).
    Avx2,
    /// AVX-512 F/BW with VNNI and VBMI.
    Avx512,
}

impl IntPath {
    /// The integer kernel for the float path `path` chose: AVX-512 where the CPU also has
    /// VNNI and VBMI, else AVX2 on the AVX2 and AVX-512 paths, else portable. All give
    /// the same bits.
    pub(crate) fn of(path: crate::Path) -> IntPath {
        #[cfg(target_arch = "x86_64")]
        {
            let vnni = is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vbmi");
            match path {
                crate::Path::Avx512 if vnni => return IntPath::Avx512,
                crate::Path::Avx512 | crate::Path::Avx2 => return IntPath::Avx2,
                crate::Path::Portable => {}
            }
        }
        let _ = path;
        IntPath::Portable
    }
}
