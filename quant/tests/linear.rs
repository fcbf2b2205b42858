//! The linear layer: batch invariance, accuracy against an f64 reference, int4 parity.

use tl_quant::{Linear, QLinear, QuantError};

/// Deterministic values in [-1, 1) (an LCG; the values only need to be varied).
fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

/// y = x W^T in f64, the textbook way.
fn reference(x: &[f32], m: usize, w: &[f32], out: usize, inp: usize) -> Vec<f64> {
    let mut y = vec![0.0f64; m * out];
    for i in 0..m {
        for n in 0..out {
            y[i * out + n] = (0..inp).map(|k| x[i * inp + k] as f64 * w[n * inp + k] as f64).sum();
        }
    }
    y
}

fn run(l: &Linear, x: &[f32], m: usize) -> Vec<f32> {
    let mut y = vec![f32::NAN; m * l.out()];
    l.forward(x, m, &mut y).unwrap();
    y
}

// Shapes with tails: inp not a multiple of 8, out not a multiple of 4 nor of the block.
const OUT: usize = 203;
const INP: usize = 132;

fn layers() -> Vec<Linear> {
    let w = values(OUT * INP, 1);
    vec![
        Linear::new_f32(w.clone(), OUT, INP).unwrap(),
        Linear::from_int4(&QLinear::quantize(&w, OUT, INP, 12).unwrap()).unwrap(),
    ]
}

#[test]
fn linear_forward_is_batch_invariant() {
    let m = 7;
    let x = values(m * INP, 2);
    for l in layers() {
        let batch = run(&l, &x, m);
        for i in 0..m {
            let alone = run(&l, &x[i * INP..(i + 1) * INP], 1);
            let row = &batch[i * OUT..(i + 1) * OUT];
            for (n, (a, b)) in alone.iter().zip(row).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "row {i} col {n}: alone {a} vs batch {b}");
            }
        }
        // Row 3 among other neighbours (a batch of 2) has the same bits too.
        let mut x2 = x[3 * INP..4 * INP].to_vec();
        x2.extend(values(INP, 9));
        let pair = run(&l, &x2, 2);
        let row3: Vec<u32> = batch[3 * OUT..4 * OUT].iter().map(|v| v.to_bits()).collect();
        assert_eq!(pair[..OUT].iter().map(|v| v.to_bits()).collect::<Vec<_>>(), row3);
    }
}

#[test]
fn linear_forward_matches_an_f64_reference() {
    let m = 5;
    let x = values(m * INP, 3);
    let w = values(OUT * INP, 1);
    let y = run(&Linear::new_f32(w.clone(), OUT, INP).unwrap(), &x, m);
    let want = reference(&x, m, &w, OUT, INP);
    for (k, (a, b)) in y.iter().zip(&want).enumerate() {
        // |x||w| <= INP; f32 accumulation error is a few ulps of that scale.
        assert!((*a as f64 - b).abs() <= 1e-5 * INP as f64, "element {k}: {a} vs {b}");
    }
    // Tiny and empty shapes.
    let l = Linear::new_f32(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 2, 3).unwrap();
    assert_eq!(run(&l, &[1.0, 0.5, -1.0], 1), vec![-1.0, 0.5]);
    assert_eq!(run(&l, &[], 0), Vec::<f32>::new());
    let empty = Linear::new_f32(vec![], 3, 0).unwrap();
    assert_eq!(run(&empty, &[], 2), vec![0.0; 6]);
}

#[test]
fn q4_linear_matches_its_dequantized_weights() {
    let m = 4;
    let (out, inp, group) = (70, 96, 32);
    let w = values(out * inp, 5);
    let q = QLinear::quantize(&w, out, inp, group).unwrap();
    let wh = q.dequantize();
    let x = values(m * inp, 6);
    let mut y = vec![0.0f32; m * out];
    q.forward(&x, m, &mut y).unwrap();
    let want = reference(&x, m, &wh, out, inp);
    for (k, (a, b)) in y.iter().zip(&want).enumerate() {
        assert!((*a as f64 - b).abs() <= 1e-5 * inp as f64, "element {k}: {a} vs {b}");
    }
    // Through Linear, and bit for bit equal to the f32 layer over the dequantized weights.
    let f = run(&Linear::new_f32(wh, out, inp).unwrap(), &x, m);
    let g = run(&Linear::from_int4(&q).unwrap(), &x, m);
    assert_eq!(f.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), y.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    assert_eq!(g, y);
    // And close to the unquantized layer: |W - W_hat| <= s/2 per weight.
    let exact = reference(&x, m, &w, out, inp);
    for (a, b) in y.iter().zip(&exact) {
        assert!((*a as f64 - b).abs() < 0.1 * inp as f64 / 7.0);
    }
}

#[test]
fn linear_refuses_mismatched_buffers() {
    let l = Linear::new_f32(vec![0.0; 6], 2, 3).unwrap();
    let mut y = vec![0.0; 2];
    assert!(matches!(l.forward(&[0.0; 4], 1, &mut y), Err(QuantError::LengthMismatch { what: "x", .. })));
    assert!(matches!(l.forward(&[0.0; 3], 1, &mut [0.0; 3]), Err(QuantError::LengthMismatch { what: "y", .. })));
    assert!(matches!(Linear::new_f32(vec![0.0; 5], 2, 3), Err(QuantError::LengthMismatch { what: "w", .. })));
    let mut q = QLinear::quantize(&[0.5; 8], 1, 8, 4).unwrap();
    q.scales.pop();
    assert!(matches!(Linear::from_int4(&q), Err(QuantError::LengthMismatch { what: "scales", .. })));
    assert_eq!((l.out(), l.inp()), (2, 3));
}
