//! Panels for the GGUF block types without panels of their own (all but Q4_0, Q4_1 and
//! Q8_0): one layout shape for all, derived from each type's facts
//! ([`crate::format::Facts`]), the file's bytes rearranged (never widened), and the kernel
//! loop that reads it.
//!
//! A panel block (16 rows, one GGUF block of `k` = 32 or 256 weights each) holds, in order:
//! - `d (16,)` f16, as stored (MXFP4: its e8m0 exponent bytes, `(16,)` u8, widened to
//!   `2^(e - 128)` in the kernel as a product of two exact powers of two);
//! - `dm (16,)` f16 when the type has one: `m` ([`Value::Min`]) as stored, `dmin`
//!   ([`Value::SubMin`], the K types) with its sign flipped (exact), so the offset is a
//!   product, not a product and a negation;
//! - the sub-block scales, `(k / sub, 16)` bytes ([`Scales`]): a signed byte (Q3_K's
//!   `sc - 32`, Q6_K's `sc`), or Q2_K's `sc | mn << 4`, or Q4_K/Q5_K's `sc (8, 16)` then
//!   `mn (8, 16)` (16 bytes a row for the file's 12: +4 bytes per 256 weights);
//! - the low code bits: `(k * lb / 32, 16)` u32, lane `r` of word `c` holding the `lb`
//!   low bits of weights `c * 32 / lb ..` of row `r`, weight `j` of the word at bit `lb * j`
//!   (`lb` = bits - `hi_bits`: 2 for Q2_K/Q3_K, 6 for Q6_K (below), else 4);
//! - 6-bit codes (Q6_K) whole instead, three words a sub-block of 16 (`(k * 6 / 32, 16)`
//!   u32 in all, the file's bits and no more): word `3 s + t` holds codes `16 s + 5 t + i`,
//!   i < 5, at bits `6 i`, and in its top two bits, bits `2 t, 2 t + 1` of code `16 s + 15`.
//!   So 15 codes of 16 cost a constant shift and a mask, as a Q4_K code does (the split
//!   nibble + 2-bit layout cost a bit-select and a rotation more; whole codes measured
//!   +4% decode and +10% prefill at 1B, docs/kernels.md);
//! - the high code bits, `(k * hb / 32, 16)` u32 (`hb` = `hi_bits`: 1 for Q5_0/Q5_1/Q5_K/
//!   Q3_K, none otherwise), placed for the decode loop: low word `c` takes group
//!   `g = c % G` of high word `c / G` (`G = lb / hb` low words per high word), and weight `j`
//!   of low word `c` has its high bits at bits `(lb (j + 1) + g hb) mod 32` of that word.
//!   So after rotating the high word right by `g hb`, one bit-select (the low word's bits
//!   at weight `j`, the high word's elsewhere) and one rotation by `lb j` put the whole
//!   code at bit 0, with only garbage above it (see [`block_weights`]).
//!
//! Weight `k` of sub-block `s` is `fma(u, a, b)` with `u` the unsigned code (low | high <<
//! lb) and, per lane, `a`, `b` from the block's f16 and sub-block bytes by its [`Value`]:
//! `Centered(c)` `a = d` or `d * sc`, `b = -c a` (Q5_0, Q3_K, Q6_K); `Min` `a = d, b = m`
//! (Q5_1); `SubMin` `a = d * sc, b = (-dmin) * mn` (Q2_K, Q4_K, Q5_K); `Table` `T[u] * d`
//! (`a = d, b = 0`, the code looked up first: IQ4_NL). Every product here is exact in f32
//! (at most 11 + 8 significant bits), so `fma` gives numbers.md's value: the same one
//! rounding where the table has one (`(d sc) q - dmin mn`, `q d + m`) and the exact value
//! where it has none (`(q - 32) a` is representable, and `fma` rounds the exact
//! `q a - 32 a`).

use rayon::prelude::*;

use crate::format::{scale_value, unpack, value, Blk, Scale, Scales, Unpacked, Value};
use crate::simd::{lanes, Isa, NR};

/// Where the parts of a panel block sit (bytes from its start) and how codes split.
#[derive(Clone, Copy)]
pub(crate) struct Layout {
    /// Bytes of one panel block.
    pub bytes: usize,
    /// Whether `dm (16,)` follows `d`.
    pub dm: bool,
    /// Offset of the sub-block scale bytes.
    pub sc: usize,
    /// Offset of the low code words.
    pub lo: usize,
    /// Offset of the high code words.
    pub hi: usize,
    /// Low and high bits per code.
    pub lb: u32,
    pub hb: u32,
    /// Low code words per high word (`lb / hb`; 1 without high bits).
    pub groups: usize,
}

