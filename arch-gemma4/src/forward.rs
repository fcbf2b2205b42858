//! The Gemma 4 layer and its per-layer inputs, composed from tl-decoder's blocks; the
//! skeleton around them (embedding, RoPE tables, final norm, head, softcap) is tl-decoder's
//! `Stack`.
//!
//! The reference is transformers 5.23's `modeling_gemma4.py` (`Gemma4ForCausalLM`), float32:
//!
//! ```text
//! x = embed[ids] * sqrt(d)
//! per-layer inputs (P = hidden_size_per_layer_input, L layers), per token:
//!     tok = ple_embed[id] * sqrt(P)                           (L*P,)
//!     ctx = norm_P((x W_plp) * d^-0.5)                         each layer's P values
//!     pli = (ctx + tok) * 2^-0.5                               pli[l]: layer l's (P,)
//! per layer l:
//!     x = x + norm_post_attn(attn(norm_in(x)))                 (attn.rs)
//!     x = x + norm_post_ffn(mlp(norm_pre_ffn(x)))              GELU-tanh gated
//!       with enable_moe_block, the bracket is instead
//!       norm_post_ffn_1(mlp(norm_pre_ffn(x))) + norm_post_ffn_2(moe(norm_pre_ffn_2(x)))
//!       where moe's router sees rms(x) * scale * d^-0.5 (unweighted norm), takes the
//!       softmax's top k renormalised, times per_expert_scale[e] (moe.rs below)
//!     x = x + norm_ple(gelu_tanh(x W_gate) * pli[l]) W_proj)   when P > 0
//!     x = x * layer_scalar
//! logits = softcap(norm_final(x) E^T)
//! ```
//!
//! Every norm is `x * rsqrt(mean(x^2) + eps) * w` (w itself: Gemma 3's `1 + w` is gone).
//! Each row is a function of its own token (and, in attention, its own sequence's visible
//! keys), so the forward keeps tl's batch, chunk and thread invariance.

use tl_core::ModelError;
use tl_decoder::{f32_bytes, gelu_tanh_gated, grow, linear, rms_norm, Cx, LayerBody, Mlp, Moe, StepInputs};
use tl_quant::Linear;

use crate::attn::G4Attn;

/// A layer's per-layer-input sublayer.
pub struct PleBlock {
    /// `[P, d]` `per_layer_input_gate`.
    pub gate: Linear,
    /// `[d, P]` `per_layer_projection`.
    pub proj: Linear,
    /// `(d,)` `post_per_layer_input_norm`.
    pub norm: Vec<f32>,
    /// Layer count L, P: this layer reads columns `l*P ..` of the `(N, L*P)` inputs.
    pub layers: usize,
}

/// One Gemma 4 layer.
pub struct Gemma4Layer {
    /// `(d,)` input_layernorm.
    pub input_norm: Vec<f32>,
    /// The attention sublayer.
    pub attn: G4Attn,
    /// `(d,)` post_attention_layernorm.
    pub post_attn_norm: Vec<f32>,
    /// `(d,)` pre_feedforward_layernorm.
    pub pre_ffn_norm: Vec<f32>,
    /// GELU-tanh gated (twice as wide on a shared-KV layer with use_double_wide_mlp).
    pub mlp: Mlp,
    /// `(d,)` post_feedforward_layernorm.
    pub post_ffn_norm: Vec<f32>,
    /// The mixture of experts beside the MLP (`enable_moe_block`).
    pub moe: Option<G4Moe>,
    /// The per-layer-input sublayer, when the model has per-layer embeddings.
    pub ple: Option<PleBlock>,
    /// `layer_scalar`: the residual stream is multiplied by it last.
    pub scalar: f32,
}

