//! The Gated DeltaNet sublayer (Qwen3.5, Qwen3-Next): a token mixer that keeps, per
//! sequence, a causal conv window and one `Dk x Dv` matrix per value head instead of K and
//! V rows. Its arithmetic is docs/spec/numbers.md's "Gated DeltaNet" rule: every position
//! is one recurrent update of the state the position before it left, so a prefill in any
//! chunks, a decode step, a resume from a snapshot or a batch of other sequences give each
//! position the same bits.
//!
//! The state lives in the pool's state column (docs/spec/kv.md, "Recurrent state beside
//! the pages"): row `r`'s slot holds the state after the last computed position of row
//! `r`. A run of a sequence's tokens inside one row updates that row's slot in place; at a
//! row's first position the state of the row before is copied in first (zeros at
//! position 0). Layout of one layer's state: the conv window `(K - 1, C)` (oldest row
//! first), then `Hv` matrices `(Dk, Dv)` row-major.

use rayon::prelude::*;
use tl_core::{ModelError, NO_BLOCK};
use tl_quant::Linear;

use crate::cx::{Cx, LayerBody};
use crate::lanes::{exp, simd_entry, Isa, Path, W};
use crate::loader::Loader;
use crate::proj::{f32_bytes, grow, linear, Proj};
use crate::rowops::{rms_norm_row, rows};

/// A Gated DeltaNet layer's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaShape {
    /// Key (and query) heads Hk.
    pub k_heads: usize,
    /// Value heads Hv, a multiple of Hk: value head `j` reads key head `j / (Hv / Hk)`.
    pub v_heads: usize,
    /// Key head size Dk (a multiple of 16).
    pub k_dim: usize,
    /// Value head size Dv (a multiple of 16).
    pub v_dim: usize,
    /// Conv kernel K (at least 1).
    pub kernel: usize,
}

impl DeltaShape {
    /// Conv channels `C = 2 Hk Dk + Hv Dv` (q, k, v side by side).
    pub fn conv_dim(&self) -> usize {
        2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim
    }

    /// f32 values of one layer's state: the window `(K - 1) C` and `Hv Dk Dv`.
    pub fn state_floats(&self) -> usize {
        (self.kernel - 1) * self.conv_dim() + self.v_heads * self.k_dim * self.v_dim
    }

    /// Why this shape cannot run, if it cannot (the kernels read whole 16-lane vectors).
    pub fn check(&self) -> Result<(), String> {
        if self.k_heads == 0 || self.v_heads == 0 || !self.v_heads.is_multiple_of(self.k_heads) {
            return Err(format!("{} value heads are not a multiple of {} key heads", self.v_heads, self.k_heads));
        }
        if self.k_dim == 0 || !self.k_dim.is_multiple_of(W) || self.v_dim == 0 || !self.v_dim.is_multiple_of(W) {
            return Err(format!("head sizes {} / {} must be multiples of {W}", self.k_dim, self.v_dim));
        }
        if self.kernel == 0 {
            return Err("a conv kernel of 0".into());
        }
        Ok(())
    }
}

/// One Gated DeltaNet sublayer: `proj = out(gated_norm(delta(conv(qkv(h))), z(h)))`.
pub struct DeltaNet {
    /// `[C + Hv Dv + 2 Hv, d]`: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a stacked.
    pub proj: Proj,
    /// `(K, C)` the depthwise conv's weights, tap-major (HF stores `(C, 1, K)`).
    pub conv: Vec<f32>,
    /// `(Hv,)` `-exp(A_log)`, computed once at load by the decoder's `exp`.
    pub neg_a: Vec<f32>,
    /// `(Hv,)` `dt_bias`.
    pub dt_bias: Vec<f32>,
    /// `(Dv,)` the gated norm's weight (plain, not `1 + w`).
    pub norm: Vec<f32>,
    /// `[d, Hv Dv]`.
    pub out: Linear,
    /// Where `out` stores its input `i`, when a file keeps out_proj's columns in another
    /// order than transformers' and a block format cannot move them (a Qwen3.5 GGUF with
    /// fewer key than value heads): the forward puts each value at its stored column, so
    /// the weights stay as the file stores them. `None`: transformers' order.
    pub out_cols: Option<Vec<u32>>,
    /// The shape.
    pub shape: DeltaShape,
}