/// The layout of `f`'s panel blocks.
#[inline(always)]
pub(crate) const fn layout(f: Blk) -> Layout {
    let facts = f.facts();
    let dm = f.has_dm();
    let nsub = facts.k / facts.sub;
    let scale_bytes = match facts.scales {
        Scales::None => 0,
        Scales::I8 | Scales::Nibbles => nsub * NR,
        Scales::Pairs => 2 * nsub * NR,
    };
    let (lb, hb) = (facts.bits - facts.hi_bits, facts.hi_bits);
    // `dm` sits at `NR * 2` ([`coef`]): only f16-scaled types have one.
    assert!(!dm || matches!(facts.scale, Scale::F16));
    let d_bytes = match facts.scale {
        Scale::F16 => 2,
        Scale::E8M0 => 1,
    };
    let sc = NR * d_bytes + NR * 2 * dm as usize;
    let lo = sc + scale_bytes;
    let hi = lo + facts.k * lb as usize / 32 * NR * 4;
    let groups = match lb.checked_div(hb) {
        Some(g) => g as usize,
        None => 1,
    };
    Layout { bytes: hi + facts.k * hb as usize / 32 * NR * 4, dm, sc, lo, hi, lb, hb, groups }
}

/// Whether the type's offset is `-dmin * mn` (its `dm` is stored negated).
#[inline(always)]
const fn mins(f: Blk) -> bool {
    matches!(f.facts().value, Value::SubMin)
}

/// Whether the panel keeps `l`'s codes whole, five 6-bit codes a word (module comment).
#[inline(always)]
const fn whole6(l: Layout) -> bool {
    l.lb == 6
}

/// Repack `[out, inp]` rows of `f` blocks (`src`, the file's bytes) into panels: one pass,
/// panels in parallel (each is written by one thread; only the placement of bytes).
pub(crate) fn pack(f: Blk, src: &[u8], out: usize, inp: usize, dst: &mut [u8]) {
    let l = layout(f);
    let (nb, fb) = (inp / f.k(), f.facts().bytes);
    let pb = nb * l.bytes;
    if pb == 0 {
        return;
    }
    let (per_lo, nsub) = (32 / l.lb as usize, f.k() / f.sub());
    dst.par_chunks_mut(pb).enumerate().for_each(|(p, panel)| {
        let mut o = Unpacked::zero();
        for lane in 0..NR.min(out.saturating_sub(p * NR)) {
            let r = p * NR + lane;
            for b in 0..nb {
                unpack(f, &src[(r * nb + b) * fb..(r * nb + b + 1) * fb], &mut o);
                put_block(f, l, &o, &mut panel[b * l.bytes..(b + 1) * l.bytes], lane, per_lo, nsub);
            }
        }
    });
}

/// Write one row's unpacked block into lane `lane` of a panel block.
fn put_block(f: Blk, l: Layout, o: &Unpacked, dst: &mut [u8], lane: usize, per_lo: usize, nsub: usize) {
    let put16 = |dst: &mut [u8], at: usize, v: u16| dst[at..at + 2].copy_from_slice(&v.to_le_bytes());
    match f.facts().scale {
        Scale::F16 => put16(dst, lane * 2, o.d),
        Scale::E8M0 => dst[lane] = o.d as u8,
    }
    if l.dm {
        put16(dst, NR * 2 + lane * 2, if mins(f) { o.dm ^ 0x8000 } else { o.dm });
    }
    for s in 0..nsub {
        match f.facts().scales {
            Scales::Nibbles => dst[l.sc + s * NR + lane] = o.sc[s] as u8 | o.mn[s] << 4,
            Scales::Pairs => {
                dst[l.sc + s * NR + lane] = o.sc[s] as u8;
                dst[l.sc + (nsub + s) * NR + lane] = o.mn[s];
            }
            Scales::I8 => dst[l.sc + s * NR + lane] = o.sc[s] as u8,
            Scales::None => {}
        }
    }
    if whole6(l) {
        for s in 0..nsub {
            for t in 0..3 {
                let u = |i: usize| o.u[s * 16 + i] as u32;
                let word = (0..5).fold((u(15) >> (2 * t) & 3) << 30, |w, i| w | u(5 * t + i) << (6 * i));
                let at = l.lo + ((s * 3 + t) * NR + lane) * 4;
                dst[at..at + 4].copy_from_slice(&word.to_le_bytes());
            }
        }
        return;
    }
    let lmask = (1u32 << l.lb) - 1;
    for c in 0..f.k() / per_lo {
        let word = (0..per_lo).fold(0u32, |w, j| w | (o.u[c * per_lo + j] as u32 & lmask) << (l.lb as usize * j));
        let at = l.lo + (c * NR + lane) * 4;
        dst[at..at + 4].copy_from_slice(&word.to_le_bytes());
    }
    if l.hb > 0 {
        let groups = l.groups;
        for h in 0..f.k() / per_lo / groups {
            let mut word = 0u32;
            for c in h * groups..(h + 1) * groups {
                for j in 0..per_lo {
                    word |= (o.u[c * per_lo + j] as u32 >> l.lb).rotate_left(hi_at(l, c, j));
                }
            }
            let at = l.hi + (h * NR + lane) * 4;
            dst[at..at + 4].copy_from_slice(&word.to_le_bytes());
        }
    }
}

