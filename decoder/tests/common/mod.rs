//! What the kernel tests share: deterministic inputs, the SIMD paths of this CPU, and one
//! attention case (f16 or q8 blocks) with the documented arithmetic as its reference.
#![allow(dead_code)] // each test binary uses its own subset

use tl_core::{quantize_q8, Q8Slab};
use tl_decoder::kernels::{attend_one, attend_span, attend_span_sinks, exp16, Path, Span};
use tl_quant::{f16_to_f32, f32_to_f16};

/// xorshift64*: deterministic inputs without a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [-a, a).
    pub fn f32(&mut self, a: f32) -> f32 {
        ((self.u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * a
    }
    pub fn vec(&mut self, n: usize, a: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32(a)).collect()
    }
}

pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

pub fn simd_paths() -> Vec<Path> {
    let paths: Vec<Path> = Path::all_available().into_iter().filter(|&p| p != Path::Portable).collect();
    eprintln!("SIMD paths on this CPU: {paths:?}");
    paths
}

/// One case: `group` query heads of `d` over `n` keys in blocks of `b` positions.
pub struct Case {
    pub q: Vec<f32>,
    pub k: Vec<Vec<u16>>, // blocks of (b, d) f16
    pub v: Vec<Vec<u16>>,
    pub b: usize,
    pub n: usize,
    pub d: usize,
    /// K and V quantized per row (`quantize_q8`): per block, (codes, scales). When set,
    /// `row` reads these (the reference then works on the dequantized values).
    pub q8: Option<[Vec<Q8Block>; 2]>,
}

/// One block's q8 slab: (codes, scales).
pub type Q8Block = (Vec<i8>, Vec<u16>);

impl Case {
    pub fn new(rng: &mut Rng, group: usize, n: usize, d: usize, b: usize) -> Case {
        let blocks = n.div_ceil(b);
        // Garbage past position n in the last block must never be read.
        let mut slab = |scale: f32| -> Vec<Vec<u16>> {
            (0..blocks).map(|_| (0..b * d).map(|_| f32_to_f16(rng.f32(scale))).collect()).collect()
        };
        let (k, v) = (slab(3.0), slab(2.0));
        Case { q: rng.vec(group * d, 1.5), k, v, b, n, d, q8: None }
    }

    /// This case with K and V (the f16 values, widened) quantized to q8 rows.
    pub fn quantized(mut self) -> Case {
        let d = self.d;
        let q8 = |slabs: &[Vec<u16>]| -> Vec<Q8Block> {
            slabs
                .iter()
                .map(|s| {
                    let mut codes = vec![0i8; s.len()];
                    let scales = s
                        .chunks_exact(d)
                        .zip(codes.chunks_exact_mut(d))
                        .map(|(r, c)| quantize_q8(&r.iter().map(|&h| f16_to_f32(h)).collect::<Vec<_>>(), c))
                        .collect();
                    (codes, scales)
                })
                .collect()
        };
        self.q8 = Some([q8(&self.k), q8(&self.v)]);
        self
    }

    /// The q8 kernel over keys `lo .. n` with score scale `scale`.
    pub fn run_q8(&self, path: Path, lo: usize, scale: f32) -> Vec<f32> {
        let [k, v] = self.q8.as_ref().expect("a quantized case");
        let (k, v): (Vec<Q8Slab<'_>>, Vec<Q8Slab<'_>>) = (
            k.iter().map(|(c, s)| Q8Slab { codes: c, scales: s }).collect(),
            v.iter().map(|(c, s)| Q8Slab { codes: c, scales: s }).collect(),
        );
        let mut out = vec![f32::NAN; self.q.len()];
        let span = Span { lo, n: self.n, d: self.d, scale };
        attend_span_sinks(path, &self.q, (&k, &v), self.b, (span, &[]), &mut out).expect("q8 attention runs");
        out
    }

