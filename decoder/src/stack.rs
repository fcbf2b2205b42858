//! The skeleton every family's forward shares: the step plan, the buffers kept between
//! steps, the embedding, the RoPE tables, the layers in order, the final norm and the LM
//! head. A family supplies what differs: its layers ([`LayerBody`], usually the shared
//! [`PreNorm`](crate::PreNorm), composed of the sublayer blocks in blocks.rs and moe.rs),
//! its [`Ends`] and its RoPEs. docs/forward.md walks a step
//! through with every shape.
//!
//! A step is a batch of sequences, each a run of new tokens at absolute positions. The N
//! tokens of the step are laid out in batch order ([`Plan`]); every per-token buffer is
//! `(N, ...)`, row-major, and lives in [`Buffers`], kept between steps.
//!
//! Batch invariance (bit for bit): every projection goes through `tl_quant::Linear`,
//! whose output elements each use one fixed summation order whatever the number of rows
//! or threads; the row-wise blocks compute each row by one function of that row alone;
//! attention of token t reads exactly its visible keys of its own sequence, in ascending
//! order. So nothing a token computes depends on the other tokens of the step, nor on
//! how rayon splits the work, nor (`crate::lanes`) on the instruction set.

use std::sync::Mutex;

use candle_core::Device;
use tl_core::{ForwardBatch, ForwardCtx, ForwardOutput, Model, ModelError};
use tl_quant::Linear;

use crate::attention::Step;
use crate::cx::{Buffers, Cx, LayerBody};
use crate::head::{embed, LmHead};
use crate::lanes::Path;
use crate::loader::Loader;
use crate::lora::LoraRows;
use crate::plan::{Plan, StepShape};
use crate::proj::{f32_bytes, grow};
use crate::rope::{Rope, RopeTables};

/// The two ends of a decoder: the embedding table, the final norm and the LM head.
pub struct Ends {
    /// `(V, d)` the embedding table when it is not tied to the head.
    pub embed: Option<Linear>,
    /// `[V, d]` the LM head; with tied embeddings also the embedding table, kept once.
    pub lm_head: Linear,
    /// `(d,)` the final RMSNorm's weight, as the forward multiplies by it.
    pub norm: Vec<f32>,
    /// `Some(s)`: embedding rows are multiplied by `s` (one f32 product each; Gemma's
    /// `sqrt(d)`); the tied head stays unscaled.
    pub embed_scale: Option<f32>,
    /// `Some(c)`: every logit becomes `c * tanh(logit / c)` (Gemma 2 and 4's final
    /// softcap: a division, tanh, a product, each rounded to f32 as transformers does).
    pub softcap: Option<f32>,
}

impl Ends {
    /// Hugging Face's names: `model.embed_tokens.weight` `(V, d)` and, untied,
    /// `lm_head.weight` (tied: the table is the head, and a stored `lm_head.weight` is
    /// ignored as transformers ignores it; untied, a missing one is an error naming it).
    /// `norm` is the final norm's weight, which the family reads (`model.norm.weight`,
    /// as its norms need it).
    pub fn load(w: &Loader<'_>, vocab: usize, d: usize, tied: bool, norm: Vec<f32>) -> Result<Ends, ModelError> {
        let table = w.matrix("model.embed_tokens.weight", vocab, d)?;
        let (embed, lm_head) = if tied { (None, table) } else { (Some(table), w.matrix("lm_head.weight", vocab, d)?) };
        Ok(Ends { embed, lm_head, norm, embed_scale: None, softcap: None })
    }

    /// The `(V, d)` embedding table (rows widened to f32 on lookup).
    pub fn embedding(&self) -> &Linear {
        self.embed.as_ref().unwrap_or(&self.lm_head)
    }

    fn bytes(&self) -> usize {
        self.embed.as_ref().map_or(0, Linear::packed_bytes) + self.lm_head.packed_bytes() + f32_bytes(&self.norm)
    }
}

/// What a family hands [`Stack::new`].
pub struct StackParts<L> {
    /// The family, for errors ("the Qwen3 forward runs on the CPU").
    pub family: &'static str,
    /// KV geometry and vocabulary a step is checked against.
    pub shape: StepShape,
    /// Hidden size d.
    pub hidden: usize,
    /// RMSNorm epsilon of every norm.
    pub eps: f32,
    /// Embedding, final norm, LM head.
    pub ends: Ends,
    /// Each RoPE a layer may apply (by index): `(D/2,)` inverse frequencies and a scale.
    pub ropes: Vec<Rope>,
    /// The layers, in order.
    pub layers: Vec<L>,
}