/// Where weight `j` of low word `c` keeps its high bits in its high word (the module
/// comment's `(lb (j + 1) + g hb) mod 32`).
fn hi_at(l: Layout, c: usize, j: usize) -> u32 {
    (l.lb * (j as u32 + 1) + (c % l.groups) as u32 * l.hb) % 32
}

/// Row `lane` of one panel (`panel`: its bytes), widened by numbers.md's table into `dst`.
pub(crate) fn widen_row(f: Blk, panel: &[u8], lane: usize, dst: &mut [f32]) {
    let (l, facts) = (layout(f), f.facts());
    let u16_at = |at: usize| u16::from_le_bytes([panel[at], panel[at + 1]]);
    let nsub = f.k() / f.sub();
    for (b, blk) in dst.chunks_exact_mut(f.k()).enumerate() {
        let base = b * l.bytes;
        let d = match facts.scale {
            Scale::F16 => scale_value(&facts, u16_at(base + lane * 2)),
            Scale::E8M0 => scale_value(&facts, panel[base + lane] as u16),
        };
        let dm = if l.dm { scale_value(&facts, u16_at(base + NR * 2 + lane * 2)) } else { 0.0 };
        let dm = if mins(f) { -dm } else { dm };
        for (k, v) in blk.iter_mut().enumerate() {
            let s = k / f.sub();
            let byte = || panel[base + l.sc + s * NR + lane];
            let (sc, mn) = match facts.scales {
                Scales::Nibbles => ((byte() & 15) as i8, byte() >> 4),
                Scales::Pairs => (byte() as i8, panel[base + l.sc + (nsub + s) * NR + lane]),
                Scales::I8 => (byte() as i8, 0),
                Scales::None => (0, 0),
            };
            *v = value(&facts, d, dm, sc, mn, code(l, &panel[base..base + l.bytes], lane, k) as u8);
        }
    }
}

/// The unsigned code (low | high << lb) of weight `k` of row `lane` in one panel block
/// (`blk`: its bytes), as the module comment places it: the scalar widening's reading,
/// which the vector kernels are checked against.
pub(crate) fn code(l: Layout, blk: &[u8], lane: usize, k: usize) -> u32 {
    let word = |at: usize| u32::from_le_bytes([blk[at], blk[at + 1], blk[at + 2], blk[at + 3]]);
    let per_lo = 32 / l.lb as usize;
    let lo_word = |c: usize| word(l.lo + (c * NR + lane) * 4);
    let lo = if whole6(l) {
        let (s, i) = (k / 16, k % 16);
        if i < 15 {
            lo_word(s * 3 + i / 5) >> (6 * (i % 5)) & 63
        } else {
            (0..3).fold(0, |u, t| u | (lo_word(s * 3 + t) >> 30) << (2 * t))
        }
    } else {
        (lo_word(k / per_lo) >> (l.lb as usize * (k % per_lo))) & ((1 << l.lb) - 1)
    };
    let hi = if l.hb > 0 {
        let (c, j) = (k / per_lo, k % per_lo);
        word(l.hi + (c / l.groups * NR + lane) * 4).rotate_right(hi_at(l, c, j)) & ((1 << l.hb) - 1)
    } else {
        0
    };
    lo | hi << l.lb
}

