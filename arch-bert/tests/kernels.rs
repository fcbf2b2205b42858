//! The vector kernels of tl-arch-bert give the same bits on every instruction set this
//! CPU has (the portable code is the reference), and are accurate: the f32 products
//! equal tl-quant's f32 kernel bit for bit, GELU is within its stated bound of the exact
//! f64 erf, LayerNorm and attention within f32 rounding of an f64 reference.

use tl_arch_bert::gemm::Packed;
use tl_arch_bert::lanes::{gelu, gelu_one};
use tl_arch_bert::ops::{add_layer_norm, attention};
use tl_quant::{Linear, Path};

/// Deterministic values in about [-2, 2).
fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 22) as f32 - 2.0
        })
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn products_equal_tl_quant_bit_for_bit_on_every_path() {
    for &(m, out, inp) in &[(1, 1, 1), (5, 16, 17), (7, 40, 384), (50, 384, 384), (13, 33, 1536)] {
        let (w, x) = (values(out * inp, 1), values(m * inp, 2));
        let reference = Linear::from_f32(&w, out, inp).unwrap();
        let mut want = vec![0.0f32; m * out];
        reference.forward_on(Path::Portable, &x, m, &mut want).unwrap();
        let packed = Packed::new(&w, &[], out, inp);
        let b = values(out, 9);
        let with_bias = Packed::new(&w, &b, out, inp);
        let want_b: Vec<f32> = want.iter().enumerate().map(|(i, &v)| v + b[i % out]).collect();
        for path in Path::all_available() {
            let mut got = vec![f32::NAN; m * out];
            packed.forward(path, &x, m, &mut got);
            assert_eq!(bits(&got), bits(&want), "{path:?}, {m}x{inp} by {out}");
            with_bias.forward(path, &x, m, &mut got);
            assert_eq!(bits(&got), bits(&want_b), "{path:?}, {m}x{inp} by {out}, bias");
        }
    }
}

/// GELU with libm's erf in f64, rounded once: the reference.
fn gelu_exact(v: f32) -> f64 {
    let t = v as f64;
    0.5 * t * (1.0 + libm::erf(t * std::f64::consts::FRAC_1_SQRT_2))
}

#[test]
fn gelu_is_the_same_on_every_path_and_within_its_bound() {
    let mut xs = values(100_003, 3).iter().map(|v| v * 4.0).collect::<Vec<_>>();
    xs.extend([0.0, -0.0, 1e-30, -1e-30, 5.5, -5.5, 30.0, -30.0, 1e30, -1e30, f32::INFINITY, f32::MIN_POSITIVE]);
    let mut want = xs.clone();
    gelu(Path::Portable, &mut want);
    for path in Path::all_available() {
        let mut got = xs.clone();
        gelu(path, &mut got);
        assert_eq!(bits(&got), bits(&want), "{path:?}");
    }
    let mut worst = 0.0f64;
    for (&x, &g) in xs.iter().zip(&want) {
        assert_eq!(g.to_bits(), gelu_one(x).to_bits());
        let exact = gelu_exact(x);
        // Half an ulp of the result (the final rounding) plus 5e-8 (the erf fit's 4.6e-9
        // relative error, times |x| / 2; 4.4e-8 where erf is taken as -1).
        let ulp = (exact.abs() as f32).max(f32::MIN_POSITIVE);
        let bound = (f32::from_bits(ulp.to_bits() + 1) - ulp) as f64 * 0.5 + 5e-8;
        let err = (g as f64 - exact).abs();
        if exact.is_finite() {
            assert!(err <= bound, "gelu({x}) = {g}, exact {exact}");
            worst = worst.max(err / bound);
        }
    }
    assert!(worst > 0.0);
}

#[test]
fn layer_norm_is_the_same_on_every_path_and_close_to_f64() {
    for d in [1, 16, 37, 384] {
        let n = 9;
        let (x, r, w, b) = (values(n * d, 4), values(n * d, 5), values(d, 6), values(d, 7));
        let mut want = x.clone();
        add_layer_norm(Path::Portable, &mut want, Some(&r), &w, &b, 1e-12);
        for path in Path::all_available() {
            let mut got = x.clone();
            add_layer_norm(path, &mut got, Some(&r), &w, &b, 1e-12);
            assert_eq!(bits(&got), bits(&want), "{path:?}, d {d}");
        }
        for i in 0..n {
            let row: Vec<f64> = (0..d).map(|j| (x[i * d + j] + r[i * d + j]) as f64).collect();
            let mean = row.iter().sum::<f64>() / d as f64;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / d as f64;
            for j in 0..d {
                let e = (row[j] - mean) / (var + 1e-12).sqrt() * w[j] as f64 + b[j] as f64;
                let got = want[i * d + j] as f64;
                assert!((got - e).abs() <= 1e-5 * (1.0 + e.abs()), "d {d} row {i} col {j}: {got} vs {e}");
            }
        }
    }
}

