//! The sampler against the independent Python reference (scripts/reference/), bit for bit.

use serde_json::Value;
use tl_core::Sampler;
use tl_sampling::{
    choice_stream, sample, sample_constrained, stream, Constraint, Pcg32, SamplingParams, SpecSampler, PURPOSE_SAMPLE,
};

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

/// The case's step-3a allowed set at step `t` as a bitset (make_sampler_golden.py's
/// `allowed_at`: ids with (i + t) % mod < keep), or None.
fn allowed_at(case: &Value, v: usize, t: usize) -> Option<Vec<u32>> {
    let a = case.get("allow")?;
    let (m, keep) = (a["mod"].as_u64().unwrap() as usize, a["keep"].as_u64().unwrap() as usize);
    let mut words = vec![0u32; v.div_ceil(32)];
    for i in (0..v).filter(|i| (i + t) % m < keep) {
        words[i / 32] |= 1 << (i % 32);
    }
    Some(words)
}

fn bias(case: &Value) -> Vec<(u32, f64)> {
    let Some(b) = case.get("bias").and_then(Value::as_array) else { return Vec::new() };
    b.iter().map(|e| (e[0].as_u64().unwrap() as u32, e[1].as_f64().unwrap())).collect()
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
        let bias = bias(case);
        assert!(tokens.len() >= 12, "{name}");
        for (t, tok) in tokens.iter().enumerate() {
            let logits = row(case, t);
            if t == 0 {
                vocabs.push(logits.len());
            }
            let allowed = allowed_at(case, logits.len(), t);
            let constrained = allowed.is_some() || !bias.is_empty();
            let c = Constraint { allowed: allowed.as_deref(), bias: &bias };
            let (id, lp) = if constrained {
                sample_constrained(&logits, &p, &prompt, &output, &c, &mut rng).unwrap()
            } else {
                sample(&logits, &p, &prompt, &output, &mut rng).unwrap()
            };
            let want_id = tok["id"].as_u64().unwrap() as u32;
            let want_lp = hex(&tok["logprob"]);
            assert_eq!(id, want_id, "{name} token {t}");
            assert_eq!(lp.to_bits(), want_lp, "{name} token {t}: logprob {lp} vs {}", f64::from_bits(want_lp));
            let again = if constrained {
                reused.sample_constrained(&logits, &p, &prompt, &output, &c, &mut rng2).unwrap()
            } else {
                Sampler::sample(&mut reused, &logits, &p, &prompt, &output, &mut rng2).unwrap()
            };
            assert_eq!((again.0, again.1.to_bits()), (id, lp.to_bits()), "{name} token {t}, reused sampler");
            // The reported top logprobs come from the same step-3a row: the chosen id's
            // entry has the sampled bits.
            let top = reused.top_logprobs(logits.len());
            let mine = top.iter().find(|e| e.0 == id).expect("the chosen id is among the logprobs");
            assert_eq!(mine.1.to_bits(), lp.to_bits(), "{name} token {t}: top_logprobs entry");
            output.push(id);
        }
        assert_eq!(rng, rng2, "{name}: both paths drew the same numbers");
    }
    assert_eq!(vocabs.iter().min(), Some(&4));
    assert_eq!(vocabs.iter().max(), Some(&49152));
    // The cases that pin step 10's fallback and the choice streams are there.
    let names: Vec<&str> = cases.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for want in [
        "fallback_skips_masked_tail",
        "fallback_skips_underflowed_tail",
        "hand_example_choice_1",
        "constraint_sampled",
        "logit_bias_add_and_ban",
        "constraint_bias_penalties_filters",
    ] {
        assert!(names.contains(&want), "{want} missing from the golden file");
    }
    assert!(cases.iter().filter(|c| c["choice"].as_u64().is_some_and(|c| c > 0)).count() >= 3);
}