impl DeltaNet {
    /// The sublayer under transformers' names below `p` (`model.layers.N.linear_attn`).
    pub fn load(w: &Loader<'_>, p: &str, d: usize, shape: DeltaShape) -> Result<DeltaNet, ModelError> {
        shape.check().map_err(|e| ModelError::Other(format!("{p}: {e}")))?;
        let (c, hv, vd) = (shape.conv_dim(), shape.v_heads, shape.v_heads * shape.v_dim);
        let proj = |name: &str, out| w.proj(&format!("{p}.{name}"), out, d);
        let proj = Proj::new(vec![
            proj("in_proj_qkv", c)?,
            proj("in_proj_z", vd)?,
            proj("in_proj_b", hv)?,
            proj("in_proj_a", hv)?,
        ]);
        let k = shape.kernel;
        let raw = w.store().f32(&format!("{p}.conv1d.weight"), &[c, 1, k])?;
        let conv = (0..k).flat_map(|t| (0..c).map(move |ch| (t, ch))).map(|(t, ch)| raw[ch * k + t]).collect();
        let a_log = w.vector(&format!("{p}.A_log"), hv)?;
        let neg_a = a_log.iter().map(|&x| -exp_scalar(Path::best(), x)).collect();
        Ok(DeltaNet {
            proj,
            conv,
            neg_a,
            dt_bias: w.vector(&format!("{p}.dt_bias"), hv)?,
            norm: w.vector(&format!("{p}.norm.weight"), shape.v_dim)?,
            out: w.proj(&format!("{p}.out_proj"), d, vd)?,
            out_cols: None,
            shape,
        })
    }

    /// Bytes its weights hold.
    pub fn weight_bytes(&self) -> usize {
        self.proj.packed_bytes()
            + self.out.packed_bytes()
            + f32_bytes(&self.conv)
            + f32_bytes(&self.neg_a)
            + f32_bytes(&self.dt_bias)
            + f32_bytes(&self.norm)
    }

