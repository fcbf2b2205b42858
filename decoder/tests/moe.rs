//! The mixture-of-experts block's weighted sum runs over each token's experts in ascending
//! expert id (issue 31's fixed order), whatever their scores and whatever the batch.
//!
//! The terms are measured, not recomputed: the block is run once per expert with every
//! other expert's down projection zeroed, which leaves each token's row equal to that
//! expert's weighted output `w_e * y_e` alone (its other terms are exact zeros). The full
//! block must then give, bit for bit, the f32 sum of those terms taken in ascending id; the
//! test also checks that another order (descending id, and the routers' score order) gives
//! other bits on these inputs, so it fails if the order changes.

use tl_decoder::{Act, Mlp, Moe, MoeBuffers, Path, Proj, Routing};
use tl_quant::Linear;

/// Deterministic values in about [-1, 1].
fn vals(n: usize, seed: u32) -> Vec<f32> {
    (0..n).map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 2001) as f32 / 1000.0 - 1.0).collect()
}

const D: usize = 16;
const I: usize = 16;
const E: usize = 6;
const K: usize = 3;

fn expert(e: usize, zero_down: bool) -> Mlp {
    let gate = Linear::from_f32(&vals(I * D, 10 + e as u32), I, D).unwrap();
    let up = Linear::from_f32(&vals(I * D, 20 + e as u32), I, D).unwrap();
    let down: Vec<f32> = if zero_down { vec![0.0; D * I] } else { vals(D * I, 30 + e as u32) };
    Mlp {
        gate_up: Proj::new(vec![gate, up]),
        down: Linear::from_f32(&down, D, I).unwrap(),
        act: Act::SwiGlu,
        gate_up_bias: None,
        down_bias: None,
        lora: Default::default(),
    }
}

/// The block with every expert but `only` (all when `None`) contributing zeros.
fn block(routing: Routing, only: Option<usize>) -> Moe {
    Moe {
        router: Linear::from_f32(&vals(E * D, 3), E, D).unwrap(),
        router_bias: None,
        experts: (0..E).map(|e| expert(e, only.is_some_and(|o| o != e))).collect(),
        top_k: K,
        routing,
        shared: None,
    }
}

fn run(m: &Moe, h: &[f32]) -> Vec<f32> {
    let mut proj = vec![f32::NAN; h.len()];
    m.apply(Path::Portable, h, D, &mut MoeBuffers::default(), &mut proj).unwrap();
    proj
}

#[test]
fn the_weighted_sum_runs_in_ascending_expert_id() {
    let n = 9;
    let h = vals(n * D, 77);
    for routing in [Routing::SoftmaxTopK { renorm: true }, Routing::SoftmaxTopK { renorm: false }, Routing::TopKSoftmax]
    {
        let full = run(&block(routing, None), &h);
        let terms: Vec<Vec<f32>> = (0..E).map(|e| run(&block(routing, Some(e)), &h)).collect();
        // Each token's experts: those whose term row is not all zeros (k of them).
        let logits = {
            let r = Linear::from_f32(&vals(E * D, 3), E, D).unwrap();
            let mut y = vec![0.0; n * E];
            r.forward(&h, n, &mut y).unwrap();
            y
        };
        let (mut other_order_differs, mut score_order_differs) = (false, false);
        for t in 0..n {
            let chosen: Vec<usize> =
                (0..E).filter(|&e| terms[e][t * D..(t + 1) * D].iter().any(|&v| v != 0.0)).collect();
            assert_eq!(chosen.len(), K, "row {t}: k experts");
            let sum = |order: &[usize]| -> Vec<f32> {
                (0..D).map(|c| order.iter().fold(0.0f32, |a, &e| a + terms[e][t * D + c])).collect()
            };
            let want = sum(&chosen);
            let got = &full[t * D..(t + 1) * D];
            let b = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(b(got), b(&want), "{routing:?} row {t}: ascending expert id");
            let mut desc = chosen.clone();
            desc.reverse();
            other_order_differs |= b(&sum(&desc)) != b(&want);
            let mut by_score = chosen.clone();
            by_score.sort_by(|&a, &c| logits[t * E + c].total_cmp(&logits[t * E + a]));
            score_order_differs |= b(&sum(&by_score)) != b(&want);
        }
        assert!(other_order_differs, "{routing:?}: no row tells the orders apart; the test would prove nothing");
        assert!(score_order_differs, "{routing:?}: score order never differs from id order here");
    }
}
