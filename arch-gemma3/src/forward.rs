//! The Gemma 3 forward, one step, top to bottom, composed from tl-decoder's blocks.
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
//! The N tokens of a step are laid out in batch order ([`Plan`]); every buffer is
//! `(N, ...)` row-major and kept between steps. Batch, chunk and thread invariance hold
//! as for every tl-decoder forward: each block computes a row (or a (token, KV head)
//! attention task over exactly its visible keys, ascending) by one function of that row
//! alone.

use std::sync::Mutex;

use candle_core::Device;
use tl_core::{ForwardBatch, ForwardCtx, ForwardOutput, Model, ModelError};
use tl_decoder::{
    add, attention, embed, f32_bytes, gelu_tanh_gated, grow, head_rms_norm, inv_freq_default, linear, rms_norm,
    write_kv, Attn, LmHead, Path, Plan, RopeTables, Step, StepShape,
};

use crate::config::{Gemma3Config, LayerKind};
use crate::weights::Gemma3Weights;

/// A step's buffers, kept between steps so a step allocates nothing once they have grown
/// to its size.
#[derive(Default)]
struct Buffers {
    /// `(N, d)` the residual stream.
    x: Vec<f32>,
    /// `(N, d)` a norm's output: a sublayer's input, or its normed output.
    h: Vec<f32>,
    /// `(N, H*D + 2*H_kv*D)` queries, keys, values side by side.
    qkv: Vec<f32>,
    /// `(N, H*D)` attention output, heads concatenated.
    att: Vec<f32>,
    /// `(N, d)` the o and down projections' outputs, before their post-norms.
    proj: Vec<f32>,
    /// `(N, 2*I)` gate and up side by side.
    gu: Vec<f32>,
    /// `(N, I)` `gelu_tanh(gate) * up`.
    act: Vec<f32>,
    /// `(N, D/2)` cos and sin at each token's position, windowed layers' base.
    rope_local: RopeTables,
    /// `(N, D/2)` the same, global layers' base.
    rope_global: RopeTables,
    /// Scratch for projections that could not be fused, and the LM head's rows.
    tmp: Vec<f32>,
}

/// A loaded Gemma 3: immutable weights; per-sequence state lives in the KV pool.
pub struct Gemma3 {
    cfg: Gemma3Config,
    w: Gemma3Weights,
    /// `sqrt(d)` rounded to f32, as transformers' `embed_scale` buffer holds it.
    embed_scale: f32,
    /// `(D/2,)` inverse frequencies of the windowed layers (`rope_local_base_freq`).
    inv_freq_local: Vec<f32>,
    /// `(D/2,)` inverse frequencies of the global layers (`rope_theta`).
    inv_freq_global: Vec<f32>,
    /// Attention of a windowed layer: scale `query_pre_attn_scalar^-0.5`, the window.
    attn_local: Attn,
    /// Attention of a global layer: the same scale, no window.
    attn_global: Attn,
    /// The step's buffers; a lock because `forward` takes `&self`.
    bufs: Mutex<Buffers>,
}

impl Gemma3 {
    /// The model from its config and weights, on the CPU.
    pub fn new(cfg: Gemma3Config, w: Gemma3Weights, device: &Device) -> Result<Gemma3, ModelError> {
        if !device.is_cpu() {
            return Err(ModelError::Other(format!("the Gemma 3 forward runs on the CPU, not {device:?}")));
        }
        let (h, h_kv, d) = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim);
        // transformers: `self.scaling = query_pre_attn_scalar**-0.5` (a Python float),
        // applied to f32 scores, so rounded to f32.
        let scale = cfg.query_pre_attn_scalar.powf(-0.5) as f32;
        let attn_global = Attn { scale, window: None, ..Attn::new(h, h_kv, d) };
        let attn_local = Attn { window: cfg.window(LayerKind::Windowed), ..attn_global };
        Ok(Gemma3 {
            embed_scale: (cfg.hidden_size as f64).sqrt() as f32,
            inv_freq_local: inv_freq_default(cfg.rope_local_theta, d),
            inv_freq_global: inv_freq_default(cfg.rope_theta, d),
            attn_local,
            attn_global,
            cfg,
            w,
            bufs: Mutex::new(Buffers::default()),
        })
    }
}

impl Model for Gemma3 {
    fn hidden_size(&self) -> usize {
        self.cfg.hidden_size
    }