    /// `proj` `(N, d)` from `h` `(N, d)` for layer `layer`, updating each sequence's state.
    pub fn forward(&self, layer: u32, cx: &mut Cx<'_, '_>) -> Result<(), ModelError> {
        let (n, dm, path, eps) = (cx.n, cx.dm, cx.path(), cx.eps);
        let sh = self.shape;
        let (c, vd, hv) = (sh.conv_dim(), sh.v_heads * sh.v_dim, sh.v_heads);
        let width = c + vd + 2 * hv;
        let b = &mut *cx.b;
        let x = grow(&mut b.qkv, n * width); // (N, C | Hv Dv | Hv | Hv)
        self.proj.forward(&b.h[..n * dm], n, x, &mut b.tmp, "linear_attn.in_proj")?;
        let u = grow(&mut b.mix, n * c); // (N, C) conv output, q and k normed
        let gates = grow(&mut b.gu, n * 2 * hv); // (N, 2 Hv) beta | decay
        rows(gates, 2 * hv, |t, g| {
            let row = &x[t * width + c + vd..(t + 1) * width];
            gates_row(path, &row[..hv], &row[hv..], (&self.neg_a, &self.dt_bias), g)
        });
        let o = grow(&mut b.att, n * vd); // (N, Hv Dv)
        let (plan, batch) = (cx.step.plan, cx.step.batch);
        let (col, sl) = plan.slot(layer)?;
        let (bt, g) = (plan.block_tokens, plan.groups);
        let mut t0 = 0;
        for (si, s) in batch.seqs.iter().enumerate() {
            let (p0, len) = (s.start, s.tokens.len());
            // A verify step's spare slots: spare j gets the state after step token
            // `len - 1 - m + j` (kv.md, "Speculation"), so runs also end after each.
            let spares = cx.step.spares.get(si).copied().unwrap_or_default();
            let first_spare = t0 + len - 1 - spares.len();
            // The running state lives in the slot of the step's last row; the state before
            // the step is the slot of the row of position p0 - 1 (zeros at position 0).
            let last_row = (p0 + len - 1) / bt;
            let live = s.blocks[last_row * g + col];
            if p0 == 0 {
                cx.kv.state_mut(live, sl)?.fill(0.0);
            } else if (p0 - 1) / bt != last_row {
                cx.kv.copy_state(s.blocks[(p0 - 1) / bt * g + col], live, sl)?;
            }
            let mut t = t0;
            while t < t0 + len {
                // One run: the tokens inside one block-table row; a row the step passes
                // whose slot is allocated gets the state after its last position.
                let p = plan.pos[t];
                let row = p / bt;
                let mut end = (t0 + len).min(t + (row + 1) * bt - p);
                if !spares.is_empty() && end > first_spare && t < first_spare + spares.len() {
                    end = end.min(t.max(first_spare) + 1);
                }
                let state = cx.kv.state_mut(live, sl)?;
                if state.len() != sh.state_floats() {
                    return Err(ModelError::Other(format!(
                        "layer {layer}: a state slot of {} values, the layer needs {}",
                        state.len(),
                        sh.state_floats()
                    )));
                }
                let (window, mats) = state.split_at_mut((sh.kernel - 1) * c);
                let run = t..end;
                self.conv_run(path, &x[..n * width], width, run.clone(), window, &mut u[..n * c]);
                let (ur, gr) = (&u[run.start * c..run.end * c], &gates[run.start * 2 * hv..run.end * 2 * hv]);
                delta_run(path, sh, ur, gr, mats, &mut o[run.start * vd..run.end * vd]);
                let snap = s.blocks[row * g + col];
                if row < last_row && snap != NO_BLOCK && end == t0 + len.min((row + 1) * bt - p0) {
                    cx.kv.copy_state(live, snap, sl)?;
                }
                if let Some(&spare) = (end - 1).checked_sub(first_spare).and_then(|j| spares.get(j)) {
                    cx.kv.copy_state(live, spare, sl)?;
                }
                t = end;
            }
            t0 += len;
        }
        // The gated norm per (token, value head), then out_proj.
        let z0 = c;
        rows(o, sh.v_dim, |r, head| {
            let (t, h) = (r / hv, r % hv);
            let z = &x[t * width + z0 + h * sh.v_dim..][..sh.v_dim];
            gated_norm(path, head, &self.norm, z, eps)
        });
        let o: &[f32] = match &self.out_cols {
            None => o,
            Some(cols) => {
                let s = grow(&mut b.tmp, n * vd);
                for (src, dst) in o.chunks_exact(vd).zip(s.chunks_exact_mut(vd)) {
                    for (&v, &j) in src.iter().zip(cols) {
                        dst[j as usize] = v;
                    }
                }
                s
            }
        };
        let proj = grow(&mut b.proj, n * dm);
        linear(&self.out, o, n, proj, "linear_attn.out_proj")
    }

