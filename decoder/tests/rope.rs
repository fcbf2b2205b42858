//! RoPE inverse frequencies equal transformers' bit for bit: the default ones and Llama 3's
//! scaled ones (`_compute_llama3_parameters`), golden bits from
//! scripts/fixtures/llama3_rope.py (transformers 5.23 in the fixtures venv).

use serde_json::Value;
use tl_decoder::{inv_freq_default, inv_freq_llama3, Llama3Scaling};

struct Case {
    name: String,
    theta: f32,
    d: usize,
    s: Llama3Scaling,
    want: Vec<u32>,
    default: Vec<u32>,
}

fn cases() -> Vec<Case> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/fixtures/llama3_rope.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("golden file")).expect("json");
    let f = |c: &Value, k: &str| c[k].as_f64().unwrap_or_else(|| panic!("{k}"));
    let u32s = |v: &Value| v.as_array().expect("bits").iter().map(|b| b.as_i64().expect("bit") as u32).collect();
    doc["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| Case {
            name: c["name"].as_str().expect("name").into(),
            theta: f(c, "rope_theta") as f32,
            d: c["head_dim"].as_u64().expect("head_dim") as usize,
            s: Llama3Scaling {
                factor: f(c, "factor"),
                low_freq_factor: f(c, "low_freq_factor"),
                high_freq_factor: f(c, "high_freq_factor"),
                original_max_position_embeddings: f(c, "original_max_position_embeddings"),
            },
            want: u32s(&c["inv_freq_bits"]),
            default: u32s(&c["default_bits"]),
        })
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn llama3_inverse_frequencies_equal_transformers_bit_for_bit() {
    let cases = cases();
    assert!(cases.len() >= 5);
    for c in &cases {
        let got = inv_freq_llama3(c.theta, c.d, &c.s);
        assert_eq!(bits(&got), c.want, "{}", c.name);
        // Scaling changes the low frequencies and keeps the high ones.
        assert_ne!(c.want, c.default, "{}: scaling changed nothing", c.name);
        assert_eq!(c.want[0], c.default[0], "{}: the highest frequency is kept", c.name);
    }
}

#[test]
fn default_inverse_frequencies_equal_transformers_bit_for_bit() {
    for c in &cases() {
        assert_eq!(bits(&inv_freq_default(c.theta, c.d)), c.default, "{}", c.name);
    }
}

/// The negative control: writing transformers' `old / wavelen` and `2 pi / inv_freq` as
/// true divisions (not torch's `reciprocal() * number`) changes some bits in the odd-factor
/// cases, so the test above would catch that mistake.
#[test]
#[allow(clippy::neg_cmp_op_on_partial_ord)] // transformers' `~(a < b)`, kept as written
fn true_division_is_caught() {
    let naive = |theta: f32, d: usize, s: &Llama3Scaling| -> Vec<f32> {
        let old = s.original_max_position_embeddings;
        let (lw, hw) = ((old / s.low_freq_factor) as f32, (old / s.high_freq_factor) as f32);
        let factor = s.factor as f32;
        let (low, span) = (s.low_freq_factor as f32, (s.high_freq_factor - s.low_freq_factor) as f32);
        inv_freq_default(theta, d)
            .into_iter()
            .map(|f| {
                let wavelen = (2.0 * std::f64::consts::PI) as f32 / f;
                let scaled = if wavelen > lw { f / factor } else { f };
                let smooth = (old as f32 / wavelen - low) / span;
                if !(wavelen < hw) && !(wavelen > lw) {
                    (1.0 - smooth) * scaled / factor + smooth * scaled
                } else {
                    scaled
                }
            })
            .collect()
    };
    let differ: Vec<String> =
        cases().iter().filter(|c| bits(&naive(c.theta, c.d, &c.s)) != c.want).map(|c| c.name.clone()).collect();
    eprintln!("true division differs from transformers in: {differ:?}");
    assert!(differ.iter().any(|n| n.starts_with("odd-factor")), "no case catches a true division");
}