/// `(a, b)` of sub-block `s` for the 16 rows of the panel block at `blk`.
#[inline(always)]
unsafe fn coef<I: Isa>(f: Blk, l: Layout, blk: *const u8, s: usize) -> (I::V, I::V) {
    let facts = f.facts();
    let d = match facts.scale {
        Scale::F16 => I::ld_f16(blk as *const u16),
        Scale::E8M0 => e8m0::<I>(blk),
    };
    let dm = blk.add(NR * 2) as *const u16;
    let sc = blk.add(l.sc + s * NR);
    let nsub = facts.k / facts.sub;
    // The sub-block's scale times d, and its min as a float (Q2_K's nibbles, Q4_K's bytes).
    let (a, mn) = match facts.scales {
        Scales::None => (d, I::zero()),
        Scales::I8 => (I::mul(d, I::ld_i8(sc as *const i8)), I::zero()),
        Scales::Nibbles => {
            let byte = I::ld_u8(sc);
            (I::mul(d, I::cvt(I::and(byte, 15))), I::cvt(I::shr(byte, 4)))
        }
        Scales::Pairs => (I::mul(d, I::ld_i8(sc as *const i8)), I::ld_i8(blk.add(l.sc + (nsub + s) * NR) as *const i8)),
    };
    match facts.value {
        Value::Centered(c) => (a, I::mul(a, I::splat(-(c as f32)))),
        Value::Min => (a, I::ld_f16(dm)),
        Value::SubMin => (a, I::mul(I::ld_f16(dm), mn)),
        Value::Table(_) => (a, I::zero()),
    }
}

/// `2^(e - 128)` for the 16 e8m0 bytes at `p`: `2^(a - 64) * 2^(b - 64)` with
/// `a = floor(e / 2)`, `b = e - a`, both powers normal (`-64 ..= 64`, in [`Isa::pow2i`]'s
/// range) and their product exact (every `2^(e - 128)` is an f32, the smallest a
/// subnormal), so each path gives [`crate::format::e8m0_half`]'s bits.
#[inline(always)]
unsafe fn e8m0<I: Isa>(p: *const u8) -> I::V {
    let e = I::ld_u8(p);
    let a = I::cvt(I::shr(e, 1));
    let b = I::sub(I::cvt(e), a);
    let bias = I::splat(64.0);
    I::mul(I::pow2i(I::sub(a, bias)), I::pow2i(I::sub(b, bias)))
}

/// The panels a tile reads: panel `p` starts at `base + p * bytes`.
#[derive(Clone, Copy)]
pub(crate) struct Panels {
    /// The first panel.
    pub base: *const u8,
    /// Bytes per panel.
    pub bytes: usize,
}

impl Panels {
    /// The start of panel `p`.
    #[inline(always)]
    pub unsafe fn at(self, p: usize) -> *const u8 {
        self.base.add(p * self.bytes)
    }
}

/// Where [`block_weights`] hands each k's weights. A trait with `inline(always)` methods
/// rather than a closure: a closure cannot be marked `inline(always)`, and when LLVM
/// declined to inline one it was compiled as a function without the instruction set's
/// features, so every intrinsic in it became a call of its own (tiles of 2-4 rows ran
/// 20-50x slower than one row, issue 36). The guard is `tests/codegen.rs`.
pub(crate) trait Sink<I: Isa, const NP: usize> {
    /// `w[p]`: the 16 rows of panel `p` at k = block start + `kk`.
    unsafe fn put(&mut self, kk: usize, w: &[I::V; NP]);
}

