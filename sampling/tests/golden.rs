//! The sampler against the independent Python reference (scripts/reference/), bit for bit.

use serde_json::Value;
use tl_core::Sampler;
use tl_sampling::{choice_stream, sample, stream, Pcg32, SamplingParams, SpecSampler, PURPOSE_SAMPLE};

fn hex(v: &Value) -> u64 {
    let s = v.as_str().expect("a hex string");
    u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("valid hex")
}

fn params(p: &Value) -> SamplingParams {
    let f = |k: &str| p[k].as_f64().unwrap_or_else(|| panic!("param {k}"));
    SamplingParams {
        temperature: f("temperature"),
        top_k: p["top_k"].as_u64().unwrap() as usize,
        top_p: f("top_p"),
        min_p: f("min_p"),
        repetition_penalty: f("repetition_penalty"),
        presence_penalty: f("presence_penalty"),
        frequency_penalty: f("frequency_penalty"),
    }
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// The script's logits recipe for step `t` (see make_sampler_golden.py's docstring).
fn gen_row(g: &Value, t: u64) -> Vec<f32> {
    let u = |k: &str| g[k].as_u64().unwrap();
    let (bits, frac, mask_every, mask_offset) = (u("bits") as u32, u("frac") as i32, u("mask_every"), u("mask_offset"));
    let mut rng = Pcg32::new(u("seed"), t);
    (0..u("vocab"))
        .map(|i| {
            let v = (rng.next_u32() >> (32 - bits)) as i64 - (1i64 << (bits - 1));
            if mask_every > 0 && i % mask_every == mask_offset {
                f32::NEG_INFINITY
            } else {
                (v as f64 * 2f64.powi(-frac)) as f32
            }
        })
        .collect()
}

fn row(case: &Value, t: usize) -> Vec<f32> {
    if let Some(rows) = case["rows"].as_array() {
        let r = rows[t % rows.len()].as_array().unwrap();
        r.iter().map(|x| f32::from_bits(hex(x) as u32)).collect()
    } else {
        gen_row(&case["gen"], t as u64)
    }
}

#[test]
fn sampler_matches_golden() {
    let doc: Value = serde_json::from_str(include_str!("data/sampler_golden.json")).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 12);
    // One registered-style sampler reused across every case and vocabulary size.
    let mut reused = SpecSampler::new();
    let mut vocabs = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let p = params(&case["params"]);
        let prompt = ids(&case["prompt"]);
        let mut output = ids(&case["output_prefix"]);
        let seed = case["seed"].as_u64().unwrap();
        // Choice c of an n > 1 request when the case names one, else the single stream.
        let mut rng = match case["choice"].as_u64() {
            Some(c) => choice_stream(seed, u32::try_from(c).unwrap()),
            None => stream(seed, PURPOSE_SAMPLE),
        };
        let mut rng2 = rng.clone();
        let tokens = case["tokens"].as_array().unwrap();
        assert!(tokens.len() >= 12, "{name}");
        for (t, tok) in tokens.iter().enumerate() {
            let logits = row(case, t);
            if t == 0 {
                vocabs.push(logits.len());
            }
            let (id, lp) = sample(&logits, &p, &prompt, &output, &mut rng).unwrap();
            let want_id = tok["id"].as_u64().unwrap() as u32;
            let want_lp = hex(&tok["logprob"]);
            assert_eq!(id, want_id, "{name} token {t}");
            assert_eq!(lp.to_bits(), want_lp, "{name} token {t}: logprob {lp} vs {}", f64::from_bits(want_lp));
            let again = Sampler::sample(&mut reused, &logits, &p, &prompt, &output, &mut rng2).unwrap();
            assert_eq!((again.0, again.1.to_bits()), (id, lp.to_bits()), "{name} token {t}, reused sampler");
            output.push(id);
        }
        assert_eq!(rng, rng2, "{name}: both paths drew the same numbers");
    }
    assert_eq!(vocabs.iter().min(), Some(&4));
    assert_eq!(vocabs.iter().max(), Some(&49152));
    // The cases that pin step 10's fallback and the choice streams are there.
    let names: Vec<&str> = cases.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for want in ["fallback_skips_masked_tail", "fallback_skips_underflowed_tail", "hand_example_choice_1"] {
        assert!(names.contains(&want), "{want} missing from the golden file");
    }
    assert!(cases.iter().filter(|c| c["choice"].as_u64().is_some_and(|c| c > 0)).count() >= 3);
}