/// What a family computes once per step from the tokens and the scaled embeddings, before
/// the first layer, for its layers to read (Gemma 4's per-layer inputs, into
/// [`Buffers::aux`]). Each token's rows must be a function of that token's alone.
pub trait StepInputs: Send + Sync {
    /// Fill the buffers the layers read; `cx.b.x` holds the step's embeddings.
    fn forward(&self, cx: &mut Cx<'_, '_>) -> Result<(), ModelError>;
    /// Bytes its weights hold.
    fn weight_bytes(&self) -> usize;
}

/// A loaded decoder: immutable weights; per-sequence state lives in the KV pool.
pub struct Stack<L> {
    p: StackParts<L>,
    /// Run after the embedding, before the first layer.
    inputs: Option<Box<dyn StepInputs>>,
    /// The step's buffers; a lock because `forward` takes `&self` (steps do not overlap
    /// in practice; a second concurrent step would wait).
    bufs: Mutex<Buffers>,
}

impl<L: LayerBody> Stack<L> {
    /// The model, on the CPU (the only device the blocks run on).
    pub fn new(parts: StackParts<L>, device: &Device) -> Result<Stack<L>, ModelError> {
        if !device.is_cpu() {
            return Err(ModelError::Other(format!("the {} forward runs on the CPU, not {device:?}", parts.family)));
        }
        Ok(Stack { p: parts, inputs: None, bufs: Mutex::new(Buffers::default()) })
    }

    /// The model with `inputs` computed each step before the first layer.
    pub fn with_inputs(mut self, inputs: Box<dyn StepInputs>) -> Stack<L> {
        self.inputs = Some(inputs);
        self
    }
}

impl<L: LayerBody> Model for Stack<L> {
    fn hidden_size(&self) -> usize {
        self.p.hidden
    }

    fn adaptable(&self) -> Vec<tl_core::Adaptable> {
        let mut out = Vec::new();
        self.p.layers.iter().for_each(|l| l.adaptable(&mut out));
        out
    }

    fn weight_bytes(&self) -> Option<usize> {
        let layers: usize = self.p.layers.iter().map(LayerBody::weight_bytes).sum();
        let rope: usize = self.p.ropes.iter().map(|r| f32_bytes(&r.inv_freq)).sum();
        let inputs = self.inputs.as_ref().map_or(0, |i| i.weight_bytes());
        Some(layers + self.p.ends.bytes() + rope + inputs)
    }

    fn forward(&self, batch: &ForwardBatch, ctx: &mut ForwardCtx<'_>) -> Result<ForwardOutput, ModelError> {
        let p = &self.p;
        let plan = Plan::new(batch, p.shape, &*ctx.kv, ctx.layout)?; // checked before any slab is written
        let lora = LoraRows::new(batch);
        let step = Step { path: Path::best(), batch, plan: &plan, spares: ctx.spares, given: ctx.given, lora: &lora };
        let (n, dm) = (plan.n_tokens(), p.hidden);

        // A panic elsewhere while holding the lock leaves only stale numbers, which every
        // step overwrites before reading.
        let mut guard = self.bufs.lock().unwrap_or_else(|e| e.into_inner());
        let b = &mut *guard;

        let x = grow(&mut b.x, n * dm); // (N, d) the residual stream
        embed(p.ends.embedding(), batch, x)?;
        if let Some(s) = p.ends.embed_scale {
            x.iter_mut().for_each(|v| *v *= s);
        }
        b.ropes.resize_with(p.ropes.len(), RopeTables::default);
        for (table, rope) in b.ropes.iter_mut().zip(&p.ropes) {
            table.fill(&plan.pos, rope); // (N, D/2) cos, sin
        }

        let mut cx = Cx { step, kv: &mut *ctx.kv, n, dm, eps: p.eps, b };
        if let Some(inputs) = &self.inputs {
            inputs.forward(&mut cx)?;
        }
        for (l, layer) in p.layers.iter().enumerate() {
            layer.forward(l as u32, &mut cx)?;
        }

        let head = LmHead { norm: &p.ends.norm, eps: p.eps, head: &p.ends.lm_head };
        let mut out = head.run(step.path, &b.x, &plan, ctx, &mut b.tmp)?;
        if let Some(c) = p.ends.softcap {
            out.logits.data.iter_mut().for_each(|v| *v = (*v / c).tanh() * c);
        }
        Ok(out)
    }
}
