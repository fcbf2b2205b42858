//! What a layer is handed for one step ([`Cx`]: the step, the KV slabs, the buffers kept
//! between steps) and what a layer is ([`LayerBody`]). The ground the blocks stand on:
//! it imports no block, so every block and the stack can import it.

use tl_core::{KvSlabs, ModelError};

use crate::attention::Step;
use crate::lanes::Path;
use crate::lora::LoraBuffers;
use crate::proj::grow;
use crate::rope::RopeTables;
use crate::rowops::{add, rms_norm};

/// A step's buffers, kept between steps so a step allocates nothing once they have grown
/// to its size (the largest step seen so far). Blocks grow the ones they use.
#[derive(Default)]
pub struct Buffers {
    /// `(N, d)` the residual stream.
    pub x: Vec<f32>,
    /// `(N, d)` a norm's output: a sublayer's input, or its normed output.
    pub h: Vec<f32>,
    /// `(N, H*D + 2*H_kv*D)` queries, keys, values side by side.
    pub qkv: Vec<f32>,
    /// `(N, H*D)` attention output, heads concatenated.
    pub att: Vec<f32>,
    /// `(N, d)` a sublayer's output (the o or down projection), before the residual add.
    pub proj: Vec<f32>,
    /// `(N, 2*I)` gate and up side by side.
    pub gu: Vec<f32>,
    /// `(N, I)` the gated activation.
    pub act: Vec<f32>,
    /// Scratch for projections that could not be fused, and the LM head's rows.
    pub tmp: Vec<f32>,
    /// A token mixer's second buffer: the Gated DeltaNet's conv output, the attention
    /// output gate.
    pub mix: Vec<f32>,
    /// One `(N, D/2)` cos/sin table per RoPE frequency vector of the model.
    pub ropes: Vec<RopeTables>,
    /// The mixture-of-experts block's scratch.
    pub moe: MoeBuffers,
    /// A family's per-step inputs beside the residual ([`crate::StepInputs`]: Gemma 4's
    /// `(N, L*P)` per-layer inputs), and any scratch of its own blocks after them.
    pub aux: Vec<f32>,
    /// A family's block scratch (Gemma 4's padded q/k/v rows).
    pub aux2: Vec<f32>,
    /// The LoRA products' scratch.
    pub lora: LoraBuffers,
}

/// What a layer body is handed for one step: the step, the KV slabs and the buffers.
pub struct Cx<'s, 'a> {
    /// Path, batch and plan.
    pub step: Step<'a>,
    /// The KV slabs the attention blocks write and read.
    pub kv: &'s mut dyn KvSlabs,
    /// Tokens in the step, N.
    pub n: usize,
    /// Hidden size d.
    pub dm: usize,
    /// The model's RMSNorm epsilon.
    pub eps: f32,
    /// The step's buffers.
    pub b: &'s mut Buffers,
}

impl Cx<'_, '_> {
    /// The vector path of the step.
    pub fn path(&self) -> Path {
        self.step.path
    }

    /// `h = rms_norm(x) * w`: a sublayer's input.
    pub fn norm_x(&mut self, w: &[f32]) {
        let n = self.n * self.dm;
        rms_norm(self.step.path, &self.b.x[..n], w, self.eps, grow(&mut self.b.h, n));
    }

    /// `h = rms_norm(proj) * w`: a sublayer's output normed (Gemma's post-norms).
    pub fn norm_proj(&mut self, w: &[f32]) {
        let n = self.n * self.dm;
        rms_norm(self.step.path, &self.b.proj[..n], w, self.eps, grow(&mut self.b.h, n));
    }

    /// The residual add `x += proj`.
    pub fn add_proj(&mut self) {
        let n = self.n * self.dm;
        add(&mut self.b.x[..n], &self.b.proj[..n], self.dm);
    }

    /// The residual add `x += h`.
    pub fn add_h(&mut self) {
        let n = self.n * self.dm;
        add(&mut self.b.x[..n], &self.b.h[..n], self.dm);
    }
}

/// One layer of a family: reads the residual stream `cx.b.x` `(N, d)` and leaves it
/// updated. A function of each row alone (through the blocks), so batch-invariant.
pub trait LayerBody: Send + Sync {
    /// Run layer `layer` (its index: the KV slab it writes) over the step.
    fn forward(&self, layer: u32, cx: &mut Cx<'_, '_>) -> Result<(), ModelError>;
    /// Bytes its weights hold, for `Model::weight_bytes`.
    fn weight_bytes(&self) -> usize;
    /// Push the projections a LoRA adapter may adapt in this layer
    /// ([`tl_core::Model::adaptable`]); their blocks apply an adapter that names them.
    /// The default: none (an adapter naming any of its modules is refused).
    fn adaptable(&self, out: &mut Vec<tl_core::Adaptable>) {
        let _ = out;
    }
}

/// The mixture-of-experts block's scratch, kept between steps.
#[derive(Default)]
pub struct MoeBuffers {
    /// `(N, E)` router logits.
    pub(crate) logits: Vec<f32>,
    /// `(N, k)` each token's experts and weights, ascending expert id.
    pub(crate) chosen: Vec<(usize, f32)>,
    /// `(expert, row, weight)` of every token's choices, by expert then batch order.
    pub(crate) routed: Vec<(usize, usize, f32)>,
}