    /// The conv of tokens `run` (all of one sequence and row): each output channel an fma
    /// chain over the taps, oldest first, then silu; the window slides by one row per token.
    /// Then q and k heads are L2-normed and q scaled (numbers.md, steps 2 and 3).
    fn conv_run(
        &self,
        path: Path,
        x: &[f32],
        width: usize,
        run: std::ops::Range<usize>,
        window: &mut [f32],
        u: &mut [f32],
    ) {
        let sh = self.shape;
        let (c, k) = (sh.conv_dim(), sh.kernel);
        for t in run {
            let xt = &x[t * width..t * width + c];
            let ut = &mut u[t * c..(t + 1) * c];
            conv_row(path, &self.conv, window, xt, ut);
            if k > 1 {
                window.copy_within(c.., 0);
                window[(k - 2) * c..].copy_from_slice(xt);
            }
            let kd = sh.k_heads * sh.k_dim;
            let scale = 1.0 / (sh.k_dim as f32).sqrt();
            for (i, head) in ut[..2 * kd].chunks_exact_mut(sh.k_dim).enumerate() {
                l2norm_row(path, head, if i < sh.k_heads { scale } else { 1.0 });
            }
        }
    }
}

/// The recurrent update of every value head over one run of tokens (numbers.md, step 5),
/// heads in parallel, each head's positions in order.
fn delta_run(path: Path, sh: DeltaShape, u: &[f32], gates: &[f32], mats: &mut [f32], o: &mut [f32]) {
    let (c, hv, dk, dv) = (sh.conv_dim(), sh.v_heads, sh.k_dim, sh.v_dim);
    let tokens = u.len() / c;
    let ratio = hv / sh.k_heads;
    let kd = sh.k_heads * dk;
    // (Hv, T, Dv) per head, scattered into o's (T, Hv Dv) rows after.
    let mut out = vec![0.0f32; hv * tokens * dv];
    mats.par_chunks_exact_mut(dk * dv).zip(out.par_chunks_exact_mut(tokens * dv)).enumerate().for_each(
        |(h, (s, oh))| {
            let kh = h / ratio;
            for t in 0..tokens {
                let row = &u[t * c..(t + 1) * c];
                let (q, k) = (&row[kh * dk..(kh + 1) * dk], &row[kd + kh * dk..kd + (kh + 1) * dk]);
                let v = &row[2 * kd + h * dv..2 * kd + (h + 1) * dv];
                let (beta, decay) = (gates[t * 2 * hv + h], gates[t * 2 * hv + hv + h]);
                delta_step(path, s, (q, k, v), (beta, decay), &mut oh[t * dv..(t + 1) * dv]);
            }
        },
    );
    for t in 0..tokens {
        for h in 0..hv {
            o[t * hv * dv + h * dv..][..dv].copy_from_slice(&out[(h * tokens + t) * dv..][..dv]);
        }
    }
}

/// One position of one value head: `S *= decay; m = S^T k; d = (v - m) beta;
/// S += k d^T; o = S^T q`, lanes over `Dv`, each lane's sums fma chains over `Dk`
/// ascending from +0.0 (numbers.md, step 5).
#[inline(always)]
unsafe fn delta_impl<L: Isa>(s: &mut [f32], qkv: (&[f32], &[f32], &[f32]), gates: (f32, f32), o: &mut [f32]) {
    let (q, k, v) = qkv;
    let (dk, dv) = (k.len(), v.len());
    let (beta, decay) = (L::splat(gates.0), L::splat(gates.1));
    for j in (0..dv).step_by(W) {
        let mut m = L::zero();
        for (i, &ki) in k.iter().enumerate() {
            let p = s.as_mut_ptr().add(i * dv + j);
            let x = L::mul(L::ld(p), decay);
            L::st(p, x);
            m = L::fma(x, L::splat(ki), m);
        }
        let d = L::mul(L::sub(L::ld(v.as_ptr().add(j)), m), beta);
        let mut acc = L::zero();
        for i in 0..dk {
            let p = s.as_mut_ptr().add(i * dv + j);
            let x = L::fma(L::splat(k[i]), d, L::ld(p));
            L::st(p, x);
            acc = L::fma(x, L::splat(q[i]), acc);
        }
        L::st(o.as_mut_ptr().add(j), acc);
    }
}

