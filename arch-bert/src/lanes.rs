//! The vector math of BERT's row operations, the same bits on every instruction set:
//! `exp` for the softmax (f32, over tl-quant's [`Isa`] lanes, each operation exact or
//! correctly rounded alike on every path) and GELU's `erf` (f64, four lanes of AVX2, or
//! the same operations one value at a time in the portable code).

use rayon::prelude::*;
use tl_quant::Path;

/// `e^x` per lane: tl-decoder's softmax `exp` (Cephes' `expf`, about 2 ulp, `x` clamped to
/// `[-87, 88]`), so BERT's softmax rounds as the decoders' does.
pub use tl_decoder::exp_lanes as exp;

/// `erf(z) / z` as `P(z^2) / Q(z^2)` on `|z| <= ERF_CLAMP` (fitted by weighted least
/// squares to a relative error of 4.6e-9).
const ERF_P: [f64; 7] = [
    1.128_379_169_449_179_6,
    0.185_145_151_900_671_88,
    0.054_305_965_704_003_194,
    0.003_846_889_785_393_062_7,
    0.000_379_422_197_159_357_34,
    4.680_593_836_080_965e-6,
    -1.317_350_911_689_274_5e-8,
];
const ERF_Q: [f64; 6] = [
    1.0,
    0.497_414_034_426_188_9,
    0.113_931_552_829_184_78,
    0.015_455_887_045_000_281,
    0.001_306_780_238_605_61,
    6.307_317_905_759_197e-5,
];
/// Past `|z| = 4` erf is taken as `±1` (`1 - erf(4)` is 1.5e-8: GELU is then `x`, or 0
/// below `x = -4 sqrt 2`, where the exact value is at most 4.4e-8 in magnitude).
pub const ERF_CLAMP: f64 = 4.0;

/// GELU of one value, the portable reference of [`gelu`]: in f64, `z = t / sqrt 2`,
/// `erf = zc P(zc^2) / Q(zc^2)` with `zc` = `z` clamped to `[-4, 4]` (Horner with fused
/// multiply-adds), -1 where `z <= -4` and 1 where `z >= 4`; `0.5 t (1 + erf)`, rounded to
/// f32 once. Within half an ulp of the result plus 5e-8 of the exact GELU.
#[inline(always)]
pub fn gelu_one(v: f32) -> f32 {
    let t = v as f64;
    let z = t * std::f64::consts::FRAC_1_SQRT_2;
    // x86's maxpd / minpd: the second operand unless the comparison holds.
    let zc = if z > -ERF_CLAMP { z } else { -ERF_CLAMP };
    let zc = if zc < ERF_CLAMP { zc } else { ERF_CLAMP };
    let u = zc * zc;
    let mut p = ERF_P[6];
    for &c in ERF_P[..6].iter().rev() {
        p = p.mul_add(u, c);
    }
    let mut q = ERF_Q[5];
    for &c in ERF_Q[..5].iter().rev() {
        q = q.mul_add(u, c);
    }
    let erf = zc * p / q;
    let erf = if z <= -ERF_CLAMP { -1.0 } else { erf };
    let erf = if z >= ERF_CLAMP { 1.0 } else { erf };
    (0.5 * t * (1.0 + erf)) as f32
}

/// GELU (erf) of every value of `x` in place, on `path` (AVX2's four f64 lanes where the
/// CPU has them, else [`gelu_one`] per value; the same bits), in chunks over the rayon
/// pool (each value is computed alone).
pub fn gelu(path: Path, x: &mut [f32]) {
    x.par_chunks_mut(1 << 14).for_each(|c| gelu_chunk(path, c));
}

fn gelu_chunk(path: Path, x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if path != Path::Portable && Path::Avx2.available() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        unsafe { gelu_avx2(x) };
        return;
    }
    let _ = path;
    x.iter_mut().for_each(|v| *v = gelu_one(*v));
}

/// [`gelu`] on AVX2: [`gelu_one`]'s operations on four lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gelu_avx2(x: &mut [f32]) {
    use std::arch::x86_64::*;
    let mut chunks = x.chunks_exact_mut(4);
    let (lo, hi) = (_mm256_set1_pd(-ERF_CLAMP), _mm256_set1_pd(ERF_CLAMP));
    for c in &mut chunks {
        let t = _mm256_cvtps_pd(_mm_loadu_ps(c.as_ptr()));
        let z = _mm256_mul_pd(t, _mm256_set1_pd(std::f64::consts::FRAC_1_SQRT_2));
        let zc = _mm256_min_pd(_mm256_max_pd(z, lo), hi);
        let u = _mm256_mul_pd(zc, zc);
        let mut p = _mm256_set1_pd(ERF_P[6]);
        for &k in ERF_P[..6].iter().rev() {
            p = _mm256_fmadd_pd(p, u, _mm256_set1_pd(k));
        }
        let mut q = _mm256_set1_pd(ERF_Q[5]);
        for &k in ERF_Q[..5].iter().rev() {
            q = _mm256_fmadd_pd(q, u, _mm256_set1_pd(k));
        }
        let erf = _mm256_div_pd(_mm256_mul_pd(zc, p), q);
        let erf = _mm256_blendv_pd(erf, _mm256_set1_pd(-1.0), _mm256_cmp_pd::<_CMP_LE_OQ>(z, lo));
        let erf = _mm256_blendv_pd(erf, _mm256_set1_pd(1.0), _mm256_cmp_pd::<_CMP_GE_OQ>(z, hi));
        let g = _mm256_mul_pd(_mm256_mul_pd(_mm256_set1_pd(0.5), t), _mm256_add_pd(_mm256_set1_pd(1.0), erf));
        _mm_storeu_ps(c.as_mut_ptr(), _mm256_cvtpd_ps(g));
    }
    for v in chunks.into_remainder() {
        *v = gelu_one(*v);
    }
}
