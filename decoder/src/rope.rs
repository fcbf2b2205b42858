//! Rotary position embeddings: inverse frequencies (`default` and Llama 3's `llama3`
//! scaling), each step's per-token cos/sin tables, and rotate-half RoPE on q and k heads.
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
    /// inv_freq[i]` in f32, as Hugging Face computes them.
    pub fn fill(&mut self, pos: &[usize], inv_freq: &[f32]) {
        let half = inv_freq.len();
        self.half = half;
        let cos = grow(&mut self.cos, pos.len() * half);
        let sin = grow(&mut self.sin, pos.len() * half);
        for ((c, s), &p) in cos.chunks_exact_mut(half.max(1)).zip(sin.chunks_exact_mut(half.max(1))).zip(pos) {
            for ((c, s), &f) in c.iter_mut().zip(s.iter_mut()).zip(inv_freq) {
                let a = p as f32 * f;
                *c = a.cos();
                *s = a.sin();
            }
        }
    }

    /// Rotate-half RoPE in place on the heads of each row of `x` `(N, stride)`: `heads`
    /// heads of `D = 2 * D/2` from column `col` (q and k side by side: `col = 0`, `heads =
    /// H + H_kv`). Pairs `(i, i + D/2)`: `x[i] <- x[i] cos - x[i+D/2] sin`, `x[i+D/2] <-
    /// x[i+D/2] cos + x[i] sin` (Hugging Face's `x * cos + rotate_half(x) * sin`: products
    /// rounded, then summed). A function of the row and its position alone.
    pub fn apply(&self, x: &mut [f32], stride: usize, col: usize, heads: usize) {
        let half = self.half;
        let d = 2 * half;
        if d == 0 {
            return;
        }
        crate::rowops::rows(x, stride, |t, row| {
            let (c, s) = (&self.cos[t * half..(t + 1) * half], &self.sin[t * half..(t + 1) * half]);
            for head in row[col..col + heads * d].chunks_exact_mut(d) {
                let (a, b) = head.split_at_mut(half);
                for i in 0..half {
                    let (x1, x2) = (a[i], b[i]);
                    a[i] = x1 * c[i] - x2 * s[i];
                    b[i] = x2 * c[i] + x1 * s[i];
                }
            }
        });
    }
}
