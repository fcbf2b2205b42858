//! Step 3a of sampling.md: a constraint's allowed set and `logit_bias`. The draw count does
//! not change (one uniform per sampled token, none when greedy), disallowed ids are never
//! drawn and report logprob -inf, and a constraint that leaves nothing is an error.

use tl_core::SampleError;
use tl_sampling::{sample, sample_constrained, stream, Constraint, SamplingParams, SpecSampler, PURPOSE_SAMPLE};

fn bits(v: usize, allowed: &[u32]) -> Vec<u32> {
    let mut w = vec![0u32; v.div_ceil(32)];
    for &i in allowed {
        w[i as usize / 32] |= 1 << (i % 32);
    }
    w
}

fn row(v: usize) -> Vec<f32> {
    (0..v).map(|i| ((i * 37) % 101) as f32 / 13.0 - 3.0).collect()
}

#[test]
fn a_constraint_takes_exactly_the_draws_of_an_unconstrained_step() {
    let logits = row(100);
    let allowed = bits(100, &[3, 40, 41, 99]);
    let bias = [(40u32, 1.5), (41, -100.0)];
    let c = Constraint { allowed: Some(&allowed), bias: &bias };
    for p in [
        SamplingParams::default(),
        SamplingParams { top_k: 2, top_p: 0.5, min_p: 0.3, temperature: 0.6, ..Default::default() },
    ] {
        let start = stream(9, PURPOSE_SAMPLE);
        let mut plain = start.clone();
        sample(&logits, &p, &[], &[], &mut plain).unwrap();
        let mut constrained = start.clone();
        sample_constrained(&logits, &p, &[], &[], &c, &mut constrained).unwrap();
        assert_eq!(constrained, plain, "{p:?}: one uniform either way");
    }
    let start = stream(9, PURPOSE_SAMPLE);
    let mut greedy = start.clone();
    let (id, _) = sample_constrained(&logits, &SamplingParams::greedy(), &[], &[], &c, &mut greedy).unwrap();
    assert_eq!(greedy, start, "greedy takes no draw, constrained or not");
    assert!([3, 40, 99].contains(&id), "{id}");
}

#[test]
fn disallowed_and_banned_ids_are_never_drawn_and_have_logprob_minus_inf() {
    let v = 70;
    let logits = row(v);
    let allowed = bits(v, &[0, 1, 2, 33, 65]);
    let bias = [(2u32, -100.0), (65, 100.0)];
    let c = Constraint { allowed: Some(&allowed), bias: &bias };
    let mut sampler = SpecSampler::new();
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..300 {
        let p = SamplingParams { temperature: 3.0, ..Default::default() };
        let (id, lp) =
            sampler.sample_constrained(&logits, &p, &[], &[], &c, &mut stream(seed, PURPOSE_SAMPLE)).unwrap();
        seen.insert(id);
        assert!(lp.is_finite());
        let top = sampler.top_logprobs(v);
        for &(i, l) in &top {
            let live = [0, 1, 33, 65].contains(&i);
            assert_eq!(l.is_finite(), live, "id {i}: logprob {l}");
        }
    }
    assert!(seen.iter().all(|i| [0, 1, 33, 65].contains(i)), "{seen:?}");
    // A bias of +100 on id 65 makes it nearly certain; the others still appear at T = 3.
    assert!(seen.contains(&65));
    // The logprob is the log-softmax over the allowed ids: the four probabilities sum to 1.
    sampler.sample_constrained(&logits, &SamplingParams::greedy(), &[], &[], &c, &mut stream(0, 4)).unwrap();
    let total: f64 = sampler.top_logprobs(4).iter().map(|&(_, l)| l.exp()).sum();
    assert!((total - 1.0).abs() < 1e-12, "{total}");
}

#[test]
fn a_bias_shifts_the_logit_before_the_logprob() {
    // Two ids with logits 0 and 0; +ln 3 on id 1 makes it 3 times as likely: logprob ln(3/4).
    let logits = [0.0f32, 0.0];
    let bias = [(1u32, 3f64.ln())];
    let c = Constraint { allowed: None, bias: &bias };
    let (id, lp) = sample_constrained(&logits, &SamplingParams::greedy(), &[], &[], &c, &mut stream(0, 4)).unwrap();
    assert_eq!(id, 1);
    assert!((lp - 0.75f64.ln()).abs() < 1e-15, "{lp}");
}

#[test]
fn a_constraint_that_leaves_nothing_is_an_error() {
    let p = SamplingParams::default();
    let logits = [0.0f32, f32::NEG_INFINITY, 1.0];
    let run = |c: &Constraint| sample_constrained(&logits, &p, &[], &[], c, &mut stream(0, 4));
    // Only id 1 allowed, and the model gave it -inf.
    let only_1 = bits(3, &[1]);
    assert_eq!(run(&Constraint { allowed: Some(&only_1), bias: &[] }), Err(SampleError::NothingAllowed));
    // An empty mask, and a mask shorter than the row (ids past it are not allowed).
    assert_eq!(run(&Constraint { allowed: Some(&[]), bias: &[] }), Err(SampleError::NothingAllowed));
    let ban_all = [(0u32, -100.0), (2, -100.0)];
    assert_eq!(run(&Constraint { allowed: None, bias: &ban_all }), Err(SampleError::NothingAllowed));
    // Bad biases name the field.
    for bias in [[(3u32, 1.0)], [(0, 100.5)], [(0, f64::NAN)]] {
        match run(&Constraint { allowed: None, bias: &bias }) {
            Err(SampleError::BadParam { field, .. }) => assert!(field.starts_with("logit_bias"), "{field}"),
            other => panic!("{bias:?}: {other:?}"),
        }
    }
}