impl LayerBody for Gemma4Layer {
    fn forward(&self, layer: u32, cx: &mut Cx<'_, '_>) -> Result<(), ModelError> {
        cx.norm_x(&self.input_norm);
        self.attn.forward(layer, cx)?;
        cx.norm_proj(&self.post_attn_norm);
        cx.add_h();
        cx.norm_x(&self.pre_ffn_norm);
        self.mlp.forward(cx)?;
        if let Some(moe) = &self.moe {
            moe.forward(cx)?;
        }
        cx.norm_proj(&self.post_ffn_norm);
        cx.add_h();
        if let Some(ple) = &self.ple {
            let (n, dm, path) = (cx.n, cx.dm, cx.path());
            let p = ple.gate.out();
            let b = &mut *cx.b;
            let g = grow(&mut b.tmp, n * p); // (N, P)
            linear(&ple.gate, &b.x[..n * dm], n, g, "per_layer_input_gate")?;
            // (N, 2P): the gate's row, then this layer's input row, for the gated GELU.
            let gu = grow(&mut b.gu, n * 2 * p);
            let lp = ple.layers * p;
            for t in 0..n {
                gu[t * 2 * p..t * 2 * p + p].copy_from_slice(&g[t * p..(t + 1) * p]);
                let src = &b.aux[t * lp + layer as usize * p..t * lp + (layer as usize + 1) * p];
                gu[t * 2 * p + p..(t + 1) * 2 * p].copy_from_slice(src);
            }
            let act = grow(&mut b.act, n * p);
            gelu_tanh_gated(path, gu, act, p);
            linear(&ple.proj, act, n, grow(&mut b.proj, n * dm), "per_layer_projection")?;
            cx.norm_proj(&ple.norm);
            cx.add_h();
        }
        let s = self.scalar;
        cx.b.x[..cx.n * cx.dm].iter_mut().for_each(|v| *v *= s);
        Ok(())
    }

    fn weight_bytes(&self) -> usize {
        let norms = [&self.input_norm, &self.post_attn_norm, &self.pre_ffn_norm, &self.post_ffn_norm];
        let ple = self.ple.as_ref().map_or(0, |p| p.gate.packed_bytes() + p.proj.packed_bytes() + f32_bytes(&p.norm));
        let moe = self.moe.as_ref().map_or(0, G4Moe::weight_bytes);
        self.attn.weight_bytes()
            + self.mlp.weight_bytes()
            + moe
            + ple
            + norms.iter().map(|v| f32_bytes(v)).sum::<usize>()
    }
}

/// Gemma 4's mixture of experts, run beside the dense MLP (transformers'
/// `Gemma4TextRouter` and `Gemma4TextExperts`). The router sees the residual stream through
/// an unweighted RMSNorm scaled per channel and by `d^-0.5`; the experts see it through
/// their own norm; tl-decoder's [`Moe`] routes (softmax, top k by score then id, renormed in
/// rank order) and runs the experts (each row's in ascending id), so the block keeps the
/// batch invariance of every MoE in tl.
pub struct G4Moe {
    /// The router (`router.proj` `[E, d]`), the experts (GELU-tanh gated), k, the routing.
    pub moe: Moe,
    /// `(d,)` `router.scale`.
    pub router_scale: Vec<f32>,
    /// `f32(d^-0.5)`.
    pub root: f32,
    /// `(E,)` `router.per_expert_scale`: each chosen weight is multiplied by its expert's.
    pub per_expert_scale: Vec<f32>,
    /// `(d,)` ones: the router's unweighted norm.
    pub ones: Vec<f32>,
    /// `(d,)` `post_feedforward_layernorm_1` (on the dense MLP's output).
    pub post_norm_1: Vec<f32>,
    /// `(d,)` `pre_feedforward_layernorm_2` (the experts' input).
    pub pre_norm_2: Vec<f32>,
    /// `(d,)` `post_feedforward_layernorm_2` (on the experts' sum).
    pub post_norm_2: Vec<f32>,
}

