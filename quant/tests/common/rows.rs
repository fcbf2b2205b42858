#![allow(dead_code)] // each test binary uses its own subset
//! What several of tl-quant's tests share: a seeded generator, and the check that a
//! layer's rows do not depend on the thread count nor on the rows beside them.

use tl_quant::Linear;

/// A 64-bit LCG (Knuth's MMIX constants): deterministic test data.
pub struct Lcg(pub u64);

impl Lcg {
    /// The next 31 bits.
    pub fn next(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
    /// Uniform in [-1, 1).
    pub fn f(&mut self) -> f32 {
        self.next() as f32 / (1u64 << 31) as f32 - 1.0
    }
    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// The bit patterns of `v`.
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `l` over the `m` rows of `x` on pools of 1, 2 and 3 threads, all equal bit for bit,
/// and rows `alone` each run by themselves equal to their place in the batch; returns
/// the batch's output bits.
pub fn check_threads_and_rows(l: &Linear, x: &[f32], m: usize, alone: &[usize], what: &str) -> Vec<u32> {
    let (out, inp) = (l.out(), l.inp());
    let pool = |n| rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap();
    let all: Vec<Vec<u32>> = [1, 2, 3]
        .iter()
        .map(|&t| {
            pool(t).install(|| {
                let mut y = vec![0.0; m * out];
                l.forward(x, m, &mut y).unwrap();
                bits(&y)
            })
        })
        .collect();
    assert_eq!(all[0], all[1], "{what}: 1 vs 2 threads");
    assert_eq!(all[0], all[2], "{what}: 1 vs 3 threads");
    for &i in alone {
        let mut y = vec![0.0; out];
        l.forward(&x[i * inp..(i + 1) * inp], 1, &mut y).unwrap();
        assert_eq!(bits(&y), all[0][i * out..(i + 1) * out], "{what}: row {i} alone");
    }
    all[0].clone()
}
