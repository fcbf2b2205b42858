//! Qwen3.5's multi-token-prediction (MTP) head, as a draft head
//! ([`tl_core::Architecture::draft_head`]).
//!
//! The released checkpoints carry it as `mtp.*` (transformers 5.23 has no module for it and
//! drops the tensors on load). Its layout and math, as read from the two implementations
//! that run it:
//!
//! - vLLM, `vllm/model_executor/models/qwen3_5_mtp.py` (`Qwen3_5MultiTokenPredictor`):
//!   `embed_tokens` (the model's), `pre_fc_norm_embedding` and `pre_fc_norm_hidden`
//!   (zero-centred RMSNorms, `x * (1 + w)`), `fc` `(d, 2d)` without bias over the concat
//!   `[normed embedding, normed hidden]` (that order), `mtp_num_hidden_layers` (1)
//!   `Qwen3_5DecoderLayer`s of type `full_attention` (gated attention and the family's MLP
//!   or MoE, `mtp.layers.0.*` under the trunk layer's names), `norm` (zero-centred), then the
//!   model's `lm_head` (tied or not). The hidden state it is given is the trunk's output
//!   after `model.norm`; the pair `(h_p, t_{p+1})` runs at position `p` (vLLM's EAGLE
//!   proposer shifts the tokens, not the positions), and a chained draft is given the head's
//!   own output after `mtp.norm`.
//! - llama.cpp (the llama-cpp-python 0.3.36 sdist): `conversion/qwen.py` `_QwenMtpMixin`
//!   renames `mtp.fc` to `blk.L.nextn.eh_proj`, `mtp.pre_fc_norm_embedding` to
//!   `blk.L.nextn.enorm`, `mtp.pre_fc_norm_hidden` to `blk.L.nextn.hnorm`, `mtp.norm` to
//!   `blk.L.nextn.shared_head_norm` and `mtp.layers.0.*` to block `L`'s usual names
//!   (`L = num_hidden_layers`; `block_count` counts it, `nextn_predict_layers` = 1), every
//!   norm with its `+ 1` baked in. `src/models/qwen35.cpp` `graph_mtp` runs it as above:
//!   `concat(enorm(embd), hnorm(h))`, `eh_proj`, one gated-attention block, the
//!   shared-head norm, the LM head; its `h_nextn` is the trunk's output after
//!   `output_norm`. It places the pair `(h_p, t_{p+1})` at position `p + 1`
//!   (common/speculative.cpp); RoPE is relative, so that is the same head up to rounding.
//!
//! Here: [`MtpInput`] computes `fc([enorm(embed(t)), hnorm(given)])` in place of the
//! embedding, then the stack runs the one layer (its KV is the head's own, layer 0 of a
//! one-layer pool) and `mtp.norm` with the LM head. GGUF files name the same tensors
//! through [`crate::gguf::hf_name`]'s MTP branch.

use tl_core::{BuildCtx, DraftHead, ModelError};
use tl_decoder::fields::{field, invalid};
use tl_decoder::{grow, rms_norm, rope_of, Cx, Ends, Loader, Stack, StackParts, StepInputs};
use tl_quant::Linear;

use crate::{layer, norm_weight, LayerKind, Qwen35Config};

/// The name whose presence says a checkpoint carries the head.
pub const FC: &str = "mtp.fc.weight";

/// The head's input: `fc([rms(e) * enorm, rms(h) * hnorm])`, `e` the token's embedding
/// (the stack has put it in `cx.b.x`), `h` the given row.
pub struct MtpInput {
    /// `(d,)` `1 + w` of `pre_fc_norm_embedding`.
    pub enorm: Vec<f32>,
    /// `(d,)` `1 + w` of `pre_fc_norm_hidden`.
    pub hnorm: Vec<f32>,
    /// `[d, 2d]` `fc`.
    pub fc: Linear,
}