/// The weights of GGUF block `b` of `NP` panels, k ascending: `sink.put(kk, w)` gets
/// `w[p]`, the 16 rows of panel `p` at k = `b * f.k() + kk`, each `fma(u, a, b)` as the
/// module comment says. Both kernels read the codes through this one loop: [`accumulate`]
/// multiplies the weights straight into its tile, [`widen`] writes them out as f32 for a
/// tile of many rows to reuse. Callers pass `f` as a constant (`per_type!`), so every
/// branch on it below is resolved at compile time.
///
/// A code costs: Q4_K/Q2_K/IQ4_NL a shift and a table lookup; Q6_K a shift, a mask and a
/// conversion (its 16th code a few more); the types with high bits a bit-select, a
/// rotation and a lookup; then the `fma`.
// Panel index `p` addresses several arrays at once.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn block_weights<I: Isa, const NP: usize>(
    f: Blk,
    panels: Panels,
    b: usize,
    table: I::T,
    sink: &mut impl Sink<I, NP>,
) {
    let l = layout(f);
    let (k, sub) = (f.k(), f.sub());
    let per_lo = 32 / l.lb as usize;
    let groups = l.groups;
    let blk: [*const u8; NP] = lanes!(NP, |p| panels.at(p).add(b * l.bytes));
    for s in 0..k / sub {
        let (mut a, mut c) = ([I::zero(); NP], [I::zero(); NP]);
        for p in 0..NP {
            (a[p], c[p]) = coef::<I>(f, l, blk[p], s);
        }
        if whole6(l) {
            // Three words of whole codes (module comment): five codes each, read by a
            // constant shift a step; after the fifth shift each word holds only its two
            // spare bits, which together are code 15.
            let w0 = l.lo + s * 3 * NR * 4;
            let (w1, w2) = (w0 + NR * 4, w0 + 2 * NR * 4);
            let mut q = [
                lanes!(NP, |p| I::ld_u32(blk[p].add(w0) as *const u32)),
                lanes!(NP, |p| I::ld_u32(blk[p].add(w1) as *const u32)),
                lanes!(NP, |p| I::ld_u32(blk[p].add(w2) as *const u32)),
            ];
            for t in 0..3 {
                for i in 0..5 {
                    let mut w = [I::zero(); NP];
                    for p in 0..NP {
                        w[p] = I::fma(I::code(q[t][p], 6), a[p], c[p]);
                        q[t][p] = I::shr(q[t][p], 6);
                    }
                    sink.put(s * 16 + t * 5 + i, &w);
                }
            }
            let mut w = [I::zero(); NP];
            for p in 0..NP {
                // Bits 0-1 from word 0, 2-3 from word 1, 4-5 from word 2; nothing above.
                let hi = I::sel(I::rotr(q[1][p], 30), I::rotr(q[2][p], 28), 0b1100);
                w[p] = I::fma(I::cvt(I::sel(q[0][p], hi, 0b11)), a[p], c[p]);
            }
            sink.put(s * 16 + 15, &w);
            continue;
        }
        for wi in 0..sub / per_lo {
            let cw = s * sub / per_lo + wi; // the low word's index in the block
            let lo: [I::U; NP] = lanes!(NP, |p| I::ld_u32(blk[p].add(l.lo + cw * NR * 4) as *const u32));
            let hi: [I::U; NP] = if l.hb > 0 {
                let (at, by) = (l.hi + cw / groups * NR * 4, (cw % groups) as u32 * l.hb);
                lanes!(NP, |p| I::rotr(I::ld_u32(blk[p].add(at) as *const u32), by))
            } else {
                lo
            };
            // Without high bits (Q4_K, Q2_K, IQ4_NL), code j is read from the low word
            // shifted right by lb bits j times, one constant shift a step: a shift by
            // `lb * j` is a variable count in this (not unrolled) loop, and LLVM built each
            // from a broadcast, a compare and a masked shift (Q4_K's decode ran at 0.57-0.64x
            // Q4_0's). With high bits the variable form stays: the constant-step form needs
            // a second rotation a code (of `hi`), and Q5_K/Q6_K decode measured 7-12%
            // slower with it (medians, docs/kernels.md).
            let mut lo = lo;
            for j in 0..per_lo {
                let sh = l.lb * j as u32;
                let mut w = [I::zero(); NP];
                for p in 0..NP {
                    let v = if matches!(f.facts().value, Value::Table(_)) {
                        I::lut(lo[p], table)
                    } else if l.hb == 0 {
                        I::code(lo[p], l.lb)
                    } else {
                        I::code(I::rotr(I::sel(lo[p], hi[p], ((1 << l.lb) - 1) << sh), sh), l.lb + l.hb)
                    };
                    w[p] = I::fma(v, a[p], c[p]);
                    if l.hb == 0 {
                        lo[p] = I::shr(lo[p], l.lb);
                    }
                }
                sink.put(cw * per_lo + j, &w);
            }
        }
    }
}

/// The 16-entry table [`block_weights`] needs: the code book of a [`Value::Table`] type
/// (IQ4_NL), zeros (unused) for the others.
#[inline(always)]
pub(crate) unsafe fn table<I: Isa>(f: Blk) -> I::T {
    let t = match f.facts().value {
        Value::Table(t) => *t,
        _ => [0; 16],
    };
    I::table(&t.map(|t| t as f32))
}

