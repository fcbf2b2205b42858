//! PCG32, uniforms, child seeds and streams against pcg32.md and the Python reference.

use serde_json::Value;
use tl_sampling::{child_seed, choice_stream, stream, Pcg32, PURPOSE_SAMPLE};

fn golden() -> Value {
    let text = include_str!("data/sampler_golden.json");
    serde_json::from_str(text).expect("sampler_golden.json parses")
}

fn hex(v: &Value) -> u64 {
    let s = v.as_str().expect("a hex string");
    u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("valid hex")
}

#[test]
fn pcg32_reference_vectors() {
    // pcg32.md: the pcg32-demo line and the stream vectors.
    let mut g = Pcg32::new(42, 54);
    let first: Vec<u32> = (0..6).map(|_| g.next_u32()).collect();
    assert_eq!(first, [0xa15c02b7, 0x7b47f409, 0xba1d3330, 0x83d2f293, 0xbfa4784b, 0xcbed606e]);
    assert_eq!(PURPOSE_SAMPLE, 4);
    assert_eq!(child_seed(0, 4), 0xF88BB8A8724C81EC);
    assert_eq!(stream(0, PURPOSE_SAMPLE).uniform_f64().to_bits(), 0.8020949661137535f64.to_bits());

    // The Python reference's vectors.
    let doc = golden();
    let p = &doc["pcg32"];
    let mut g = Pcg32::new(42, 54);
    for want in p["demo_42_54_next_u32"].as_array().unwrap() {
        assert_eq!(g.next_u32() as u64, hex(want));
    }
    let mut g = Pcg32::new(42, 54);
    for want in p["demo_42_54_uniform_f64"].as_array().unwrap() {
        assert_eq!(g.uniform_f64().to_bits(), hex(want));
    }
    let streams = p["streams"].as_array().unwrap();
    assert!(streams.len() >= 5);
    for s in streams {
        let (seed, purpose) = (s["seed"].as_u64().unwrap(), s["purpose"].as_u64().unwrap());
        assert_eq!(child_seed(seed, purpose), hex(&s["child_seed"]), "child_seed({seed}, {purpose})");
        let mut g = stream(seed, purpose);
        assert_eq!(g, Pcg32::new(child_seed(seed, purpose), purpose));
        for want in s["next_u32"].as_array().unwrap() {
            assert_eq!(g.next_u32() as u64, hex(want), "stream({seed}, {purpose})");
        }
        for want in s["then_uniform_f64"].as_array().unwrap() {
            let u = g.uniform_f64();
            assert!((0.0..1.0).contains(&u));
            assert_eq!(u.to_bits(), hex(want), "stream({seed}, {purpose}) uniform");
        }
    }
}

#[test]
fn pcg32_implements_the_core_rng() {
    let mut a = stream(9, PURPOSE_SAMPLE);
    let mut b = a.clone();
    let r: &mut dyn tl_core::Rng = &mut b;
    assert_eq!(r.next_u32(), a.next_u32());
    assert_eq!(r.uniform_f64().to_bits(), a.uniform_f64().to_bits());
    assert_eq!(a, b);
}

#[test]
fn choice_streams_follow_pcg32_md() {
    // pcg32.md's vectors: the first uniform of choices 0, 1 and 2 of seed 0.
    let first = |c: u32| choice_stream(0, c).uniform_f64().to_bits();
    assert_eq!(first(0), 0.8020949661137535f64.to_bits());
    assert_eq!(first(1), 0.9068004087186612f64.to_bits());
    assert_eq!(first(2), 0.581938172211182f64.to_bits());
    for seed in [0u64, 1, 42, 0x0123_4567_89AB_CDEF, u64::MAX] {
        // Choice 0 is exactly the single-choice stream.
        assert_eq!(choice_stream(seed, 0), stream(seed, PURPOSE_SAMPLE), "seed {seed}");
        for c in [1u32, 2, 3, 1000, u32::MAX] {
            // Choice c: the sampler's child seed, sequence id 4 + c * 2^32.
            let want = Pcg32::new(child_seed(seed, PURPOSE_SAMPLE), PURPOSE_SAMPLE + ((c as u64) << 32));
            assert_eq!(choice_stream(seed, c), want, "seed {seed} choice {c}");
            // Never the stream of another purpose under the same seed.
            for purpose in 0..16 {
                assert_ne!(choice_stream(seed, c), stream(seed, purpose), "seed {seed} choice {c}");
            }
        }
        // The first 64 choices draw different numbers.
        let mut firsts: Vec<u64> = (0..64).map(|c| choice_stream(seed, c).uniform_f64().to_bits()).collect();
        firsts.sort_unstable();
        firsts.dedup();
        assert_eq!(firsts.len(), 64, "seed {seed}");
    }
    // PCG drops a sequence id's top bit (inc = (seq << 1) | 1): choices c and c + 2^31 share
    // a generator, as pcg32.md's formula implies (documented on choice_stream).
    let mut a = choice_stream(5, 3);
    let mut b = choice_stream(5, 3 + (1 << 31));
    assert_eq!((a.next_u32(), a.next_u32()), (b.next_u32(), b.next_u32()));
}

#[test]
fn choice_streams_match_the_python_reference() {
    let doc = golden();
    let choices = doc["pcg32"]["choices"].as_array().unwrap();
    assert!(choices.len() >= 20);
    for s in choices {
        let (seed, c) = (s["seed"].as_u64().unwrap(), s["choice"].as_u64().unwrap());
        let mut g = choice_stream(seed, u32::try_from(c).unwrap());
        for want in s["next_u32"].as_array().unwrap() {
            assert_eq!(g.next_u32() as u64, hex(want), "choice {c} of seed {seed}");
        }
        for want in s["then_uniform_f64"].as_array().unwrap() {
            assert_eq!(g.uniform_f64().to_bits(), hex(want), "choice {c} of seed {seed} uniform");
        }
    }
}
