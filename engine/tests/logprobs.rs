//! `top_logprobs` computes the sampler's step-4 logprobs: the chosen token's entry has
//! the same bits as the logprob the sampler returns, penalties included.

use tl_core::{Sampler, SamplingParams};
use tl_engine::top_logprobs;
use tl_sampling::{choice_stream, SpecSampler};

#[test]
fn top_logprobs_agree_with_the_sampler_bit_for_bit() {
    let mut rng = tl_sampling::stream(5, 99);
    let mut sampler = SpecSampler::new();
    for case in 0..50u32 {
        let v = 64 + case as usize;
        let logits: Vec<f32> = (0..v).map(|_| (rng.uniform_f64() * 20.0 - 10.0) as f32).collect();
        let prompt: Vec<u32> = (0..10).map(|i| (i * 7 + case) % v as u32).collect();
        let output: Vec<u32> = (0..6).map(|i| (i * 5 + case * 3) % v as u32).collect();
        let p = SamplingParams {
            temperature: 0.7,
            repetition_penalty: 1.0 + (case % 3) as f64 * 0.2,
            presence_penalty: (case % 2) as f64 * 0.4,
            frequency_penalty: (case % 4) as f64 * 0.3,
            ..SamplingParams::default()
        };
        let (id, lp) =
            sampler.sample(&logits, &p, &prompt, &output, &mut choice_stream(case as u64, 0)).expect("sample");
        let top = top_logprobs(&logits, &p, &prompt, &output, v);
        assert_eq!(top.len(), v);
        assert!(top.windows(2).all(|w| w[0].1 > w[1].1 || (w[0].1 == w[1].1 && w[0].0 < w[1].0)));
        let mine = top.iter().find(|(i, _)| *i == id).expect("the sampled id").1;
        assert_eq!(mine.to_bits(), lp.to_bits(), "case {case}: id {id}");
        assert_eq!(top_logprobs(&logits, &p, &prompt, &output, 3), top[..3].to_vec());
    }
}
