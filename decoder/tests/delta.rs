//! The Gated DeltaNet's vector kernels (numbers.md, "Gated DeltaNet") give the portable
//! path's bits on every instruction set this CPU has: the delta-rule step over many
//! positions (its state carried), the conv row, the L2 norm, the gated norm's silu and the
//! attention output gate. And the delta-rule step's numbers are the rule's: an f64 run of
//! the same formula stays within rounding of it.

use tl_decoder::kernels::{conv_row, delta_step, l2norm_row, sigmoid_gate_row, silu_mul, Path};

/// Deterministic values in about [-1, 1].
fn vals(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// 40 positions of one head (Dk 32, Dv 48) on `path`: every output and the final state.
fn run_delta(path: Path) -> (Vec<f32>, Vec<f32>) {
    let (dk, dv) = (32, 48);
    let mut s = vals(dk * dv, 1);
    let mut outs = Vec::new();
    for t in 0..40u64 {
        let (q, k, v) = (vals(dk, 10 + t), vals(dk, 100 + t), vals(dv, 1000 + t));
        let beta = 0.3 + 0.01 * t as f32;
        let decay = 0.97 - 0.005 * t as f32;
        let mut o = vec![0.0f32; dv];
        delta_step(path, &mut s, (&q, &k, &v), (beta, decay), &mut o);
        outs.extend(o);
    }
    (outs, s)
}

#[test]
fn every_path_gives_the_portable_delta_rule_bits_across_positions() {
    let (want_o, want_s) = run_delta(Path::Portable);
    for p in Path::all_available() {
        let (o, s) = run_delta(p);
        assert_eq!(bits(&o), bits(&want_o), "{p:?}: outputs differ");
        assert_eq!(bits(&s), bits(&want_s), "{p:?}: the state differs");
    }
}

#[test]
fn the_delta_rule_step_is_the_formula() {
    // The same 40 positions in f64, written as numbers.md says: decay, m = S^T k,
    // d = (v - m) beta, S += k d^T, o = S^T q. Rounding only may part them.
    let (dk, dv) = (32, 48);
    let mut s: Vec<f64> = vals(dk * dv, 1).iter().map(|&x| x as f64).collect();
    let (got, _) = run_delta(Path::Portable);
    for t in 0..40u64 {
        let (q, k, v) = (vals(dk, 10 + t), vals(dk, 100 + t), vals(dv, 1000 + t));
        let (beta, decay) = ((0.3 + 0.01 * t as f32) as f64, (0.97 - 0.005 * t as f32) as f64);
        s.iter_mut().for_each(|x| *x *= decay);
        for j in 0..dv {
            let m: f64 = (0..dk).map(|i| s[i * dv + j] * k[i] as f64).sum();
            let d = (v[j] as f64 - m) * beta;
            (0..dk).for_each(|i| s[i * dv + j] += k[i] as f64 * d);
            let o: f64 = (0..dk).map(|i| s[i * dv + j] * q[i] as f64).sum();
            let ours = got[t as usize * dv + j] as f64;
            assert!((ours - o).abs() <= 1e-4 * (1.0 + o.abs()), "position {t}, column {j}: {ours} vs {o}");
        }
    }
}

#[test]
fn conv_norm_and_gates_give_the_portable_bits_on_every_path() {
    let c = 96;
    let (w, window, x) = (vals(4 * c, 7), vals(3 * c, 8), vals(c, 9));
    let mut want = vec![0.0f32; c];
    conv_row(Path::Portable, &w, &window, &x, &mut want);
    let mut head = vals(32, 11);
    l2norm_row(Path::Portable, &mut head, 0.25);
    let (v, z) = (vals(48, 12), vals(48, 13));
    let mut sm = vec![0.0f32; 48];
    silu_mul(Path::Portable, &v, &z, &mut sm);
    let mut gated = vals(40, 14); // 40: a partial last vector
    sigmoid_gate_row(Path::Portable, &mut gated, &vals(40, 15));
    for p in Path::all_available() {
        let mut u = vec![0.0f32; c];
        conv_row(p, &w, &window, &x, &mut u);
        assert_eq!(bits(&u), bits(&want), "{p:?}: conv");
        let mut h = vals(32, 11);
        l2norm_row(p, &mut h, 0.25);
        assert_eq!(bits(&h), bits(&head), "{p:?}: L2 norm");
        let mut o = vec![0.0f32; 48];
        silu_mul(p, &v, &z, &mut o);
        assert_eq!(bits(&o), bits(&sm), "{p:?}: silu gate");
        let mut g = vals(40, 14);
        sigmoid_gate_row(p, &mut g, &vals(40, 15));
        assert_eq!(bits(&g), bits(&gated), "{p:?}: output gate");
    }
    // The L2-normed head has norm 0.25 (the q scale) up to rounding.
    let n: f32 = head.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((n - 0.25).abs() < 1e-5, "{n}");
}
