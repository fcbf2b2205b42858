//! The forward's own vector kernels (attention, f16 narrowing, RMSNorm, SwiGLU, exp): every
//! instruction set this CPU has gives the portable path's bits exactly, the portable path
//! follows the documented arithmetic (a reference written here from attention.rs's
//! definition), and the comparison is sharp enough to catch a reordered sum.

mod common;

use common::*;
use tl_decoder::kernels::{
    attend_one, attend_span, attend_span_sinks, clamped_swiglu_row, exp16, gelu_tanh_row, narrow_f16, rms_norm_row,
    swiglu_row, Path, Span,
};
use tl_quant::{f16_to_f32, f32_to_f16};

#[test]
fn attention_paths_equal_portable_bit_for_bit() {
    let paths = simd_paths();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut cases = 0;
    // head_dim: SmolLM2's 64, the fixture's 16, and sizes with a partial last chunk.
    for d in [64, 16, 24, 8, 128] {
        // GQA groups: 1, SmolLM2's 3, and 5 (a pass of 4 heads then 1).
        for group in [1, 3, 5] {
            for n in KEYS {
                for b in [4, 16, 7] {
                    let c = Case::new(&mut rng, group, n, d, b);
                    let portable = c.run(Path::Portable);
                    assert!(portable.iter().all(|x| x.is_finite()), "d {d} group {group} n {n}: not finite");
                    let r = c.reference(false);
                    assert_eq!(bits(&portable), bits(&r), "portable != reference: d {d} group {group} n {n} b {b}");
                    for &p in &paths {
                        assert_eq!(bits(&c.run(p)), bits(&portable), "{p:?}: d {d} group {group} n {n} b {b}");
                    }
                    cases += 1;
                }
            }
        }
    }
    eprintln!("{cases} cases equal on {} paths", paths.len() + 1);
}

/// A one-key softmax is exactly 1: the output is the value row, widened.
#[test]
fn one_key_returns_its_value() {
    let mut rng = Rng(7);
    let c = Case::new(&mut rng, 3, 1, 64, 16);
    let v = c.row(&c.v, 0);
    for p in Path::all_available() {
        let out = c.run(p);
        for h in out.chunks_exact(64) {
            assert_eq!(bits(h), bits(&v), "{p:?}");
        }
    }
}

/// The negative control: summing the values in the other order changes some bits, and the
/// bit-for-bit comparison sees it (so the equalities above are not vacuous).
#[test]
fn a_reordered_sum_is_caught() {
    let mut rng = Rng(99);
    let c = Case::new(&mut rng, 3, 33, 64, 16);
    let portable = c.run(Path::Portable);
    assert_eq!(bits(&portable), bits(&c.reference(false)));
    let reordered = c.reference(true);
    let differ = bits(&portable).iter().zip(bits(&reordered)).filter(|(a, b)| **a != *b).count();
    let close = portable.iter().zip(&reordered).all(|(a, b)| (a - b).abs() <= 1e-5 * a.abs().max(1.0));
    eprintln!("reordered sum: {differ} of {} outputs differ in their bits (all within 1e-5: {close})", portable.len());
    assert!(differ > 0, "the comparison did not catch a reordered sum");
    assert!(close, "the reordered sum should differ only by rounding");
}

