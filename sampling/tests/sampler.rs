//! The sampler's properties: sampling.md's worked example, draw accounting, the nucleus
//! boundary, penalty semantics, the distribution, bad input and the registry.

use tl_core::SampleError;
use tl_sampling::{choice_stream, sample, stream, Pcg32, SamplingParams, SpecSampler, PURPOSE_SAMPLE};

/// sampling.md step 4 for a row of (already penalised) logits.
fn logprob(l: &[f64], id: usize) -> f64 {
    let m = l.iter().copied().fold(f64::NEG_INFINITY, |a, b| if b > a { b } else { a });
    let mut z = 0.0;
    for &x in l {
        z += (x - m).exp();
    }
    (l[id] - m) - z.ln()
}

fn greedy_with(logits: &[f32], p: SamplingParams, prompt: &[u32], output: &[u32]) -> (u32, f64) {
    let p = SamplingParams { temperature: 0.0, ..p };
    sample(logits, &p, prompt, output, &mut stream(0, PURPOSE_SAMPLE)).unwrap()
}

#[test]
fn hand_example_sampling() {
    let logits = [1.0f32, 3.0, 2.0, 3.0, -1.0];
    let p = SamplingParams { top_k: 3, top_p: 0.8, ..Default::default() };
    let mut rng = stream(0, PURPOSE_SAMPLE);
    let (id, lp) = sample(&logits, &p, &[], &[], &mut rng).unwrap();
    assert_eq!(id, 3);
    assert_eq!(lp.to_bits(), (-0.9248660042217248f64).to_bits());
    // The draw was u = 0.8020949661137535: kept {1, 3} at 0.5 each puts u past id 1.
    let mut check = stream(0, PURPOSE_SAMPLE);
    assert_eq!(check.uniform_f64(), 0.8020949661137535);
    assert_eq!(rng, check);
    // With top_k 1 only id 1 is left: the (logit desc, id asc) order breaks the tie by id.
    let p1 = SamplingParams { top_k: 1, ..Default::default() };
    assert_eq!(sample(&logits, &p1, &[], &[], &mut stream(0, PURPOSE_SAMPLE)).unwrap().0, 1);
    // Temperature never changes the logprob.
    let hot = SamplingParams { temperature: 3.0, ..p };
    let (_, lp_hot) = sample(&logits, &hot, &[], &[], &mut stream(0, PURPOSE_SAMPLE)).unwrap();
    assert_eq!(lp_hot.to_bits(), lp.to_bits());
}

#[test]
fn greedy_takes_no_draw_and_sampling_takes_one() {
    let logits = [0.5f32, 2.0, -1.0, 2.0, f32::NEG_INFINITY];
    let start = stream(17, PURPOSE_SAMPLE);
    let mut rng = start.clone();
    let (id, lp) = sample(&logits, &SamplingParams::greedy(), &[], &[], &mut rng).unwrap();
    assert_eq!(id, 1, "ties go to the lowest id");
    assert_eq!(lp.to_bits(), logprob(&[0.5, 2.0, -1.0, 2.0, f64::NEG_INFINITY], 1).to_bits());
    assert_eq!(rng, start, "greedy must not touch the generator");

    let mut one_uniform = start.clone();
    one_uniform.uniform_f64();
    for p in [
        SamplingParams::default(),
        SamplingParams { top_k: 1, ..Default::default() },
        SamplingParams { top_p: 0.3, min_p: 0.9, temperature: 0.2, ..Default::default() },
    ] {
        let mut rng = start.clone();
        sample(&logits, &p, &[], &[], &mut rng).unwrap();
        assert_eq!(rng, one_uniform, "{p:?} must take exactly one uniform_f64");
    }
}

