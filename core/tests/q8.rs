//! The q8 KV quantization rule (docs/spec/kv.md, "Other element types") against numpy's
//! (scripts/fixtures/q8_kv.py wrote the golden file), bit for bit: codes and scale bits,
//! ties at .5 broken to even, zero rows, scales that underflow or are subnormal.

use serde_json::Value;
use tl_core::{quantize_q8, KvElem, KvGeometry};

fn golden() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/q8_kv.json");
    let text = std::fs::read_to_string(path).expect("q8_kv.json");
    let v: Value = serde_json::from_str(&text).expect("JSON");
    v["cases"].as_array().expect("cases").clone()
}

#[test]
fn quantize_q8_matches_numpy_bit_for_bit() {
    let cases = golden();
    assert!(cases.len() >= 20, "the golden file has {} cases", cases.len());
    let mut ties = 0;
    for c in &cases {
        let name = c["name"].as_str().expect("name");
        let x: Vec<f32> = c["x_bits"]
            .as_array()
            .expect("x_bits")
            .iter()
            .map(|b| f32::from_bits(b.as_u64().unwrap() as u32))
            .collect();
        let want: Vec<i8> = c["codes"].as_array().expect("codes").iter().map(|q| q.as_i64().unwrap() as i8).collect();
        let mut codes = vec![99i8; x.len()];
        let scale = quantize_q8(&x, &mut codes);
        assert_eq!(scale, c["scale_bits"].as_u64().unwrap() as u16, "{name}: scale bits");
        assert_eq!(codes, want, "{name}: codes");
        let s = tl_quant::f16_to_f32(scale);
        ties += x.iter().filter(|&&v| s > 0.0 && (v / s).fract().abs() == 0.5).count();
    }
    assert!(ties >= 10, "the golden file exercises only {ties} ties");
}

#[test]
fn quantized_rows_read_back_within_half_a_step() {
    for c in golden() {
        let x: Vec<f32> =
            c["x_bits"].as_array().unwrap().iter().map(|b| f32::from_bits(b.as_u64().unwrap() as u32)).collect();
        let mut codes = vec![0i8; x.len()];
        let s = tl_quant::f16_to_f32(quantize_q8(&x, &mut codes));
        let max = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        if s == 0.0 {
            // A scale below f16's smallest subnormal: the whole row reads back as zero.
            assert!(codes.iter().all(|&q| q == 0) && max / 127.0 < 6e-8, "{}", c["name"]);
            continue;
        }
        for (&v, &q) in x.iter().zip(&codes) {
            assert!((-127..=127).contains(&q));
            // Half a step, plus what the clamp cuts when rounding the scale to f16 put
            // max / s above 127 (a subnormal scale is coarse).
            let err = (f32::from(q) * s - v).abs();
            let bound = 0.5 * s * (1.0 + 1e-6) + (max - 127.0 * s).max(0.0);
            assert!(err <= bound, "{}: {v} read back as {}", c["name"], f32::from(q) * s);
        }
    }
}

#[test]
fn a_q8_pool_holds_at_most_0_56_of_the_f16_bytes_per_position() {
    // SmolLM2-135M: 30 layers, 3 KV heads, head_dim 64; the 1B shape: head_dim 64 too.
    for (name, g) in [
        ("SmolLM2-135M", KvGeometry { n_layers: 30, n_kv_heads: 3, head_dim: 64, block_tokens: 16 }),
        ("head_dim 128", KvGeometry { n_layers: 16, n_kv_heads: 8, head_dim: 128, block_tokens: 16 }),
    ] {
        let f16 = g.block_bytes_of(KvElem::F16).unwrap();
        let q8 = g.block_bytes_of(KvElem::Q8).unwrap();
        assert_eq!(f16, g.block_bytes().unwrap(), "{name}: block_bytes is the f16 size");
        let ratio = q8 as f64 / f16 as f64;
        eprintln!("{name}: q8 {q8} / f16 {f16} bytes per block = {ratio:.4}");
        // (D + 2) / (2 D): 0.5156 at D = 64.
        assert!(ratio <= 0.56, "{name}: q8 holds {ratio:.4} of the f16 bytes per position");
        assert_eq!(q8 * 2 * g.head_dim as usize, f16 * (g.head_dim as usize + 2));
    }
}
