//! The Qwen3 forward, one step, top to bottom, composed of tl-decoder's blocks.
//!
//! Qwen3 is the Llama step with one addition: after the fused q/k/v projection (no
//! biases) every query head and every key head is RMS-normed over its own `head_dim`
//! values, with the layer's `q_norm` / `k_norm` weight (`(D,)` each) and the model's
//! `rms_norm_eps`, before RoPE (Hugging Face `Qwen3Attention`: `q_norm(q_proj(x)
//! .view(..., D))`, then `apply_rotary_pos_emb`). `D` is the config's `head_dim`, which
//! need not be `d / H` (the q projection is `H*D` wide, the o projection reads `H*D`).
//!
//! Per layer: RMSNorm, q/k/v, q/k head norms, RoPE at the absolute positions, K and V of
//! the new tokens into the pool as f16, attention of each new token over its visible keys,
//! o projection + residual, RMSNorm, gate/up, SwiGLU, down + residual; then the final norm
//! and the LM head on the rows asked for.
//!
//! Batch invariance holds as for Llama (docs/forward.md): the head norm, like every other
//! block here, computes each row by one function of that row alone.

use std::sync::Mutex;

use tl_core::{BuildCtx, ForwardBatch, ForwardCtx, ForwardOutput, Model, ModelError};
use tl_decoder::{
    add, attention, embed, f32_bytes, grow, head_rms_norm, linear, rms_norm, swiglu, write_kv, Attn, DecoderConfig,
    LmHead, Loader, Path, Plan, Proj, RopeTables, Step, StepShape,
};
use tl_quant::Linear;

/// One layer's weights.
struct Layer {
    /// `(d,)` RMSNorm weight before attention.
    input_norm: Vec<f32>,
    /// `[H*D + 2*H_kv*D, d]`: q, k, v stacked.
    qkv: Proj,
    /// `(D,)` the query heads' RMSNorm weight.
    q_norm: Vec<f32>,
    /// `(D,)` the key heads' RMSNorm weight.
    k_norm: Vec<f32>,
    /// `[d, H*D]`.
    o: Linear,
    /// `(d,)` RMSNorm weight before the MLP.
    post_norm: Vec<f32>,
    /// `[2*I, d]`: gate, up stacked.
    gate_up: Proj,
    /// `[d, I]`.
    down: Linear,
}

/// A step's buffers, kept between steps (grown to the largest step seen, never shrunk).
#[derive(Default)]
struct Buffers {
    /// `(N, d)` the residual stream.
    x: Vec<f32>,
    /// `(N, d)` the RMSNorm of `x`, a sublayer's input.
    h: Vec<f32>,
    /// `(N, H*D + 2*H_kv*D)` queries, keys, values side by side.
    qkv: Vec<f32>,
    /// `(N, H*D)` attention output, heads concatenated.
    att: Vec<f32>,
    /// `(N, d)` the o and down projections' outputs, before the residual add.
    proj: Vec<f32>,
    /// `(N, 2*I)` gate and up side by side.
    gu: Vec<f32>,
    /// `(N, I)` `silu(gate) * up`.
    act: Vec<f32>,
    /// `(N, D/2)` cos and sin of each token's angles.
    rope: RopeTables,
    /// Scratch for projections that could not be fused.
    tmp: Vec<f32>,
}

/// A loaded Qwen3: immutable weights; per-sequence state lives in the KV pool.
struct Qwen3 {
    cfg: DecoderConfig,
    /// `(V, d)` token embeddings, or `None` when tied to the LM head.
    embed: Option<Linear>,
    layers: Vec<Layer>,
    /// `(d,)` final RMSNorm weight.
    norm: Vec<f32>,
    /// `[V, d]`.
    lm_head: Linear,
    /// `(D/2,)` RoPE inverse frequencies (`rope_theta`, and the config's scaling if any).
    inv_freq: Vec<f32>,
    /// Every layer's attention: global, scale `1 / sqrt(D)`.
    attn: Attn,
    /// The step's buffers; a lock because `forward` takes `&self`.
    bufs: Mutex<Buffers>,
}

