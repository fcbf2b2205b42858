//! Rotary position embeddings: inverse frequencies (`default`, Llama 3's `llama3` and
//! `yarn` scaling), each step's per-token cos/sin tables (times YaRN's attention factor),
//! and rotate-half RoPE on q and k heads.
//!
//! A family holds one inverse-frequency vector per distinct RoPE (Gemma 3: base 10000 on
//! windowed layers, `rope_theta` on global ones), fills one [`RopeTables`] per vector each
//! step, and gives each layer the table it uses.

use crate::proj::grow;

/// `(D/2,)` inverse frequencies `theta^(-2i/D)`, i ascending, as Hugging Face computes
/// them in f32: `1 / theta^(f32(2i) / f32(D))`.
pub fn inv_freq_default(theta: f32, head_dim: usize) -> Vec<f32> {
    let d = head_dim;
    (0..d / 2).map(|i| 1.0 / theta.powf((2 * i) as f32 / d as f32)).collect()
}

/// Llama 3's RoPE scaling (`rope_scaling.rope_type = "llama3"`), its four fields as the
/// config gives them (f64: transformers does the scalar arithmetic in Python floats).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Llama3Scaling {
    /// `factor`: how much the low frequencies are slowed.
    pub factor: f64,
    /// `low_freq_factor`.
    pub low_freq_factor: f64,
    /// `high_freq_factor`.
    pub high_freq_factor: f64,
    /// `original_max_position_embeddings`: the context the model was trained at.
    pub original_max_position_embeddings: f64,
}

/// `(D/2,)` inverse frequencies with Llama 3 scaling, bit for bit as transformers'
/// `_compute_llama3_parameters` computes them. Its tensor arithmetic is f32 with each
/// Python scalar rounded to f32 first, and `number / tensor` is `tensor.reciprocal() *
/// number` (torch's `__rtruediv__`), which differs from a division in the last bit for
/// some values; a wavelength above `old / low_freq_factor` is slowed by `factor`, one below
/// `old / high_freq_factor` kept, and the band between blended.
// `!(a < b)` as transformers writes `~(wavelen < high_freq_wavelen)`: the same answer for
// a NaN wavelength too.
#[allow(clippy::neg_cmp_op_on_partial_ord)]
pub fn inv_freq_llama3(theta: f32, head_dim: usize, s: &Llama3Scaling) -> Vec<f32> {
    let old = s.original_max_position_embeddings;
    // Python floats, rounded to f32 where they meet a tensor.
    let low_wavelen = (old / s.low_freq_factor) as f32;
    let high_wavelen = (old / s.high_freq_factor) as f32;
    let factor = s.factor as f32;
    let (low, span) = (s.low_freq_factor as f32, (s.high_freq_factor - s.low_freq_factor) as f32);
    let two_pi = (2.0 * std::f64::consts::PI) as f32;
    inv_freq_default(theta, head_dim)
        .into_iter()
        .map(|f| {
            let wavelen = (1.0 / f) * two_pi;
            let scaled = if wavelen > low_wavelen { f / factor } else { f };
            let smooth = ((1.0 / wavelen) * old as f32 - low) / span;
            let smoothed = (1.0 - smooth) * scaled / factor + smooth * scaled;
            let medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
            if medium {
                smoothed
            } else {
                scaled
            }
        })
        .collect()
}

/// YaRN's RoPE scaling (`rope_type = "yarn"`), its fields as the config gives them (f64:
/// transformers does the scalar arithmetic in Python floats), defaults applied.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct YarnScaling {
    /// `rope_theta` as the config writes it (the correction range uses it in f64).
    pub theta: f64,
    /// `factor`: how much the context is stretched.
    pub factor: f64,
    /// `beta_fast` (default 32): rotations bounding the extrapolated band.
    pub beta_fast: f64,
    /// `beta_slow` (default 1): rotations bounding the interpolated band.
    pub beta_slow: f64,
    /// `original_max_position_embeddings`: the context the model was trained at.
    pub original_max_position_embeddings: f64,
    /// `attention_factor`, when given; else from `mscale` / `mscale_all_dim` or `factor`.
    pub attention_factor: Option<f64>,
    /// `mscale`, when given.
    pub mscale: Option<f64>,
    /// `mscale_all_dim`, when given.
    pub mscale_all_dim: Option<f64>,
    /// `truncate` (default true): the correction range rounded out to whole dimensions.
    pub truncate: bool,
}