#[test]
fn top_p_keeps_the_crossing_token() {
    // Four equal logits: each probability is exactly 0.25, so 0.5 is reached exactly at the
    // second candidate (id 1), which must be kept; id 2 must never be drawn.
    let logits = [0.0f32; 4];
    let mut seen = [0usize; 4];
    for seed in 0..400 {
        let p = SamplingParams { top_p: 0.5, ..Default::default() };
        let (id, _) = sample(&logits, &p, &[], &[], &mut stream(seed, PURPOSE_SAMPLE)).unwrap();
        seen[id as usize] += 1;
    }
    assert!(seen[0] > 0 && seen[1] > 0, "both kept ids are drawn: {seen:?}");
    assert_eq!(seen[2] + seen[3], 0, "only the two ids up to the crossing are kept: {seen:?}");
    // 0.75 is reached exactly at the third.
    let mut seen = [0usize; 4];
    for seed in 0..400 {
        let p = SamplingParams { top_p: 0.75, ..Default::default() };
        seen[sample(&logits, &p, &[], &[], &mut stream(seed, PURPOSE_SAMPLE)).unwrap().0 as usize] += 1;
    }
    assert!(seen[..3].iter().all(|&c| c > 0) && seen[3] == 0, "{seen:?}");
    // A top_p just above a candidate's cumulative mass keeps the next one as well.
    let p = SamplingParams { top_p: 0.5000001, ..Default::default() };
    let hits: usize =
        (0..400).filter(|&s| sample(&logits, &p, &[], &[], &mut stream(s, PURPOSE_SAMPLE)).unwrap().0 == 2).count();
    assert!(hits > 0);
}

#[test]
fn penalties_follow_hf_and_openai_semantics() {
    let neutral = SamplingParams::default();
    // Repetition divides positive logits and multiplies negative ones (HF).
    let logits = [-1.0f32, -1.5];
    let p = SamplingParams { repetition_penalty: 2.0, ..neutral };
    let (id, lp) = greedy_with(&logits, p, &[], &[0]);
    assert_eq!(id, 1, "a repeated negative logit must become less likely");
    assert_eq!(lp.to_bits(), logprob(&[-2.0, -1.5], 1).to_bits());
    let (id, lp) = greedy_with(&[3.0, 2.0], p, &[0], &[]);
    assert_eq!(id, 1, "prompt ids are penalised too");
    assert_eq!(lp.to_bits(), logprob(&[1.5, 2.0], 1).to_bits());
    // Once per distinct id, whatever its count.
    let (id, lp) = greedy_with(&[4.0, 1.5], p, &[0, 0, 0], &[0, 0]);
    assert_eq!(id, 0);
    assert_eq!(lp.to_bits(), logprob(&[2.0, 1.5], 0).to_bits());
    // Presence and frequency: output only, never the prompt.
    let pf = SamplingParams { presence_penalty: 0.5, frequency_penalty: 0.25, ..neutral };
    let (id, lp) = greedy_with(&[1.0, 0.875], pf, &[0, 0], &[]);
    assert_eq!(id, 0, "the prompt does not count for presence/frequency");
    assert_eq!(lp.to_bits(), logprob(&[1.0, 0.875], 0).to_bits());
    // l -= a_f * count + a_p, presence once per distinct id.
    let (id, lp) = greedy_with(&[1.0, 2.0, 0.0], pf, &[1], &[1, 1, 2, 1]);
    let want = [1.0, 2.0 - (0.25 * 3.0 + 0.5), 0.0 - (0.25 + 0.5)];
    assert_eq!(id, 0);
    assert_eq!(lp.to_bits(), logprob(&want, 0).to_bits());
    // All three at once, in the spec's order (repetition first).
    let all = SamplingParams { repetition_penalty: 1.25, ..pf };
    let (id, lp) = greedy_with(&[1.0, 2.5, -0.5, 0.75], all, &[3], &[1, 2, 2]);
    let want = [1.0, 2.5 / 1.25 - (0.25 + 0.5), -0.5 * 1.25 - (0.5 + 0.5), 0.75 / 1.25];
    assert_eq!(id, 1);
    assert_eq!(lp.to_bits(), logprob(&want, 1).to_bits());
}

#[test]
fn seeded_sampling_matches_the_distribution() {
    let probs = [0.4f64, 0.3, 0.2, 0.1];
    let logits: Vec<f32> = probs.iter().map(|p| p.ln() as f32).collect();
    let draw = |seed: u64| {
        let mut rng = stream(seed, PURPOSE_SAMPLE);
        let mut s = SpecSampler::new();
        let p = SamplingParams::default();
        (0..4000).map(|_| s.sample_with(&logits, &p, &[], &[], &mut rng).unwrap().0).collect::<Vec<u32>>()
    };
    let ids = draw(2024);
    let mut counts = [0f64; 4];
    for &i in &ids {
        counts[i as usize] += 1.0;
    }
    let chi2: f64 = counts.iter().zip(probs).map(|(c, p)| (c - 4000.0 * p).powi(2) / (4000.0 * p)).sum();
    assert!(chi2 < 16.27, "chi-square {chi2} for counts {counts:?}");
    assert_eq!(draw(2024), ids, "the same seed repeats the same ids");
    assert_ne!(draw(2025), ids, "another seed gives other ids");
}