/// Load a Qwen3 from `ctx` (its typed config is a [`DecoderConfig`]).
pub fn build(ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
    if !ctx.device.is_cpu() {
        return Err(ModelError::Other(format!("the Qwen3 forward runs on the CPU, not {:?}", ctx.device)));
    }
    let cfg = ctx.config.arch_config::<DecoderConfig>()?.clone();
    let w = Loader::new(&ctx)?;
    let (d, v, inter, hd) = (cfg.hidden_size, cfg.vocab_size, cfg.intermediate_size, cfg.head_dim);
    let (qw, kvw) = (cfg.q_width(), cfg.kv_width());
    let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
    for i in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{i}");
        let proj = |name: &str, out, inp| w.proj(&format!("{p}.{name}"), out, inp);
        let vector = |name: &str, len| w.vector(&format!("{p}.{name}.weight"), len);
        layers.push(Layer {
            input_norm: vector("input_layernorm", d)?,
            qkv: Proj::new(vec![
                proj("self_attn.q_proj", qw, d)?,
                proj("self_attn.k_proj", kvw, d)?,
                proj("self_attn.v_proj", kvw, d)?,
            ]),
            q_norm: vector("self_attn.q_norm", hd)?,
            k_norm: vector("self_attn.k_norm", hd)?,
            o: proj("self_attn.o_proj", d, qw)?,
            post_norm: vector("post_attention_layernorm", d)?,
            gate_up: Proj::new(vec![proj("mlp.gate_proj", inter, d)?, proj("mlp.up_proj", inter, d)?]),
            down: proj("mlp.down_proj", d, inter)?,
        });
    }
    let norm = w.vector("model.norm.weight", d)?;
    let table = w.matrix("model.embed_tokens.weight", v, d)?;
    // Tied (Qwen3-0.6B, 1.7B, 4B): the embedding table is the LM head, kept once.
    let (embed, lm_head) =
        if cfg.tie_word_embeddings { (None, table) } else { (Some(table), w.matrix("lm_head.weight", v, d)?) };
    Ok(Box::new(Qwen3 {
        inv_freq: cfg.inv_freq(), // rope_type default, or llama3 as the config says
        attn: Attn::new(cfg.num_attention_heads, cfg.num_key_value_heads, hd),
        cfg,
        embed,
        layers,
        norm,
        lm_head,
        bufs: Mutex::new(Buffers::default()),
    }))
}

impl Model for Qwen3 {
    fn hidden_size(&self) -> usize {
        self.cfg.hidden_size
    }

    fn weight_bytes(&self) -> Option<usize> {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                l.qkv.packed_bytes()
                    + l.o.packed_bytes()
                    + l.gate_up.packed_bytes()
                    + l.down.packed_bytes()
                    + f32_bytes(&l.input_norm)
                    + f32_bytes(&l.q_norm)
                    + f32_bytes(&l.k_norm)
                    + f32_bytes(&l.post_norm)
            })
            .sum();
        let embed = self.embed.as_ref().map_or(0, Linear::packed_bytes);
        Some(layers + embed + self.lm_head.packed_bytes() + f32_bytes(&self.norm) + f32_bytes(&self.inv_freq))
    }

    fn forward(&self, batch: &ForwardBatch, ctx: &mut ForwardCtx<'_>) -> Result<ForwardOutput, ModelError> {
        let cfg = &self.cfg;
        let shape = StepShape {
            n_layers: cfg.num_hidden_layers,
            n_kv_heads: cfg.num_key_value_heads,
            head_dim: cfg.head_dim,
            vocab_size: cfg.vocab_size,
        };
        let plan = Plan::new(batch, shape, &*ctx.kv)?; // checked before any slab is written
        let step = Step { path: Path::best(), batch, plan: &plan };
        let path = step.path;
        let n = plan.n_tokens();
        let (dm, eps, inter) = (cfg.hidden_size, cfg.rms_norm_eps, cfg.intermediate_size);
        let attn = &self.attn;
        let (qkv_w, qw) = (attn.qkv_width(), attn.heads * attn.head_dim);

        // A panic elsewhere while holding the lock leaves only stale numbers, which every
        // step overwrites before reading.
        let mut guard = self.bufs.lock().unwrap_or_else(|e| e.into_inner());
        let b = &mut *guard;

        let table = self.embed.as_ref().unwrap_or(&self.lm_head); // (V, d)
        embed(table, batch, grow(&mut b.x, n * dm))?; // (N, d) the residual stream
        b.rope.fill(&plan.pos, &self.inv_freq); // (N, D/2) cos, sin

        for (l, layer) in self.layers.iter().enumerate() {
            let li = l as u32;
            let x = &mut b.x[..n * dm];
            let h = grow(&mut b.h, n * dm); // (N, d)
            rms_norm(path, x, &layer.input_norm, eps, h);
            let qkv = grow(&mut b.qkv, n * qkv_w); // (N, H*D + 2*H_kv*D)
            layer.qkv.forward(h, n, qkv, &mut b.tmp, "qkv_proj")?;
            // Qwen3's addition: each q head and each k head RMS-normed over D, before RoPE.
            head_rms_norm(path, qkv, qkv_w, (attn.heads, &layer.q_norm), (attn.kv_heads, &layer.k_norm), eps);
            b.rope.apply(qkv, qkv_w, 0, attn.heads + attn.kv_heads); // q and k heads
            write_kv(&step, &mut *ctx.kv, li, attn, qkv)?;
            let att = grow(&mut b.att, n * qw); // (N, H*D)
            attention(&step, &*ctx.kv, li, attn, qkv, att)?;
            let proj = grow(&mut b.proj, n * dm); // (N, d)
            linear(&layer.o, att, n, proj, "o_proj")?;
            add(x, proj, dm);

            rms_norm(path, x, &layer.post_norm, eps, h);
            let gu = grow(&mut b.gu, n * 2 * inter); // (N, 2I) gate | up
            layer.gate_up.forward(h, n, gu, &mut b.tmp, "gate_up_proj")?;
            let act = grow(&mut b.act, n * inter); // (N, I)
            swiglu(path, gu, act, inter);
            linear(&layer.down, act, n, proj, "down_proj")?;
            add(x, proj, dm);
        }

        let head = LmHead { norm: &self.norm, eps, head: &self.lm_head };
        head.run(path, &b.x, &plan, ctx, &mut b.h)
    }
}