impl StepInputs for MtpInput {
    fn forward(&self, cx: &mut Cx<'_, '_>) -> Result<(), ModelError> {
        let (n, d, path) = (cx.n, cx.dm, cx.path());
        let given = cx.step.given;
        if given.len() != n * d {
            return Err(ModelError::BadBatch(format!(
                "the MTP head needs the target's hidden state of each of its {n} tokens ({} values given)",
                given.len()
            )));
        }
        let e = grow(&mut cx.b.h, n * d);
        rms_norm(path, &cx.b.x[..n * d], &self.enorm, cx.eps, e);
        let h = grow(&mut cx.b.proj, n * d);
        rms_norm(path, given, &self.hnorm, cx.eps, h);
        // Each row: its normed embedding, then its normed hidden state.
        let cat = grow(&mut cx.b.tmp, n * 2 * d);
        for (i, row) in cat.chunks_exact_mut(2 * d).enumerate() {
            row[..d].copy_from_slice(&cx.b.h[i * d..(i + 1) * d]);
            row[d..].copy_from_slice(&cx.b.proj[i * d..(i + 1) * d]);
        }
        self.fc
            .forward(&cx.b.tmp[..n * 2 * d], n, &mut cx.b.x[..n * d])
            .map_err(|e| ModelError::Other(format!("{FC}: {e}")))
    }

    fn weight_bytes(&self) -> usize {
        self.fc.packed_bytes() + 4 * (self.enorm.len() + self.hnorm.len())
    }
}

/// `mtp_num_hidden_layers`: absent or 1 (what every released checkpoint has and what
/// llama.cpp runs); 0 says there is no head; more is refused.
fn layers(ctx: &BuildCtx<'_>) -> Result<usize, ModelError> {
    match field(ctx.config.json(), "mtp_num_hidden_layers") {
        None => Ok(1),
        Some(v) => match v.as_u64() {
            Some(n @ (0 | 1)) => Ok(n as usize),
            _ => Err(invalid("mtp_num_hidden_layers", v, "tl runs MTP heads of one layer (0 or 1)").into()),
        },
    }
}

/// The head of the checkpoint `ctx` reads, or `None` when it has none (no [`FC`]).
pub fn load(cfg: &Qwen35Config, ctx: &BuildCtx<'_>) -> Result<Option<DraftHead>, ModelError> {
    if !ctx.weights.contains(FC) || layers(ctx)? == 0 {
        return Ok(None);
    }
    let experts = tl_decoder::StackedExperts { inner: ctx.weights };
    let ctx = &BuildCtx { weights: &experts, ..*ctx };
    let w = Loader::new(ctx)?;
    let b = &cfg.base;
    let d = b.hidden_size;
    let norm = |name: &str| norm_weight(&w, name, d, cfg.llama_cpp);
    let input = MtpInput {
        enorm: norm("mtp.pre_fc_norm_embedding.weight")?,
        hnorm: norm("mtp.pre_fc_norm_hidden.weight")?,
        fc: w.matrix(FC, d, 2 * d)?,
    };
    let layers = vec![layer(&w, ctx, cfg, "mtp.layers.0", LayerKind::Full)?];
    let ends = Ends::load(&w, b.vocab_size, d, b.tie_word_embeddings, norm("mtp.norm.weight")?)?;
    let shape = tl_decoder::StepShape { n_layers: 1, ..b.step_shape() };
    let parts = StackParts {
        family: "qwen3_5 MTP head",
        shape,
        hidden: d,
        eps: b.rms_norm_eps,
        ends,
        ropes: vec![rope_of(b.rope_theta, cfg.rotary_dim, b.rope_scaling.as_ref())],
        layers,
    };
    let model = Stack::new(parts, ctx.device)?.with_inputs(Box::new(input));
    let kv = tl_core::KvGeometry { n_layers: 1, ..b.kv_geometry(ctx.engine.kv.block_tokens) };
    Ok(Some(DraftHead { model: Box::new(model), kv }))
}