simd_entry!(
    /// One delta-rule position of one head on `path` (see `delta_impl`).
    #[doc(hidden)]
    pub fn delta_step => delta_impl(s: &mut [f32], qkv: (&[f32], &[f32], &[f32]), gates: (f32, f32), o: &mut [f32])
);

/// One conv output row: channel `ch` is `fma` over taps `0..K` ascending (the window's
/// `K - 1` rows, oldest first, then `x`), from +0.0, then `silu`.
#[inline(always)]
unsafe fn conv_impl<L: Isa>(w: &[f32], window: &[f32], x: &[f32], u: &mut [f32]) {
    let c = x.len();
    let k = w.len() / c;
    for ch in (0..c).step_by(W) {
        let mut acc = L::zero();
        for tap in 0..k - 1 {
            acc = L::fma(L::ld(w.as_ptr().add(tap * c + ch)), L::ld(window.as_ptr().add(tap * c + ch)), acc);
        }
        acc = L::fma(L::ld(w.as_ptr().add((k - 1) * c + ch)), L::ld(x.as_ptr().add(ch)), acc);
        let silu = L::div(acc, L::add(L::splat(1.0), exp::<L>(L::sub(L::zero(), acc))));
        L::st(u.as_mut_ptr().add(ch), silu);
    }
}

simd_entry!(
    /// One conv row on `path` (see `conv_impl`).
    #[doc(hidden)]
    pub fn conv_row => conv_impl(w: &[f32], window: &[f32], x: &[f32], u: &mut [f32])
);

/// L2 norm of one head in place, times `scale`: `s` the sum of squares as 16 lane FMA
/// chains and the fixed tree (RMSNorm's order), `x * (1 / sqrt(s + 1e-6))`, then `* scale`.
#[inline(always)]
unsafe fn l2_impl<L: Isa>(x: &mut [f32], scale: f32) {
    let mut acc = L::zero();
    for i in (0..x.len()).step_by(W) {
        let v = L::ld(x.as_ptr().add(i));
        acc = L::fma(v, v, acc);
    }
    let r = L::splat(1.0 / (L::hsum(acc) + 1e-6).sqrt());
    let sc = L::splat(scale);
    for i in (0..x.len()).step_by(W) {
        let p = x.as_mut_ptr().add(i);
        L::st(p, L::mul(L::mul(L::ld(p), r), sc));
    }
}

simd_entry!(
    /// One head's L2 norm on `path` (see `l2_impl`).
    #[doc(hidden)]
    pub fn l2norm_row => l2_impl(x: &mut [f32], scale: f32)
);

/// `beta = sigmoid(b)`, `decay = exp(-exp(A_log) * softplus(a + dt_bias))` for every value
/// head of one token (numbers.md, step 4), into `g` = beta | decay.
fn gates_row(path: Path, b: &[f32], a: &[f32], (neg_a, dt_bias): (&[f32], &[f32]), g: &mut [f32]) {
    let hv = b.len();
    let (beta, decay) = g.split_at_mut(hv);
    for h in 0..hv {
        beta[h] = 1.0 / (1.0 + exp_scalar(path, -b[h]));
        let y = a[h] + dt_bias[h];
        let sp = if y > 20.0 { y } else { ln(1.0 + exp_scalar(path, y)) };
        decay[h] = exp_scalar(path, neg_a[h] * sp);
    }
}

/// The decoder's `exp` of one value (the same bits on every path).
fn exp_scalar(path: Path, x: f32) -> f32 {
    crate::lanes::exp16(path, &[x; W])[0]
}