/// A windowed span equals the reference over exactly its keys on every path, with a
/// scale other than `1/sqrt(D)`; keys before the window (and their values) do not matter:
/// change them, the output bits stay; change the first visible key, they move.
#[test]
fn a_window_reads_only_its_keys() {
    let paths = simd_paths();
    let mut rng = Rng(0x5eed);
    let mut cases = 0;
    for d in [64, 16, 24] {
        for group in [1, 3, 5] {
            for (n, b) in [(70, 16), (33, 7), (17, 4), (40, 16)] {
                for lo in [1, 5, 16, n / 2, n - 1] {
                    let mut c = Case::new(&mut rng, group, n, d, b);
                    let scale = 0.0625; // Gemma 3's query_pre_attn_scalar 256, ^-0.5
                    let out = c.run_span(Path::Portable, lo, scale);
                    assert!(out.iter().all(|x| x.is_finite()));
                    assert_eq!(bits(&out), bits(&c.reference_span(lo, scale, false)), "d {d} g {group} n {n} lo {lo}");
                    for &p in &paths {
                        assert_eq!(bits(&c.run_span(p, lo, scale)), bits(&out), "{p:?}: d {d} n {n} lo {lo}");
                    }
                    // Keys 0 .. lo: new values, very different scores; the output stays.
                    for j in 0..lo {
                        let at = (j % b) * d;
                        for x in &mut c.k[j / b][at..at + d] {
                            *x = f32_to_f16(rng.f32(30.0));
                        }
                        for x in &mut c.v[j / b][at..at + d] {
                            *x = f32_to_f16(rng.f32(30.0));
                        }
                    }
                    for p in Path::all_available() {
                        assert_eq!(bits(&c.run_span(p, lo, scale)), bits(&out), "{p:?}: a hidden key mattered");
                    }
                    let at = (lo % b) * d;
                    c.v[lo / b][at] = f32_to_f16(f16_to_f32(c.v[lo / b][at]) + 1.0);
                    assert_ne!(
                        bits(&c.run_span(Path::Portable, lo, scale)),
                        bits(&out),
                        "the first visible key did not matter"
                    );
                    cases += 1;
                }
            }
        }
    }
    eprintln!("{cases} windowed cases");
}

/// `lo = 0` with the default scale is the full attention, bit for bit (the kernel's
/// window and scale are no change to a global layer).
#[test]
fn an_open_span_is_full_attention() {
    let mut rng = Rng(21);
    for (n, b) in [(1, 4), (33, 7), (70, 16)] {
        let c = Case::new(&mut rng, 3, n, 64, b);
        for p in Path::all_available() {
            assert_eq!(bits(&c.run_span(p, 0, 0.125)), bits(&c.run(p)), "{p:?} n {n}");
        }
    }
}

#[test]
fn attention_refuses_bad_shapes() {
    let mut rng = Rng(3);
    let c = Case::new(&mut rng, 1, 17, 16, 8);
    let k: Vec<&[u16]> = c.k.iter().map(Vec::as_slice).collect();
    let v: Vec<&[u16]> = c.v.iter().map(Vec::as_slice).collect();
    let mut out = vec![0.0; 16];
    // More keys than the blocks hold, no keys, an empty head, q and out of other sizes.
    assert!(attend_one(Path::Portable, &c.q, &k, &v, 8, 25, 16, &mut out).is_err());
    assert!(attend_one(Path::Portable, &c.q, &k, &v, 8, 0, 16, &mut out).is_err());
    assert!(attend_one(Path::Portable, &c.q, &k, &v, 8, 17, 0, &mut out).is_err());
    assert!(attend_one(Path::Portable, &c.q, &k, &v, 0, 17, 16, &mut out).is_err());
    assert!(attend_one(Path::Portable, &c.q, &k, &v, 8, 17, 16, &mut out[..8]).is_err());
    assert!(attend_one(Path::Portable, &c.q, &k, &v, 8, 17, 16, &mut out).is_ok());
    // An empty window (lo = n) is refused.
    let span = Span { lo: 17, n: 17, d: 16, scale: 0.25 };
    assert!(attend_span(Path::Portable, &c.q, (&k, &v), 8, span, &mut out).is_err());
}