impl YarnScaling {
    /// The factor the cos/sin tables are multiplied by (transformers'
    /// `attention_factor`), as a Python float.
    pub fn attention_factor(&self) -> f64 {
        let mscale = |scale: f64, m: f64| if scale <= 1.0 { 1.0 } else { 0.1 * m * scale.ln() + 1.0 };
        match (self.attention_factor, self.mscale, self.mscale_all_dim) {
            (Some(a), _, _) => a,
            // Python's `if mscale and mscale_all_dim`: both present and non-zero.
            (None, Some(m), Some(all)) if m != 0.0 && all != 0.0 => mscale(self.factor, m) / mscale(self.factor, all),
            _ => mscale(self.factor, 1.0),
        }
    }
}

/// `(D/2,)` inverse frequencies with YaRN scaling, bit for bit as transformers'
/// `_compute_yarn_parameters` computes them: `theta^(2i/D)` in f32, extrapolated
/// `1 / p` and interpolated `1 / (f32(factor) * p)` blended by a linear ramp over the
/// correction range (found in f64 from `beta_fast`, `beta_slow`, the original context and
/// the f64 `theta`), each tensor operation one f32 rounding as torch does it.
///
/// The powers `theta^(2i/D)` are the platform's f32 `powf`, as [`inv_freq_default`]
/// computes them; torch on an AVX2 / AVX-512 CPU takes them from SLEEF's vectorized powf,
/// which is not correctly rounded and differs in the last bit for a few (theta, i) (2 of
/// gpt-oss's 32). [`inv_freq_yarn_from`] is the rest, exact given the same powers.
pub fn inv_freq_yarn(theta: f32, head_dim: usize, s: &YarnScaling) -> Vec<f32> {
    let pos_freqs: Vec<f32> = (0..head_dim / 2).map(|i| theta.powf((2 * i) as f32 / head_dim as f32)).collect();
    inv_freq_yarn_from(&pos_freqs, head_dim, s)
}

/// [`inv_freq_yarn`] from the powers `pos_freqs` `(D/2,)`, `theta^(2i/D)`.
pub fn inv_freq_yarn_from(pos_freqs: &[f32], head_dim: usize, s: &YarnScaling) -> Vec<f32> {
    let dim = head_dim as f64;
    let base = s.theta;
    let correction_dim = |rotations: f64| {
        (dim * (s.original_max_position_embeddings / (rotations * 2.0 * std::f64::consts::PI)).ln()) / (2.0 * base.ln())
    };
    let (mut low, mut high) = (correction_dim(s.beta_fast), correction_dim(s.beta_slow));
    if s.truncate {
        (low, high) = (low.floor(), high.ceil());
    }
    let (low, mut high) = (low.max(0.0), high.min(dim - 1.0));
    if low == high {
        high += 0.001; // transformers: "Prevent singularity"
    }
    let (min, span) = (low as f32, (high - low) as f32);
    let factor = s.factor as f32;
    pos_freqs
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let extrapolated = 1.0 / p;
            let interpolated = 1.0 / (factor * p);
            let ramp = ((i as f32 - min) / span).clamp(0.0, 1.0);
            let e = 1.0 - ramp; // inv_freq_extrapolation_factor
            interpolated * (1.0 - e) + extrapolated * e
        })
        .collect()
}

/// A scaled RoPE of a config's `rope_scaling` / `rope_parameters`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RopeScaling {
    /// Llama 3's (`rope_type: "llama3"`).
    Llama3(Llama3Scaling),
    /// YaRN (`rope_type: "yarn"`).
    Yarn(YarnScaling),
}