#[test]
fn attention_is_the_same_on_every_path_and_close_to_f64() {
    // No window, local windows (keys within 3 or 40 of the query), and a window past every
    // input, which must give the unwindowed bits.
    for window in [None, Some(3), Some(40), Some(300)] {
        check_attention(window);
    }
    let (heads, hd, lens) = (3, 20, [1usize, 17, 5, 33, 150]);
    let qkv = values(206 * 3 * heads * hd, 8);
    let (mut full, mut wide) = (vec![0f32; 206 * heads * hd], vec![1f32; 206 * heads * hd]);
    attention(Path::best(), &qkv, &lens, (heads, hd), None, &mut full);
    attention(Path::best(), &qkv, &lens, (heads, hd), Some(300), &mut wide);
    assert_eq!(bits(&full), bits(&wide));
}

fn check_attention(window: Option<usize>) {
    let (heads, hd) = (3, 20);
    let d = heads * hd;
    // 150: past one block of query rows (64), so the blocks and a window's key range count.
    let lens = [1usize, 17, 5, 33, 150];
    let n: usize = lens.iter().sum();
    let qkv = values(n * 3 * d, 8);
    let mut want = vec![f32::NAN; n * d];
    attention(Path::Portable, &qkv, &lens, (heads, hd), window, &mut want);
    for path in Path::all_available() {
        let mut got = vec![f32::NAN; n * d];
        attention(path, &qkv, &lens, (heads, hd), window, &mut got);
        assert_eq!(bits(&got), bits(&want), "{path:?} {window:?}");
    }
    // Each input alone gives its rows' bits.
    let mut at = 0;
    for &t in &lens {
        let mut alone = vec![f32::NAN; t * d];
        attention(Path::best(), &qkv[at * 3 * d..(at + t) * 3 * d], &[t], (heads, hd), window, &mut alone);
        assert_eq!(bits(&alone), bits(&want[at * d..(at + t) * d]));
        // An f64 reference over the keys the window keeps.
        let scale = 1.0 / (hd as f64).sqrt();
        for h in 0..heads {
            for i in 0..t {
                let q = &qkv[(at + i) * 3 * d + h * hd..][..hd];
                let keys: Vec<usize> = (0..t).filter(|&j| window.is_none_or(|w| i.abs_diff(j) <= w)).collect();
                let s: Vec<f64> = keys
                    .iter()
                    .map(|&j| {
                        let k = &qkv[(at + j) * 3 * d + d + h * hd..][..hd];
                        q.iter().zip(k).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>() * scale
                    })
                    .collect();
                let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|v| (v - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for c in 0..hd {
                    let o: f64 = keys
                        .iter()
                        .zip(&e)
                        .map(|(&j, &ej)| ej / sum * qkv[(at + j) * 3 * d + 2 * d + h * hd + c] as f64)
                        .sum();
                    let got = want[(at + i) * d + h * hd + c] as f64;
                    assert!((got - o).abs() <= 1e-5, "input at {at}, head {h}, row {i}, col {c}: {got} vs {o}");
                }
            }
        }
        at += t;
    }
}

/// GFLOP/s of the products at BERT's shapes (`cargo test --test kernels -- --ignored
/// --nocapture`); never asserted.
#[test]
#[ignore]
fn gemm_speed() {
    for &(m, out, inp) in &[(1856, 1152, 384), (1856, 1536, 384), (1856, 384, 1536), (58, 1152, 384), (58, 384, 1536)] {
        let (w, x) = (values(out * inp, 1), values(m * inp, 2));
        let packed = Packed::new(&w, &[], out, inp);
        let lin = Linear::from_f32(&w, out, inp).unwrap();
        let mut y = vec![0.0f32; m * out];
        let reps = (2e10 / (2.0 * (m * out * inp) as f64)).ceil() as usize;
        let bert = |y: &mut [f32]| packed.forward(Path::best(), &x, m, y);
        let quant = |y: &mut [f32]| lin.forward(&x, m, y).unwrap();
        type Run<'a> = &'a dyn Fn(&mut [f32]);
        let fs: [(&str, Run); 2] = [("bert", &bert), ("tl-quant", &quant)];
        for (name, f) in fs {
            f(&mut y);
            let t = std::time::Instant::now();
            for _ in 0..reps {
                f(&mut y);
            }
            let s = t.elapsed().as_secs_f64();
            println!("{name:9} {m}x{inp} by {out}: {:.1} GFLOP/s", 2.0 * (m * out * inp * reps) as f64 / s / 1e9);
        }
    }
}