#[test]
fn bad_input_is_an_error() {
    let ok = [0.0f32, 1.0];
    let p = SamplingParams::default();
    let run = |l: &[f32], p: &SamplingParams, prompt: &[u32], output: &[u32]| {
        sample(l, p, prompt, output, &mut stream(0, PURPOSE_SAMPLE))
    };
    assert_eq!(run(&[], &p, &[], &[]), Err(SampleError::EmptyLogits));
    assert!(matches!(run(&[0.0, f32::NAN], &p, &[], &[]), Err(SampleError::BadLogit { id: 1, .. })));
    assert!(matches!(run(&[f32::INFINITY, 0.0], &p, &[], &[]), Err(SampleError::BadLogit { id: 0, .. })));
    assert_eq!(run(&[f32::NEG_INFINITY; 3], &p, &[], &[]), Err(SampleError::AllMasked));
    assert_eq!(run(&ok, &p, &[2], &[]), Err(SampleError::BadHistoryId { which: "prompt", id: 2, vocab: 2 }));
    assert_eq!(run(&ok, &p, &[1], &[0, 7]), Err(SampleError::BadHistoryId { which: "output", id: 7, vocab: 2 }));
    let field = |r: Result<(u32, f64), SampleError>| match r {
        Err(SampleError::BadParam { field, .. }) => field,
        other => panic!("expected BadParam, got {other:?}"),
    };
    let with = |f: fn(&mut SamplingParams)| {
        let mut q = SamplingParams::default();
        f(&mut q);
        field(run(&ok, &q, &[], &[]))
    };
    assert_eq!(with(|q| q.temperature = -0.1), "temperature");
    assert_eq!(with(|q| q.temperature = f64::NAN), "temperature");
    assert_eq!(with(|q| q.temperature = f64::INFINITY), "temperature");
    assert_eq!(with(|q| q.top_p = 0.0), "top_p");
    assert_eq!(with(|q| q.top_p = 1.5), "top_p");
    assert_eq!(with(|q| q.top_p = f64::NAN), "top_p");
    assert_eq!(with(|q| q.min_p = -0.1), "min_p");
    assert_eq!(with(|q| q.min_p = 1.01), "min_p");
    assert_eq!(with(|q| q.repetition_penalty = 0.0), "repetition_penalty");
    assert_eq!(with(|q| q.repetition_penalty = -1.0), "repetition_penalty");
    assert_eq!(with(|q| q.repetition_penalty = f64::INFINITY), "repetition_penalty");
    assert_eq!(with(|q| q.presence_penalty = f64::NAN), "presence_penalty");
    assert_eq!(with(|q| q.frequency_penalty = f64::NEG_INFINITY), "frequency_penalty");
    // Messages name the offender.
    let e = run(&[0.0, f32::NAN], &p, &[], &[]).unwrap_err().to_string();
    assert!(e.contains("logit 1"), "{e}");
    // A -inf logit is allowed (masked) and never drawn when others remain.
    for seed in 0..50 {
        let (id, _) = sample(&[f32::NEG_INFINITY, 0.0, 0.0], &p, &[], &[], &mut stream(seed, 4)).unwrap();
        assert_ne!(id, 0);
    }
}