/// [`accumulate`]'s sink: each k's weights multiplied into the tile's accumulators, and the
/// next panel group's bytes asked for on the way.
struct Multiply<'a, I: Isa, const MR: usize, const NP: usize> {
    /// Rows of `x` (stride `inp`), at the current block's first k.
    x: *const f32,
    inp: usize,
    acc: &'a mut [[I::V; NP]; MR],
    /// The next panel group's copy of the current block (`None`: no prefetching).
    ahead: Option<*const u8>,
    panel_bytes: usize,
    /// Prefetch `per_word` lines every `step` k.
    step: usize,
    per_word: usize,
}

impl<I: Isa, const MR: usize, const NP: usize> Sink<I, NP> for Multiply<'_, I, MR, NP> {
    #[inline(always)]
    unsafe fn put(&mut self, kk: usize, w: &[I::V; NP]) {
        if let Some(ahead) = self.ahead {
            if kk.is_multiple_of(self.step) {
                for i in 0..self.per_word {
                    for p in 0..NP {
                        I::prefetch(
                            ahead.wrapping_add(p * self.panel_bytes + (kk / self.step * self.per_word + i) * 64),
                        );
                    }
                }
            }
        }
        for (r, row) in self.acc.iter_mut().enumerate() {
            let xb = I::splat_at(self.x.add(r * self.inp + kk));
            for (a, w) in row.iter_mut().zip(w) {
                *a = I::fma(xb, *w, *a);
            }
        }
    }
}

/// `acc[r][p] += x[r] . W[panel p]` over all of k, for a tile of `MR` rows of `x` (row
/// stride `inp`) and `NP` panels; with `prefetch`, the next `NP` panels' bytes are asked
/// for as these are read (the first row tile of a group streams the weights). Each lane
/// is one FMA chain over k ascending (the crate's contract).
#[inline(always)]
pub(crate) unsafe fn accumulate<I: Isa, const MR: usize, const NP: usize>(
    f: Blk,
    x: *const f32,
    inp: usize,
    panels: Panels,
    prefetch: bool,
    acc: &mut [[I::V; NP]; MR],
) {
    let l = layout(f);
    let table = table::<I>(f);
    // The next panels' lines are asked for spread over the block, a few at each low code
    // word: a burst of all of them (up to 53 lines x 4 panels) at the block's start filled
    // the line-fill buffers and stalled the loop (a quarter of Q6_K's decode samples).
    // Q6_K: a few at each sub-block (its words do not split the block's 256 weights evenly).
    let step = if whole6(l) { f.sub() } else { 32 / l.lb as usize };
    let per_word = l.bytes.div_ceil(64).div_ceil(f.k() / step);
    let mut sink = Multiply::<I, MR, NP> { x, inp, acc, ahead: None, panel_bytes: panels.bytes, step, per_word };
    for b in 0..inp / f.k() {
        sink.x = x.add(b * f.k());
        // wrapping: past the last group the address is never read (a prefetch never faults).
        sink.ahead = prefetch.then(|| panels.base.wrapping_add(NP * panels.bytes + b * l.bytes));
        block_weights::<I, NP>(f, panels, b, table, &mut sink);
    }
}

/// [`widen`]'s sink: panel `p`'s weights at `dst + p * stride`, k-major.
struct Store {
    dst: *mut f32,
    stride: usize,
}

impl<I: Isa, const NP: usize> Sink<I, NP> for Store {
    #[inline(always)]
    unsafe fn put(&mut self, kk: usize, w: &[I::V; NP]) {
        for (p, w) in w.iter().enumerate() {
            I::st(self.dst.add(p * self.stride + kk * NR), *w);
        }
    }
}

/// Widen GGUF block `b` of `NP` panels into f32: panel `p`'s `(f.k(), 16)` weights at
/// `dst + p * stride`, k-major (the layout of an f32 panel), the same values
/// [`accumulate`] multiplies by.
#[inline(always)]
pub(crate) unsafe fn widen<I: Isa, const NP: usize>(
    f: Blk,
    panels: Panels,
    b: usize,
    table: I::T,
    dst: *mut f32,
    stride: usize,
) {
    block_weights::<I, NP>(f, panels, b, table, &mut Store { dst, stride });
}