#[test]
fn f16_narrowing_matches_tl_quant_on_every_path() {
    let mut rng = Rng(42);
    let mut xs: Vec<f32> = (0..200_000).map(|_| f32::from_bits(rng.u64() as u32)).collect();
    // Ties, the overflow edge, subnormals, zeros, infinities, NaNs with payloads.
    xs.extend([
        0.0,
        -0.0,
        1.0,
        65504.0,
        65519.99,
        65520.0,
        -65520.0,
        1e-8,
        -6e-8,
        5.96e-8,
        2.98e-8,
        1.0 + 1.0 / 2048.0,
        1.0 + 3.0 / 2048.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MIN_POSITIVE,
    ]);
    xs.extend([0x7f80_0001u32, 0x7fc0_1234, 0xffbf_ffff, 0x7f80_2000].map(f32::from_bits));
    let want: Vec<u16> = xs.iter().map(|&x| f32_to_f16(x)).collect();
    for p in Path::all_available() {
        // An odd length, so the scalar tail runs too.
        for len in [xs.len(), 37, 16, 5] {
            let mut got = vec![0u16; len];
            narrow_f16(p, &xs[..len], &mut got);
            assert_eq!(got, want[..len], "{p:?}, {len} values");
        }
    }
}

#[test]
fn rms_norm_and_swiglu_paths_equal_portable() {
    let paths = simd_paths();
    let mut rng = Rng(5);
    for len in [1, 15, 16, 17, 64, 100, 576, 1536] {
        let (x, w, u) = (rng.vec(len, 4.0), rng.vec(len, 2.0), rng.vec(len, 3.0));
        let mut want = vec![0.0; len];
        rms_norm_row(Path::Portable, &x, &w, 1e-5, &mut want);
        // Close to the textbook formula in f64.
        let ms = x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / len as f64;
        for i in 0..len {
            let exact = x[i] as f64 / (ms + 1e-5).sqrt() * w[i] as f64;
            assert!((want[i] as f64 - exact).abs() <= 1e-5 * exact.abs().max(1e-3), "rms_norm {len}: {i}");
        }
        let mut act = vec![0.0; len];
        swiglu_row(Path::Portable, &x, &u, &mut act);
        for i in 0..len {
            let (g, up) = (x[i] as f64, u[i] as f64);
            let exact = g / (1.0 + (-g).exp()) * up;
            assert!((act[i] as f64 - exact).abs() <= 1e-5 * exact.abs().max(1e-3), "swiglu {len}: {i}");
        }
        for &p in &paths {
            let mut got = vec![0.0; len];
            rms_norm_row(p, &x, &w, 1e-5, &mut got);
            assert_eq!(bits(&got), bits(&want), "rms_norm {p:?} {len}");
            swiglu_row(p, &x, &u, &mut got);
            assert_eq!(bits(&got), bits(&act), "swiglu {p:?} {len}");
        }
    }
}

#[test]
fn exp_is_accurate_and_the_same_on_every_path() {
    let paths = simd_paths();
    let mut rng = Rng(11);
    let mut worst = 0.0f64;
    for _ in 0..20_000 {
        let x: [f32; 16] = std::array::from_fn(|_| rng.f32(87.0));
        let want = exp16(Path::Portable, &x);
        for (&x, &y) in x.iter().zip(&want) {
            let exact = (x as f64).exp();
            worst = worst.max(((y as f64 - exact) / exact).abs());
        }
        for &p in &paths {
            assert_eq!(bits(&exp16(p, &x)), bits(&want), "{p:?} on {x:?}");
        }
    }
    eprintln!("exp: worst relative error {worst:.2e}");
    assert!(worst < 3.0 * f32::EPSILON as f64, "exp relative error {worst:e}");
    // Clamped: far below gives e^-87 (tiny, positive), NaN too; far above stays finite.
    let edge = exp16(
        Path::Portable,
        &[-1e30, f32::NEG_INFINITY, f32::NAN, 1e30, 0.0, -0.0, 88.0, -87.0, 1.0, -1.0, 0.5, 2.0, 3.0, 4.0, 5.0, 6.0],
    );
    assert!(edge[..3].iter().all(|&y| y > 0.0 && y < 1e-37), "{edge:?}");
    assert!(edge[3].is_finite() && edge[3] > 1e38, "{edge:?}");
    assert_eq!(edge[4], 1.0);
    assert_eq!(edge[5], 1.0);
}

