//! The Gemma 3 layer, top to bottom, composed from tl-decoder's blocks; the skeleton
//! around it (embedding, RoPE tables, final norm and head) is tl-decoder's `Stack`.
//!
//! The reference is transformers' `modeling_gemma3.py` (`Gemma3ForCausalLM`), float32:
//!
//! ```text
//! x = embed[ids] * sqrt(d)                       (f32 scale; not applied to the tied head)
//! per layer (windowed or global):
//!     h = norm_in(x);  q, k, v = h Wq, h Wk, h Wv
//!     q, k = norm_q(q), norm_k(k)                 (per head, over D)
//!     q, k = rope(q, k; base of the layer's kind) (rotate-half, all D dims)
//!     a = softmax(q k^T * query_pre_attn_scalar^-0.5 over the visible keys) v
//!     x = x + norm_post_attn(a Wo)
//!     h = norm_pre_ffn(x)
//!     x = x + norm_post_ffn((gelu_tanh(h Wgate) * h Wup) Wdown)
//! logits = norm_final(x) E^T
//! ```
//!
//! Every norm is `x * rsqrt(mean(x^2) + eps) * (1 + w)`, its `1 + w` computed at load
//! (weights.rs). A windowed layer's query at position i sees keys j with
//! `0 <= i - j < sliding_window` (its own included), in prefill and decode alike; a
//! global layer's every `j <= i`.
//!
//! The N tokens of a step are laid out in batch order; every buffer is
//! `(N, ...)` row-major and kept between steps. Batch, chunk and thread invariance hold
//! as for every tl-decoder forward: each block computes a row (or a (token, KV head)
//! attention task over exactly its visible keys, ascending) by one function of that row
//! alone.

use tl_core::ModelError;
use tl_decoder::{f32_bytes, AttnBlock, Cx, LayerBody, Mlp};

/// One Gemma 3 layer: the attention and MLP sublayers with a norm before and after each.
pub struct Gemma3Layer {
    /// `(d,)` `1 + w` of the norm before attention (`input_layernorm`).
    pub input_norm: Vec<f32>,
    /// Per-head q/k norms, the layer kind's window and RoPE table, the score scale.
    pub attn: AttnBlock,
    /// `(d,)` `1 + w` of the norm of the attention output (`post_attention_layernorm`).
    pub post_attn_norm: Vec<f32>,
    /// `(d,)` `1 + w` of the norm before the MLP (`pre_feedforward_layernorm`).
    pub pre_ffn_norm: Vec<f32>,
    /// GELU-tanh gated.
    pub mlp: Mlp,
    /// `(d,)` `1 + w` of the norm of the MLP output (`post_feedforward_layernorm`).
    pub post_ffn_norm: Vec<f32>,
}

impl LayerBody for Gemma3Layer {
    fn forward(&self, layer: u32, cx: &mut Cx<'_, '_>) -> Result<(), ModelError> {
        // Attention sublayer: norm, q/k/v, per-head q/k norms, RoPE, the KV writes,
        // attention over the visible keys, o projection, post-norm, residual.
        cx.norm_x(&self.input_norm); // h (N, d)
        self.attn.forward(layer, cx)?; // proj (N, d)
        cx.norm_proj(&self.post_attn_norm); // h = norm(proj)
        cx.add_h(); // x += h
                    // MLP sublayer: norm, gate/up, GELU-tanh gate, down, post-norm, residual.
        cx.norm_x(&self.pre_ffn_norm);
        self.mlp.forward(cx)?;
        cx.norm_proj(&self.post_ffn_norm);
        cx.add_h();
        Ok(())
    }

    fn weight_bytes(&self) -> usize {
        let norms = [&self.input_norm, &self.post_attn_norm, &self.pre_ffn_norm, &self.post_ffn_norm];
        self.attn.weight_bytes() + self.mlp.weight_bytes() + norms.iter().map(|v| f32_bytes(v)).sum::<usize>()
    }

    fn adaptable(&self, out: &mut Vec<tl_core::Adaptable>) {
        self.attn.lora.adaptable(out);
        self.mlp.lora.adaptable(out);
    }
}
