//! PCG32, uniforms, child seeds and streams against pcg32.md and the Python reference.

use serde_json::Value;
use tl_sampling::{child_seed, stream, Pcg32, PURPOSE_SAMPLE};

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