    pub fn run(&self, path: Path) -> Vec<f32> {
        let k: Vec<&[u16]> = self.k.iter().map(Vec::as_slice).collect();
        let v: Vec<&[u16]> = self.v.iter().map(Vec::as_slice).collect();
        let mut out = vec![f32::NAN; self.q.len()];
        attend_one(path, &self.q, &k, &v, self.b, self.n, self.d, &mut out).expect("attention runs");
        out
    }

    /// Row `j` of K or V, widened (or dequantized: code times the row's scale).
    pub fn row(&self, slabs: &[Vec<u16>], j: usize) -> Vec<f32> {
        let at = (j % self.b) * self.d;
        if let Some(q8) = &self.q8 {
            let (codes, scales) = &q8[usize::from(std::ptr::eq(slabs, self.v.as_slice()))][j / self.b];
            let s = f16_to_f32(scales[j % self.b]);
            return codes[at..at + self.d].iter().map(|&c| f32::from(c) * s).collect();
        }
        slabs[j / self.b][at..at + self.d].iter().map(|&h| f16_to_f32(h)).collect()
    }

    /// attention.rs's arithmetic, one value at a time; `reversed` sums the weighted values
    /// over the keys in descending order instead (the negative control).
    pub fn reference(&self, reversed: bool) -> Vec<f32> {
        self.reference_span(0, 1.0 / (self.d as f32).sqrt(), reversed)
    }

    /// The same over keys `lo .. n` only, scores scaled by `scale`.
    pub fn reference_span(&self, lo: usize, scale: f32, reversed: bool) -> Vec<f32> {
        let d = self.d;
        let exp = |x: f32| exp16(Path::Portable, &[x; 16])[0];
        let mut out = Vec::new();
        for q in self.q.chunks_exact(d) {
            let s: Vec<f32> = (lo..self.n)
                .map(|j| {
                    let k = self.row(&self.k, j);
                    let mut lanes = [0.0f32; 16];
                    for i in 0..d {
                        lanes[i % 16] = q[i].mul_add(k[i], lanes[i % 16]);
                    }
                    tree(lanes) * scale
                })
                .collect();
            let m = s.iter().fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
            let e: Vec<f32> = s.iter().map(|&x| exp(x - m)).collect();
            let mut lanes = [0.0f32; 16];
            for (j, &e) in e.iter().enumerate() {
                lanes[j % 16] += e;
            }
            let sum = tree(lanes);
            let mut acc = vec![0.0f32; d];
            let m = e.len();
            let order: Vec<usize> = if reversed { (0..m).rev().collect() } else { (0..m).collect() };
            for j in order {
                for (a, v) in acc.iter_mut().zip(self.row(&self.v, lo + j)) {
                    *a = e[j].mul_add(v, *a);
                }
            }
            out.extend(acc.iter().map(|a| a / sum));
        }
        out
    }
}

/// The fixed pairwise tree of `Isa::hsum` (`tl_quant::simd`).
pub fn tree(v: [f32; 16]) -> f32 {
    let s8: Vec<f32> = (0..8).map(|l| v[l] + v[l + 8]).collect();
    let s4: Vec<f32> = (0..4).map(|l| s8[l] + s8[l + 4]).collect();
    (s4[0] + s4[2]) + (s4[1] + s4[3])
}

impl Case {
    /// The kernel over keys `lo .. n` with score scale `scale`.
    pub fn run_span(&self, path: Path, lo: usize, scale: f32) -> Vec<f32> {
        let k: Vec<&[u16]> = self.k.iter().map(Vec::as_slice).collect();
        let v: Vec<&[u16]> = self.v.iter().map(Vec::as_slice).collect();
        let mut out = vec![f32::NAN; self.q.len()];
        let span = Span { lo, n: self.n, d: self.d, scale };
        attend_span(path, &self.q, (&k, &v), self.b, span, &mut out).expect("attention runs");
        out
    }
}

pub const KEYS: [usize; 7] = [1, 2, 3, 16, 17, 33, 70];