/// Natural log of a finite `x >= 1` (Cephes' `logf`: `x = m 2^e`, a degree-9 polynomial
/// in `m - 1`), in plain f32 arithmetic without fma, so every path and machine gives the
/// same bits (a libm call could differ between machines).
#[allow(clippy::excessive_precision)] // Cephes' coefficients as published
fn ln(x: f32) -> f32 {
    let bits = x.to_bits();
    let mut e = ((bits >> 23) & 0xff) as i32 - 126;
    let mut m = f32::from_bits((bits & 0x007f_ffff) | 0x3f00_0000); // in [0.5, 1)
    if m < std::f32::consts::FRAC_1_SQRT_2 {
        e -= 1;
        m = m + m - 1.0;
    } else {
        m -= 1.0;
    }
    let z = m * m;
    let mut y = 7.037_683_6e-2;
    for c in [
        -1.151_461e-1,
        1.167_699_9e-1,
        -1.242_014_1e-1,
        1.424_932_3e-1,
        -1.666_805_7e-1,
        2.000_071_4e-1,
        -2.499_999_4e-1,
        3.333_333_1e-1,
    ] {
        y = y * m + c;
    }
    let ef = e as f32;
    let mut r = y * m * z;
    r += -2.121_944_4e-4 * ef;
    r += -0.5 * z;
    (m + r) + 0.693_359_4 * ef
}

/// The gated norm of one head's output in place: `rms_norm_row` with weight `w`, then
/// `* silu(z)` (numbers.md, step 6).
fn gated_norm(path: Path, o: &mut [f32], w: &[f32], z: &[f32], eps: f32) {
    let mut normed = [0.0f32; 512];
    let d = o.len();
    if d > normed.len() {
        let mut v = vec![0.0f32; d];
        rms_norm_row(path, o, w, eps, &mut v);
        silu_mul(path, &v, z, o);
        return;
    }
    rms_norm_row(path, o, w, eps, &mut normed[..d]);
    silu_mul(path, &normed[..d], z, o);
}

/// `o = v * silu(z)`, 16 lanes at a time.
#[inline(always)]
unsafe fn silu_mul_impl<L: Isa>(v: &[f32], z: &[f32], o: &mut [f32]) {
    for i in (0..o.len()).step_by(W) {
        let zz = L::ld(z.as_ptr().add(i));
        let s = L::div(zz, L::add(L::splat(1.0), exp::<L>(L::sub(L::zero(), zz))));
        L::st(o.as_mut_ptr().add(i), L::mul(L::ld(v.as_ptr().add(i)), s));
    }
}

simd_entry!(
    /// `o = v * silu(z)` on `path`.
    #[doc(hidden)]
    pub fn silu_mul => silu_mul_impl(v: &[f32], z: &[f32], o: &mut [f32])
);

/// A layer of a hybrid family: pre-norm around a Gated DeltaNet and a feed-forward
/// (`x += delta(norm_in(x)); x += ffn(norm_post(x))`), Qwen3.5's linear-attention layers.
pub struct DeltaLayer {
    /// `(d,)` the input norm's weight, as the forward multiplies by it.
    pub input_norm: Vec<f32>,
    /// The token mixer.
    pub delta: DeltaNet,
    /// `(d,)` the post-mixer norm's weight.
    pub post_norm: Vec<f32>,
    /// The feed-forward.
    pub ffn: crate::blocks::Ffn,
}

impl LayerBody for DeltaLayer {
    fn forward(&self, layer: u32, cx: &mut Cx<'_, '_>) -> Result<(), ModelError> {
        cx.norm_x(&self.input_norm);
        self.delta.forward(layer, cx)?;
        cx.add_proj();
        cx.norm_x(&self.post_norm);
        self.ffn.forward(cx)?;
        cx.add_proj();
        Ok(())
    }

    fn weight_bytes(&self) -> usize {
        f32_bytes(&self.input_norm) + self.delta.weight_bytes() + f32_bytes(&self.post_norm) + self.ffn.weight_bytes()
    }

    /// The feed-forward's projections; the DeltaNet's take no adapter.
    fn adaptable(&self, out: &mut Vec<tl_core::Adaptable>) {
        self.ffn.adaptable(out);
    }
}