#[test]
fn registry_lists_spec_and_it_samples_like_sample() {
    let names = tl_core::registry::sampler_names().unwrap();
    assert!(names.contains(&"spec"), "{names:?}");
    let mut s = (tl_core::registry::sampler("spec").unwrap().make)();
    let logits: Vec<f32> = (0..300).map(|i| ((i * 37) % 101) as f32 / 17.0 - 3.0).collect();
    let p = SamplingParams { top_k: 40, top_p: 0.9, min_p: 0.02, temperature: 0.8, ..Default::default() };
    let mut a: Pcg32 = stream(5, PURPOSE_SAMPLE);
    let mut b = a.clone();
    let mut out = vec![3u32];
    for _ in 0..20 {
        let want = sample(&logits, &p, &[1, 2], &out, &mut a).unwrap();
        let got = s.sample(&logits, &p, &[1, 2], &out, &mut b).unwrap();
        assert_eq!((got.0, got.1.to_bits()), (want.0, want.1.to_bits()));
        out.push(got.0);
    }
    assert_eq!(a, b);
}

/// The largest uniform PCG32 can give: 1 - 2^-53.
const U_MAX: f64 = 1.0 - 1.0 / 9007199254740992.0;
/// Seeds whose first `uniform_f64()` of `stream(seed, PURPOSE_SAMPLE)` is `U_MAX` (found by
/// inverting mix64 and the PCG step; also used by scripts/reference/make_sampler_golden.py).
const SEED_U_MAX_A: u64 = 0xB412_7802_403D_9BBF;
const SEED_U_MAX_B: u64 = 0xAAD1_7B52_55E9_0A2E;

/// A generator whose every uniform is `u`, to reach step 10's fallback on purpose.
struct FixedUniform(f64);

impl tl_core::Rng for FixedUniform {
    fn next_u32(&mut self) -> u32 {
        unreachable!("the sampler draws uniforms only")
    }
    fn uniform_f64(&mut self) -> f64 {
        self.0
    }
}

fn sample_at(logits: &[f32], p: &SamplingParams, u: f64) -> (u32, f64) {
    SpecSampler::new().sample_with(logits, p, &[], &[], &mut FixedUniform(u)).unwrap()
}

#[test]
fn fallback_never_returns_a_masked_token() {
    // Seven equal logits: step 10's c ends at 1 - 2^-52 (rounding), below u = 1 - 2^-53, so the
    // loop ends without returning. No filter is on, so K holds the masked id 7 as its last id;
    // sampling.md step 10 returns the last id of K whose e(i) > 0: id 6, never 7.
    let mut logits = vec![0.0f32; 7];
    logits.push(f32::NEG_INFINITY);
    let mut c = 0.0f64;
    for _ in 0..7 {
        c += 1.0 / 7.0;
    }
    assert!(c < U_MAX, "the row must leave c below the largest uniform: c = {c:e}");
    let lp_6 = logprob(&[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, f64::NEG_INFINITY], 6);
    assert!(lp_6.is_finite());
    let p = SamplingParams::default();
    let (id, lp) = sample_at(&logits, &p, U_MAX);
    assert_eq!((id, lp.to_bits()), (6, lp_6.to_bits()), "the fallback returned {id} (logprob {lp})");

    // The same through a real seeded stream whose first uniform is 1 - 2^-53.
    let mut check = stream(SEED_U_MAX_A, PURPOSE_SAMPLE);
    assert_eq!(check.uniform_f64(), U_MAX);
    let (id, lp) = sample(&logits, &p, &[], &[], &mut stream(SEED_U_MAX_A, PURPOSE_SAMPLE)).unwrap();
    assert_eq!((id, lp.to_bits()), (6, lp_6.to_bits()));

    // Several masked ids at the end of K, kept by a top_k larger than the finite ids.
    let mut logits = vec![0.0f32; 7];
    logits.extend([f32::NEG_INFINITY; 3]);
    for top_k in [0, 8, 9, 10, 50] {
        let p = SamplingParams { top_k, ..Default::default() };
        assert_eq!(sample_at(&logits, &p, U_MAX).0, 6, "top_k {top_k}");
    }
    // A masked id between kept ones changes nothing: the last positive id is still the answer.
    let mut logits = vec![0.0f32; 7];
    logits.insert(3, f32::NEG_INFINITY);
    logits.push(f32::NEG_INFINITY);
    assert_eq!(sample_at(&logits, &SamplingParams::default(), U_MAX).0, 7);
    // Below c the walk decides as before: u = 0 takes the first kept id.
    assert_eq!(sample_at(&logits, &SamplingParams::default(), 0.0).0, 0);
}