    fn weight_bytes(&self) -> Option<usize> {
        let layers: usize = self
            .w
            .layers
            .iter()
            .map(|l| {
                l.qkv.packed_bytes()
                    + l.o.packed_bytes()
                    + l.gate_up.packed_bytes()
                    + l.down.packed_bytes()
                    + [&l.input_norm, &l.q_norm, &l.k_norm, &l.post_attn_norm, &l.pre_ffn_norm, &l.post_ffn_norm]
                        .iter()
                        .map(|v| f32_bytes(v))
                        .sum::<usize>()
            })
            .sum();
        let embed = self.w.embed.as_ref().map_or(0, |e| e.packed_bytes());
        let rope = f32_bytes(&self.inv_freq_local) + f32_bytes(&self.inv_freq_global);
        Some(layers + embed + self.w.lm_head.packed_bytes() + f32_bytes(&self.w.norm) + rope)
    }

    fn forward(&self, batch: &ForwardBatch, ctx: &mut ForwardCtx<'_>) -> Result<ForwardOutput, ModelError> {
        let cfg = &self.cfg;
        let shape = StepShape {
            n_layers: cfg.n_layers(),
            n_kv_heads: cfg.num_key_value_heads,
            head_dim: cfg.head_dim,
            vocab_size: cfg.vocab_size,
        };
        let plan = Plan::new(batch, shape, &*ctx.kv)?;
        let step = Step { path: Path::best(), batch, plan: &plan };
        let path = step.path;
        let n = plan.n_tokens();
        let (dm, eps, inter) = (cfg.hidden_size, cfg.rms_norm_eps, cfg.intermediate_size);
        let (heads, kv_heads) = (cfg.num_attention_heads, cfg.num_key_value_heads);
        let (qkv_w, qw) = (self.attn_global.qkv_width(), cfg.q_width());

        // A panic elsewhere while holding the lock leaves only stale numbers, which every
        // step overwrites before reading.
        let mut guard = self.bufs.lock().unwrap_or_else(|e| e.into_inner());
        let b = &mut *guard;

        // (N, d) the residual stream: embedding rows times sqrt(d), one f32 product each
        // (transformers: `embedding(ids) * embed_scale`). The tied head stays unscaled.
        let x = grow(&mut b.x, n * dm);
        embed(self.w.embedding(), batch, x)?;
        x.iter_mut().for_each(|v| *v *= self.embed_scale);
        b.rope_local.fill(&plan.pos, &self.inv_freq_local); // (N, D/2) cos, sin
        b.rope_global.fill(&plan.pos, &self.inv_freq_global); // (N, D/2) cos, sin

        for (l, (layer, &kind)) in self.w.layers.iter().zip(&cfg.layers).enumerate() {
            let li = l as u32;
            let (attn, rope) = match kind {
                LayerKind::Windowed => (&self.attn_local, &b.rope_local),
                LayerKind::Global => (&self.attn_global, &b.rope_global),
            };
            // Attention sublayer: norm, q/k/v, per-head q/k norms, RoPE, the KV writes,
            // attention over the visible keys, o projection, post-norm, residual.
            let x = &mut b.x[..n * dm];
            let h = grow(&mut b.h, n * dm); // (N, d)
            rms_norm(path, x, &layer.input_norm, eps, h);
            let qkv = grow(&mut b.qkv, n * qkv_w); // (N, H*D + 2*H_kv*D)
            layer.qkv.forward(h, n, qkv, &mut b.tmp, "qkv_proj")?;
            head_rms_norm(path, qkv, qkv_w, (heads, &layer.q_norm), (kv_heads, &layer.k_norm), eps);
            rope.apply(qkv, qkv_w, 0, heads + kv_heads); // q and k heads
            write_kv(&step, &mut *ctx.kv, li, attn, qkv)?;
            let att = grow(&mut b.att, n * qw); // (N, H*D)
            attention(&step, &*ctx.kv, li, attn, qkv, att)?;
            let proj = grow(&mut b.proj, n * dm); // (N, d)
            linear(&layer.o, att, n, proj, "o_proj")?;
            rms_norm(path, proj, &layer.post_attn_norm, eps, h);
            add(x, h, dm);

            // MLP sublayer: norm, gate/up, GELU-tanh gate, down, post-norm, residual.
            rms_norm(path, x, &layer.pre_ffn_norm, eps, h);
            let gu = grow(&mut b.gu, n * 2 * inter); // (N, 2I) gate | up
            layer.gate_up.forward(h, n, gu, &mut b.tmp, "gate_up_proj")?;
            let act = grow(&mut b.act, n * inter); // (N, I)
            gelu_tanh_gated(path, gu, act, inter);
            linear(&layer.down, act, n, proj, "down_proj")?;
            rms_norm(path, proj, &layer.post_ffn_norm, eps, h);
            add(x, h, dm);
        }

        // Final norm and the (tied, unscaled) LM head over the rows that need logits.
        let head = LmHead { norm: &self.w.norm, eps, head: &self.w.lm_head };
        head.run(path, &b.x, &plan, ctx, &mut b.tmp)
    }
}