/// torch's `gelu(g, approximate="tanh") * u`, in f64.
fn gelu_tanh_ref(g: f64, u: f64) -> f64 {
    0.5 * g * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (g + 0.044715 * g * g * g)).tanh()) * u
}

#[test]
fn gelu_tanh_is_accurate_and_the_same_on_every_path() {
    let paths = simd_paths();
    let mut rng = Rng(17);
    for len in [1, 15, 16, 17, 64, 100, 640, 2048] {
        let (g, u) = (rng.vec(len, 8.0), rng.vec(len, 3.0));
        let mut want = vec![0.0; len];
        gelu_tanh_row(Path::Portable, &g, &u, &mut want);
        for i in 0..len {
            let exact = gelu_tanh_ref(g[i] as f64, u[i] as f64);
            // Relative to |u| too: for very negative g the product is tiny and only its
            // absolute error is meaningful.
            let tol = 4e-6 * exact.abs().max(1e-3 * (u[i] as f64).abs()).max(1e-30);
            assert!(
                (want[i] as f64 - exact).abs() <= tol,
                "gelu_tanh {len}: {i}: g {} got {} want {exact}",
                g[i],
                want[i]
            );
        }
        for &p in &paths {
            let mut got = vec![0.0; len];
            gelu_tanh_row(p, &g, &u, &mut got);
            assert_eq!(bits(&got), bits(&want), "gelu_tanh {p:?} {len}");
        }
    }
    // Large |g|: the identity far above, zero far below, never NaN.
    let g = [100.0f32, -100.0, 30.0, -30.0, 0.0, -0.0];
    let mut out = [0.0f32; 6];
    gelu_tanh_row(Path::Portable, &g, &[1.0; 6], &mut out);
    assert_eq!(out[0], 100.0);
    assert_eq!(out[2], 30.0);
    assert!(out[1].abs() < 1e-30 && out[3].abs() < 1e-30, "{out:?}");
    assert_eq!(out[4], 0.0);
}

