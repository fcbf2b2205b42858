//! The row operations BERT needs and tl-decoder does not have (it is RMSNorm, SwiGLU and
//! causal paged attention): LayerNorm with a bias, GELU (erf), biases, and bidirectional
//! attention over one input's own rows. Each is a function of one row (one input, for
//! attention) computed in a fixed order, so a row's bits never depend on its neighbours.

/// `x + b` on every `(n, d)` row.
pub fn add_bias(x: &mut [f32], b: &[f32]) {
    for row in x.chunks_exact_mut(b.len()) {
        for (v, &bv) in row.iter_mut().zip(b) {
            *v += bv;
        }
    }
}

/// `x = LayerNorm(x + r)` on every `(n, d)` row (the residual add first, as BERT's
/// post-norm layers do): mean and biased variance accumulated in f64 in column order,
/// `(v - mean) / sqrt(var + eps) * w + b`.
pub fn add_layer_norm(x: &mut [f32], r: Option<&[f32]>, w: &[f32], b: &[f32], eps: f32) {
    let d = w.len();
    for (i, row) in x.chunks_exact_mut(d).enumerate() {
        if let Some(r) = r {
            for (v, &rv) in row.iter_mut().zip(&r[i * d..(i + 1) * d]) {
                *v += rv;
            }
        }
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
        let var = row.iter().map(|&v| (v as f64 - mean) * (v as f64 - mean)).sum::<f64>() / d as f64;
        let inv = 1.0 / (var + eps as f64).sqrt();
        for ((v, &wv), &bv) in row.iter_mut().zip(w).zip(b) {
            *v = (((*v as f64 - mean) * inv) as f32) * wv + bv;
        }
    }
}

/// GELU with the exact erf (transformers' `"gelu"`): `x/2 (1 + erf(x / sqrt 2))`,
/// evaluated in f64 and rounded once.
pub fn gelu(x: &mut [f32]) {
    for v in x.iter_mut() {
        let t = *v as f64;
        *v = (0.5 * t * (1.0 + libm::erf(t * std::f64::consts::FRAC_1_SQRT_2))) as f32;
    }
}

/// Bidirectional attention of one input: `qkv` `(T, 3d)` rows (q, k, v side by side,
/// heads of `hd` contiguous within each), into `out` `(T, d)`. Per head and query:
/// scores `q.k / sqrt(hd)` over every key of the input, a softmax (max subtracted, sum
/// in key order), the weighted sum of the values in key order; plain multiply-adds (no
/// FMA), so every machine rounds the same. `scores` is scratch.
pub fn attention(qkv: &[f32], t: usize, heads: usize, hd: usize, out: &mut [f32], scores: &mut Vec<f32>) {
    let d = heads * hd;
    let scale = 1.0 / (hd as f32).sqrt();
    scores.resize(t, 0.0);
    for h in 0..heads {
        for i in 0..t {
            let q = &qkv[i * 3 * d + h * hd..][..hd];
            let mut max = f32::NEG_INFINITY;
            for (j, s) in scores.iter_mut().enumerate() {
                let k = &qkv[j * 3 * d + d + h * hd..][..hd];
                let dot: f32 = q.iter().zip(k).fold(0.0, |a, (&x, &y)| a + x * y);
                *s = dot * scale;
                max = max.max(*s);
            }
            let mut sum = 0.0f32;
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            let o = &mut out[i * d + h * hd..][..hd];
            o.fill(0.0);
            for (j, &p) in scores.iter().enumerate() {
                let v = &qkv[j * 3 * d + 2 * d + h * hd..][..hd];
                let p = p / sum;
                for (a, &vv) in o.iter_mut().zip(v) {
                    *a += p * vv;
                }
            }
        }
    }
}