/// The RoPE a config asks for: `theta` (f32) and head size `D`, scaled or not.
pub fn rope_of(theta: f32, head_dim: usize, scaling: Option<&RopeScaling>) -> Rope {
    match scaling {
        None => Rope::plain(inv_freq_default(theta, head_dim)),
        Some(RopeScaling::Llama3(s)) => Rope::plain(inv_freq_llama3(theta, head_dim, s)),
        Some(RopeScaling::Yarn(s)) => {
            Rope { inv_freq: inv_freq_yarn(theta, head_dim, s), scale: s.attention_factor() as f32 }
        }
    }
}

/// A RoPE as a layer applies it: its inverse frequencies and the factor its cos and sin
/// are multiplied by (YaRN's attention factor; 1 otherwise, which changes no bit).
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    /// `(D/2,)` inverse frequencies.
    pub inv_freq: Vec<f32>,
    /// cos and sin are multiplied by this (f32, as torch rounds the Python float).
    pub scale: f32,
}

impl Rope {
    /// An unscaled RoPE of these inverse frequencies.
    pub fn plain(inv_freq: Vec<f32>) -> Rope {
        Rope { inv_freq, scale: 1.0 }
    }
}

/// One step's RoPE tables for one inverse-frequency vector: `cos`, `sin` `(N, D/2)`, row
/// `t` for token `t`'s position. Kept between steps (grown, never shrunk).
#[derive(Default)]
pub struct RopeTables {
    cos: Vec<f32>,
    sin: Vec<f32>,
    half: usize,
}

impl RopeTables {
    /// Fill the tables for the step's positions `pos` `(N,)`: angles `f32(pos) *
    /// inv_freq[i]` in f32, as Hugging Face computes them, their cos and sin times
    /// `rope.scale` (one f32 product; exact for 1).
    pub fn fill(&mut self, pos: &[usize], rope: &Rope) {
        let (inv_freq, scale) = (&rope.inv_freq[..], rope.scale);
        let half = inv_freq.len();
        self.half = half;
        let cos = grow(&mut self.cos, pos.len() * half);
        let sin = grow(&mut self.sin, pos.len() * half);
        for ((c, s), &p) in cos.chunks_exact_mut(half.max(1)).zip(sin.chunks_exact_mut(half.max(1))).zip(pos) {
            for ((c, s), &f) in c.iter_mut().zip(s.iter_mut()).zip(inv_freq) {
                let a = p as f32 * f;
                *c = a.cos() * scale;
                *s = a.sin() * scale;
            }
        }
    }

    /// Rotate-half RoPE in place on the heads of each row of `x` `(N, stride)`: `heads`
    /// heads of `head_dim` from column `col` (q and k side by side: `col = 0`, `heads =
    /// H + H_kv`), each rotated on its first `2 * D/2` values (all of them, or a partial
    /// rotary's leading part; the rest pass unchanged, as transformers' `q_pass`). Pairs
    /// `(i, i + D/2)`: `x[i] <- x[i] cos - x[i+D/2] sin`, `x[i+D/2] <- x[i+D/2] cos + x[i]
    /// sin` (Hugging Face's `x * cos + rotate_half(x) * sin`: products rounded, then
    /// summed). A function of the row and its position alone.
    pub fn apply(&self, x: &mut [f32], stride: usize, col: usize, heads: usize, head_dim: usize) {
        let half = self.half;
        let d = 2 * half;
        if d == 0 || head_dim < d {
            return;
        }
        crate::rowops::rows(x, stride, |t, row| {
            let (c, s) = (&self.cos[t * half..(t + 1) * half], &self.sin[t * half..(t + 1) * half]);
            for head in row[col..col + heads * head_dim].chunks_exact_mut(head_dim) {
                let (a, b) = head[..d].split_at_mut(half);
                for i in 0..half {
                    let (x1, x2) = (a[i], b[i]);
                    a[i] = x1 * c[i] - x2 * s[i];
                    b[i] = x2 * c[i] + x1 * s[i];
                }
            }
        });
    }
}