/// Sinks (gpt-oss): one more logit per query head in the softmax, its value dropped. Every
/// path equals the portable one bit for bit; the portable one equals the scalar reference
/// of the documented arithmetic (`m = max(max_j s_j, z)`, `sum = tree + exp(z - m)`)
/// bit for bit; a large sink shrinks the output towards zero and a very negative one
/// changes nothing but the last bits at most.
#[test]
fn attention_sinks_are_one_more_logit_on_every_path() {
    let paths = simd_paths();
    let mut rng = Rng(0x5151_a0a0_1234_9876);
    let exp = |x: f32| exp16(Path::Portable, &[x; 16])[0];
    for d in [64, 16, 24] {
        for group in [1, 3, 5] {
            for n in [1, 17, 33] {
                let c = Case::new(&mut rng, group, n, d, 16);
                let sinks: Vec<f32> = (0..group).map(|_| rng.f32(4.0)).collect();
                let (k, v): (Vec<&[u16]>, Vec<&[u16]>) =
                    (c.k.iter().map(Vec::as_slice).collect(), c.v.iter().map(Vec::as_slice).collect());
                let span = Span { lo: 0, n, d, scale: 1.0 / (d as f32).sqrt() };
                let run = |p: Path, sinks: &[f32]| {
                    let mut out = vec![f32::NAN; c.q.len()];
                    attend_span_sinks(p, &c.q, (&k, &v), c.b, (span, sinks), &mut out).expect("runs");
                    out
                };
                let portable = run(Path::Portable, &sinks);
                for &p in &paths {
                    assert_eq!(bits(&run(p, &sinks)), bits(&portable), "{p:?}: d {d} group {group} n {n}");
                }
                // The reference: the same scores, the sink in the max and the sum.
                let mut want = Vec::new();
                for (h, q) in c.q.chunks_exact(d).enumerate() {
                    let s: Vec<f32> = (0..n)
                        .map(|j| {
                            let kr = c.row(&c.k, j);
                            let mut lanes = [0.0f32; 16];
                            for i in 0..d {
                                lanes[i % 16] = q[i].mul_add(kr[i], lanes[i % 16]);
                            }
                            tree(lanes) * span.scale
                        })
                        .collect();
                    let m = s.iter().fold(sinks[h], |m, &x| if x > m { x } else { m });
                    let e: Vec<f32> = s.iter().map(|&x| exp(x - m)).collect();
                    let mut lanes = [0.0f32; 16];
                    for (j, &e) in e.iter().enumerate() {
                        lanes[j % 16] += e;
                    }
                    let sum = tree(lanes) + exp(sinks[h] - m);
                    let mut acc = vec![0.0f32; d];
                    for (j, &e) in e.iter().enumerate() {
                        for (a, v) in acc.iter_mut().zip(c.row(&c.v, j)) {
                            *a = e.mul_add(v, *a);
                        }
                    }
                    want.extend(acc.iter().map(|a| a / sum));
                }
                assert_eq!(bits(&portable), bits(&want), "reference: d {d} group {group} n {n}");
                // A sink far above every score takes the mass; far below, none of it.
                let big = run(Path::Portable, &vec![1e3; group]);
                assert!(big.iter().all(|x| x.abs() < 1e-20), "a dominant sink leaves ~0");
                let none = run(Path::Portable, &[]);
                let tiny = run(Path::Portable, &vec![-1e3; group]);
                assert_eq!(bits(&tiny), bits(&none), "exp(-huge) adds +0 to the sum");
                assert_ne!(bits(&portable), bits(&none), "d {d} group {group} n {n}: the sinks changed nothing");
            }
        }
    }
}

/// gpt-oss's clamped SwiGLU, in f64: `(clamp(u, -l, l) + 1) * g' * sigmoid(a * g')`,
/// `g' = min(g, l)`.
fn clamped_swiglu_ref(g: f64, u: f64, l: f64, a: f64) -> f64 {
    let g = g.min(l);
    (u.clamp(-l, l) + 1.0) * g / (1.0 + (-a * g).exp())
}

#[test]
fn clamped_swiglu_is_accurate_and_the_same_on_every_path() {
    let paths = simd_paths();
    let mut rng = Rng(23);
    let (limit, alpha) = (7.0f32, 1.702f32);
    for len in [1, 15, 16, 17, 64, 100, 2048] {
        // Values past the limit on both sides, so both clamps act.
        let (g, u) = (rng.vec(len, 12.0), rng.vec(len, 12.0));
        let mut want = vec![0.0; len];
        clamped_swiglu_row(Path::Portable, &g, &u, &mut want, limit, alpha);
        for i in 0..len {
            let exact = clamped_swiglu_ref(g[i] as f64, u[i] as f64, limit as f64, alpha as f64);
            let tol = 4e-6 * exact.abs().max(1e-3);
            assert!(
                (want[i] as f64 - exact).abs() <= tol,
                "{len}: {i}: g {} u {} got {} want {exact}",
                g[i],
                u[i],
                want[i]
            );
        }
        for &p in &paths {
            let mut got = vec![0.0; len];
            clamped_swiglu_row(p, &g, &u, &mut got, limit, alpha);
            assert_eq!(bits(&got), bits(&want), "clamped swiglu {p:?} {len}");
        }
    }
    // The clamps: a gate above the limit acts as the limit, an up above it as the limit.
    let mut out = [0.0f32; 2];
    clamped_swiglu_row(Path::Portable, &[50.0, 7.0], &[50.0, 7.0], &mut out, limit, alpha);
    assert_eq!(out[0].to_bits(), out[1].to_bits());
}