impl G4Moe {
    /// `proj = norm_1(proj) + norm_2(experts(pre_norm_2(x)))`, `proj` holding the MLP's output.
    fn forward(&self, cx: &mut Cx<'_, '_>) -> Result<(), ModelError> {
        let (n, dm, eps, path) = (cx.n, cx.dm, cx.eps, cx.path());
        let nd = n * dm;
        let b = &mut *cx.b;
        let mut dense = vec![0.0f32; nd];
        rms_norm(path, &b.proj[..nd], &self.post_norm_1, eps, &mut dense);
        // The router's input: rms(x) * scale * d^-0.5, multiplied in that order.
        let mut r = vec![0.0f32; nd];
        rms_norm(path, &b.x[..nd], &self.ones, eps, &mut r);
        for row in r.chunks_exact_mut(dm) {
            for (v, &s) in row.iter_mut().zip(&self.router_scale) {
                *v = *v * s * self.root;
            }
        }
        let e = self.per_expert_scale.len();
        let mut logits = vec![0.0f32; n * e];
        linear(&self.moe.router, &r, n, &mut logits, "router.proj")?;
        let mut chosen = Vec::with_capacity(n * self.moe.top_k);
        self.moe.route_logits(path, &mut logits, &mut chosen);
        for (ex, w) in chosen.iter_mut() {
            *w *= self.per_expert_scale[*ex];
        }
        let mut xin = vec![0.0f32; nd];
        rms_norm(path, &b.x[..nd], &self.pre_norm_2, eps, &mut xin);
        let mut y = vec![0.0f32; nd];
        self.moe.mix(path, &xin, dm, &chosen, &mut b.moe, &mut y)?;
        let mut experts = vec![0.0f32; nd];
        rms_norm(path, &y, &self.post_norm_2, eps, &mut experts);
        for ((p, &a), &c) in b.proj[..nd].iter_mut().zip(&dense).zip(&experts) {
            *p = a + c;
        }
        Ok(())
    }

    fn weight_bytes(&self) -> usize {
        let v = [&self.router_scale, &self.per_expert_scale, &self.post_norm_1, &self.pre_norm_2, &self.post_norm_2];
        self.moe.weight_bytes() + v.iter().map(|v| f32_bytes(v)).sum::<usize>()
    }
}

/// The per-layer inputs of a step, `(N, L*P)` into `Buffers::aux`.
pub struct PerLayerInputs {
    /// `(V_ple, L*P)` `embed_tokens_per_layer`.
    pub table: Linear,
    /// `[L*P, d]` `per_layer_model_projection`.
    pub proj: Linear,
    /// `(P,)` `per_layer_projection_norm`.
    pub norm: Vec<f32>,
    /// `f32(sqrt(P))`: the table's embedding scale.
    pub table_scale: f32,
    /// `f32(d^-0.5)`: the projection's scale.
    pub proj_scale: f32,
    /// `f32(2^-0.5)`: the mix's scale.
    pub mix_scale: f32,
}

impl StepInputs for PerLayerInputs {
    fn forward(&self, cx: &mut Cx<'_, '_>) -> Result<(), ModelError> {
        let (n, dm, eps, path) = (cx.n, cx.dm, cx.eps, cx.path());
        let lp = self.table.inp();
        let b = &mut *cx.b;
        let ctx = grow(&mut b.tmp, n * lp); // (N, L*P)
        linear(&self.proj, &b.x[..n * dm], n, ctx, "per_layer_model_projection")?;
        ctx.iter_mut().for_each(|v| *v *= self.proj_scale);
        let out = grow(&mut b.aux, n * lp);
        rms_norm(path, ctx, &self.norm, eps, out); // each layer's P values, rows of P
        let mut tok = vec![0.0f32; lp];
        let ids = cx.step.batch.seqs.iter().flat_map(|s| s.tokens.iter());
        for (row, &id) in out.chunks_exact_mut(lp).zip(ids) {
            self.table
                .row(id as usize, &mut tok)
                .map_err(|e| ModelError::Other(format!("embed_tokens_per_layer: token {id}: {e}")))?;
            for (o, &t) in row.iter_mut().zip(&tok) {
                *o = (*o + t * self.table_scale) * self.mix_scale;
            }
        }
        Ok(())
    }

    fn weight_bytes(&self) -> usize {
        self.table.packed_bytes() + self.proj.packed_bytes() + f32_bytes(&self.norm)
    }
}
