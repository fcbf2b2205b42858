//! Gemma 4's attention sublayer, composed from tl-decoder's row blocks and its paged
//! attention:
//!
//! ```text
//! q = norm_q(h Wq)                       per head over the layer's D, weight q_norm
//! k = norm_k(h Wk)                       (owning layers only)
//! v = norm_v(h Wv)                       no weight; with attention_k_eq_v on a full
//!                                        layer v is h Wk itself, before norm_k
//! q, k = rope(q, k)                      the kind's table (proportional: the unrotated
//!                                        pairs have frequency 0: cos 1, sin 0, exact)
//! a = softmax(q k^T) v                   scale 1 (transformers' `scaling = 1.0`)
//! proj = a Wo
//! ```
//!
//! A shared-KV layer has no k/v weights: its slot in the KV layout is its source layer's
//! ([`tl_core::KvLayout::with_shared`]), and it only reads there; the source wrote the
//! step's keys before (it is an earlier layer).
//!
//! The pool's rows are `(H_p, D_p)` for both kinds (`Gemma4Config::pool_shape`): a layer
//! of fewer KV heads repeats each (query head h reads KV head `h / (H / H_p)`, a copy of its
//! own `h / (H / H_kv)`), and a smaller head pads q, k and v with zeros. The attention
//! kernel's score chains add `q[i] * k[i]` lane by lane from +0.0 and its value chains
//! `e_j * v_j[i]` per column, so zero columns leave every score and every kept output
//! column the bits an unpadded kernel gives (it already pads to 16 lanes this way); the
//! padded output columns are dropped before o_proj.

use tl_core::ModelError;
use tl_decoder::{attention, f32_bytes, grow, head_rms_norm, linear, write_kv, Attn, Cx, Proj};
use tl_quant::Linear;

/// One layer's attention.
pub struct G4Attn {
    /// `[H*D, d]`.
    pub q: Linear,
    /// `[H_kv*D, d]` k, then v unless V is K: `None` on a shared-KV layer.
    pub kv: Option<Proj>,
    /// V is the K projection (attention_k_eq_v on a full layer).
    pub k_eq_v: bool,
    /// `(D,)` q_norm's weight.
    pub q_norm: Vec<f32>,
    /// `(D,)` k_norm's weight (empty on a shared-KV layer).
    pub k_norm: Vec<f32>,
    /// `(D,)` ones: v_norm has no weight, and `x * r * 1` is `x * r` exactly.
    pub ones: Vec<f32>,
    /// KV heads of the layer, H_kv.
    pub kv_heads: usize,
    /// Head size of the layer, D.
    pub head_dim: usize,
    /// The pool's view: H, H_p, D_p, scale 1, the kind's window.
    pub pool: Attn,
    /// The kind's RoPE table.
    pub rope: usize,
    /// `[d, H*D]`.
    pub o: Linear,
}

impl G4Attn {
    /// `proj` `(N, d)` from `h` `(N, d)`, for layer `layer`.
    pub fn forward(&self, layer: u32, cx: &mut Cx<'_, '_>) -> Result<(), ModelError> {
        let Cx { step, kv, n, dm, eps, b } = cx;
        let (n, dm, eps, path) = (*n, *dm, *eps, step.path);
        let (heads, d, hkv) = (self.pool.heads, self.head_dim, self.kv_heads);
        let (hp, dp) = (self.pool.kv_heads, self.pool.head_dim);
        let h = &b.h[..n * dm];

        let q = grow(&mut b.mix, n * heads * d); // (N, H*D)
        linear(&self.q, h, n, q, "q_proj")?;
        head_rms_norm(path, q, heads * d, (heads, &self.q_norm), (0, &self.q_norm), eps);
        b.ropes[self.rope].apply(q, heads * d, 0, heads, d);

        let kvw = 2 * hkv * d;
        let kvr = grow(&mut b.gu, n * kvw); // (N, 2*H_kv*D): k heads, then v heads
        if let Some(proj) = &self.kv {
            if self.k_eq_v {
                // One projection: v is k's raw rows (before k_norm and RoPE).
                let k = grow(&mut b.act, n * hkv * d);
                proj.forward(h, n, k, &mut b.tmp, "k_proj")?;
                for (row, k) in kvr.chunks_exact_mut(kvw).zip(k.chunks_exact(hkv * d)) {
                    row[..hkv * d].copy_from_slice(k);
                    row[hkv * d..].copy_from_slice(k);
                }
            } else {
                proj.forward(h, n, kvr, &mut b.tmp, "k_proj / v_proj")?;
            }
            head_rms_norm(path, kvr, kvw, (hkv, &self.k_norm), (hkv, &self.ones), eps);
            b.ropes[self.rope].apply(kvr, kvw, 0, hkv, d);
        }

        // The pool's (N, (H + 2 H_p) D_p) rows: heads padded to D_p, KV heads repeated.
        let width = self.pool.qkv_width();
        let padded = grow(&mut b.aux2, n * width);
        padded.fill(0.0);
        let rep = hp / hkv;
        for (t, row) in padded.chunks_exact_mut(width).enumerate() {
            for hh in 0..heads {
                row[hh * dp..hh * dp + d].copy_from_slice(&q[(t * heads + hh) * d..(t * heads + hh + 1) * d]);
            }
            if self.kv.is_some() {
                for j in 0..hp {
                    let src = &kvr[t * kvw + (j / rep) * d..];
                    let (kc, vc) = ((heads + j) * dp, (heads + hp + j) * dp);
                    row[kc..kc + d].copy_from_slice(&src[..d]);
                    row[vc..vc + d].copy_from_slice(&src[hkv * d..hkv * d + d]);
                }
            }
        }
        if self.kv.is_some() {
            write_kv(step, &mut **kv, layer, &self.pool, padded)?;
        }
        let att = grow(&mut b.att, n * heads * dp); // (N, H*D_p)
        attention(step, &**kv, layer, &self.pool, padded, att)?;
        let input: &[f32] = if dp == d {
            att
        } else {
            let un = grow(&mut b.act, n * heads * d); // (N, H*D)
            for (dst, src) in un.chunks_exact_mut(d).zip(att.chunks_exact(dp)) {
                dst.copy_from_slice(&src[..d]);
            }
            un
        };
        let proj = grow(&mut b.proj, n * dm);
        linear(&self.o, input, n, proj, "o_proj")
    }

    /// Bytes its weights hold.
    pub fn weight_bytes(&self) -> usize {
        self.q.packed_bytes()
            + self.kv.as_ref().map_or(0, Proj::packed_bytes)
            + self.o.packed_bytes()
            + f32_bytes(&self.q_norm)
            + f32_bytes(&self.k_norm)
    }
}
