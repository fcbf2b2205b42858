//! RoPE inverse frequencies equal transformers' bit for bit: the default ones and Llama 3's
//! scaled ones (`_compute_llama3_parameters`), golden bits from
//! scripts/fixtures/llama3_rope.py (transformers 5.23 in the fixtures venv).

use serde_json::Value;
use tl_decoder::{
    inv_freq_default, inv_freq_llama3, inv_freq_yarn, inv_freq_yarn_from, Llama3Scaling, Rope, RopeTables, YarnScaling,
};

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

/// YaRN's inverse frequencies and attention factor equal transformers'
/// `_compute_yarn_parameters` bit for bit (golden bits from scripts/fixtures/yarn_rope.py:
/// gpt-oss's, Qwen's long-context configs, and synthetic ones covering no truncation, an
/// explicit attention factor, mscale / mscale_all_dim and a factor derived from the
/// context lengths).
#[test]
fn yarn_inverse_frequencies_equal_transformers_bit_for_bit() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/fixtures/yarn_rope.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("golden file")).expect("json");
    let cases = doc["cases"].as_array().expect("cases");
    assert!(cases.len() >= 8);
    for c in cases {
        let name = c["name"].as_str().expect("name");
        let f = |k: &str| c[k].as_f64();
        let original = f("original_max_position_embeddings").expect("original");
        let s = YarnScaling {
            theta: f("rope_theta").expect("theta"),
            // transformers: no factor means max_position_embeddings / original.
            factor: f("factor").unwrap_or_else(|| f("max_position_embeddings").expect("context") / original),
            beta_fast: f("beta_fast").unwrap_or(32.0),
            beta_slow: f("beta_slow").unwrap_or(1.0),
            original_max_position_embeddings: original,
            attention_factor: f("attention_factor"),
            mscale: f("mscale"),
            mscale_all_dim: f("mscale_all_dim"),
            truncate: c["truncate"].as_bool().unwrap_or(true),
        };
        let d = c["head_dim"].as_u64().expect("head_dim") as usize;
        let want: Vec<u32> =
            c["inv_freq_bits"].as_array().expect("bits").iter().map(|b| b.as_i64().expect("bit") as u32).collect();
        let u32s = |k: &str| -> Vec<u32> {
            c[k].as_array().expect("bits").iter().map(|b| b.as_i64().expect("bit") as u32).collect()
        };
        // From torch's own powers, every bit equal.
        let pos: Vec<f32> = u32s("pos_freqs_bits").into_iter().map(f32::from_bits).collect();
        assert_eq!(bits(&inv_freq_yarn_from(&pos, d, &s)), want, "{name}: inverse frequencies");
        // From the platform's powf: equal wherever the powers are (torch's vectorized
        // pow is not correctly rounded; docs/spec/numbers.md).
        let ours = bits(&inv_freq_yarn(s.theta as f32, d, &s));
        let powf: Vec<u32> = (0..d / 2).map(|i| (s.theta as f32).powf((2 * i) as f32 / d as f32).to_bits()).collect();
        let differ = (0..d / 2).filter(|&i| powf[i] != pos[i].to_bits()).count();
        for i in (0..d / 2).filter(|&i| powf[i] == pos[i].to_bits()) {
            assert_eq!(ours[i], want[i], "{name}: inverse frequency {i}");
        }
        assert!(differ <= 2, "{name}: {differ} powers differ from torch's");
        let factor = f("attention_factor_out").expect("attention factor");
        assert_eq!(s.attention_factor().to_bits(), factor.to_bits(), "{name}: attention factor");
        // The extrapolated and interpolated bands both occur (else the blend is untested).
        let plain = bits(&inv_freq_default(s.theta as f32, d));
        if s.factor > 1.0 {
            assert_eq!(want[0], plain[0], "{name}: the fastest frequency is kept");
            assert_ne!(want[d / 2 - 1], plain[d / 2 - 1], "{name}: the slowest frequency is scaled");
        }
    }
}

/// A YaRN RoPE multiplies its cos and sin by the attention factor (one f32 product, as
/// transformers' `emb.cos() * attention_scaling`); an unscaled one leaves them as they are.
#[test]
fn a_scaled_rope_multiplies_cos_and_sin() {
    let inv = vec![1.0f32, 0.25];
    let (mut plain, mut scaled) = (RopeTables::default(), RopeTables::default());
    plain.fill(&[7], &Rope::plain(inv.clone()));
    scaled.fill(&[7], &Rope { inv_freq: inv.clone(), scale: 1.25 });
    let x = [0.3f32, -0.7, 1.1, 0.2];
    let (mut a, mut b) = (x, x);
    plain.apply(&mut a, 4, 0, 1, 4);
    scaled.apply(&mut b, 4, 0, 1, 4);
    for i in 0..2 {
        let t = 7.0f32 * inv[i];
        let (c, s) = (t.cos() * 1.25, t.sin() * 1.25);
        assert_eq!(b[i].to_bits(), (x[i] * c - x[i + 2] * s).to_bits());
        assert_eq!(a[i].to_bits(), (x[i] * t.cos() - x[i + 2] * t.sin()).to_bits());
    }
}

/// A partial rotary (Qwen3.5: `partial_rotary_factor` of each head) rotates the pairs of
/// its leading `2 * D/2` values and leaves the rest of every head as it was, each head
/// at its own `head_dim` stride (transformers' `q_rot` / `q_pass`).
#[test]
fn a_partial_rotary_rotates_the_leading_pairs_of_each_head_only() {
    let inv = vec![1.0f32, 0.25]; // a rotated width of 4 in heads of 8
    let mut t = RopeTables::default();
    t.fill(&[5], &Rope::plain(inv.clone()));
    let x: Vec<f32> = (0..16).map(|i| 0.1 * i as f32 - 0.7).collect(); // two heads of 8
    let mut y = x.clone();
    t.apply(&mut y, 16, 0, 2, 8);
    for h in 0..2 {
        let o = h * 8;
        for i in 0..2 {
            let (c, s) = ((5.0f32 * inv[i]).cos(), (5.0f32 * inv[i]).sin());
            assert_eq!(y[o + i].to_bits(), (x[o + i] * c - x[o + i + 2] * s).to_bits(), "head {h} pair {i}");
            assert_eq!(y[o + i + 2].to_bits(), (x[o + i + 2] * c + x[o + i] * s).to_bits(), "head {h} pair {i}");
        }
        assert_eq!(&y[o + 4..o + 8], &x[o + 4..o + 8], "head {h}: the unrotated part changed");
    }
}