#[test]
fn fallback_skips_an_underflowed_tail() {
    // [0, 1, 2]: c ends at exactly 1 - 2^-53 = u, so `u < c` never holds. Id 3 is finite but its
    // e = exp(-802) underflows to 0: the rule is e(i) > 0, so the fallback returns 2, not 3.
    let logits = [0.0f32, 1.0, 2.0, -800.0];
    let want = logprob(&[0.0, 1.0, 2.0, -800.0], 2);
    let (id, lp) = sample_at(&logits, &SamplingParams::default(), U_MAX);
    assert_eq!((id, lp.to_bits()), (2, want.to_bits()));
    let (id, lp) = sample(&logits, &SamplingParams::default(), &[], &[], &mut stream(SEED_U_MAX_B, 4)).unwrap();
    assert_eq!((id, lp.to_bits()), (2, want.to_bits()));
    // When the last kept id has e > 0 the fallback still takes the last kept id.
    assert_eq!(sample_at(&[0.0, 1.0, 2.0], &SamplingParams::default(), U_MAX).0, 2);
}

#[test]
fn a_temperature_that_sends_every_scaled_logit_to_minus_inf_is_an_error() {
    // -1 / 1e-310 is -inf: step 10 would have m = -inf and e(i) = NaN for every id, so no id
    // satisfies e(i) > 0. Refused like the +inf side, naming the temperature.
    let p = SamplingParams { temperature: 1e-310, ..Default::default() };
    for logits in [[-1.0f32, -2.0], [1.0, 2.0]] {
        match sample(&logits, &p, &[], &[], &mut stream(0, PURPOSE_SAMPLE)) {
            Err(SampleError::BadParam { field, .. }) => assert_eq!(field, "temperature"),
            other => panic!("{logits:?}: expected a temperature error, got {other:?}"),
        }
    }
}

#[test]
fn choices_of_one_request_sample_from_their_own_streams() {
    // The worked example of sampling.md with choice c of seed 0: choice 0 draws
    // u = 0.8020949661137535 (token 3); choice 1 draws 0.9068004087186612 (token 3) and
    // choice 2 draws 0.581938172211182, above 0.5 as well (token 3). Greedy never draws.
    let logits = [1.0f32, 3.0, 2.0, 3.0, -1.0];
    let p = SamplingParams { top_k: 3, top_p: 0.8, ..Default::default() };
    for c in 0..3 {
        let (id, lp) = sample(&logits, &p, &[], &[], &mut choice_stream(0, c)).unwrap();
        assert_eq!((id, lp.to_bits()), (3, (-0.9248660042217248f64).to_bits()), "choice {c}");
    }
    // With kept {0, 1, 2, 3} at 0.25 each the three uniforms land in different ids.
    let flat = [0.0f32; 4];
    let got: Vec<u32> = (0..3)
        .map(|c| sample(&flat, &SamplingParams::default(), &[], &[], &mut choice_stream(0, c)).unwrap().0)
        .collect();
    assert_eq!(got, [3, 3, 2], "u = 0.802.., 0.906.., 0.581..");
    // Each choice's tokens depend on its seed and index only: sampling the choices in
    // another order, or interleaved, gives each the same sequence.
    let logits: Vec<f32> = (0..200).map(|i| ((i * 53) % 97) as f32 / 11.0 - 4.0).collect();
    let q = SamplingParams { temperature: 0.8, top_p: 0.9, ..Default::default() };
    let run = |order: &[u32]| {
        let mut rngs: Vec<Pcg32> = (0..4).map(|c| choice_stream(123, c)).collect();
        let mut out = vec![Vec::new(); 4];
        for _ in 0..10 {
            for &c in order {
                let c = c as usize;
                let id = sample(&logits, &q, &[], &out[c], &mut rngs[c]).unwrap().0;
                out[c].push(id);
            }
        }
        out
    };
    let a = run(&[0, 1, 2, 3]);
    assert_eq!(run(&[3, 1, 0, 2]), a);
    assert_ne!(a[0], a[1], "two choices drew the same ten tokens");
    let mut single = stream(123, PURPOSE_SAMPLE);
    let mut out = Vec::new();
    for _ in 0..10 {
        out.push(sample(&logits, &q, &[], &out, &mut single).unwrap().0);
    }
    assert_eq!(out, a[0], "choice 0 is the single-choice stream");
}
