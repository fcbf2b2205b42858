//! The dense gated MLP ([`Mlp`]): `down(act(gate(h), up(h)))`, the feed-forward of most
//! layers and each expert of a mixture ([`crate::Moe`]). Each row's output is a function
//! of that row alone.

use tl_core::ModelError;
use tl_quant::Linear;

use crate::cx::Cx;
use crate::loader::Loader;
use crate::lora::{self, LoraBuffers, LoraRows, Target, Targets};
use crate::proj::{f32_bytes, grow, linear, Proj};
use crate::rowops::{clamped_swiglu, gelu_tanh_gated, swiglu};
use crate::Path;

/// `v += b` on every row of `x` `(rows, b.len())`: after a product, one f32 add per
/// element (as `x W^T + b`), a function of the row alone.
pub(crate) fn add_bias(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        for (v, &b) in row.iter_mut().zip(bias) {
            *v += b;
        }
    }
}

/// The gated activation of an MLP, on `(rows, 2I)` gate|up rows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Act {
    /// `silu(gate) * up` (Llama and most families).
    SwiGlu,
    /// `gelu_tanh(gate) * up` (Gemma).
    GeluTanh,
    /// gpt-oss's: `(clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g)`, `g =
    /// min(gate, limit)`.
    ClampedSwiGlu {
        /// `swiglu_limit`.
        limit: f32,
        /// The sigmoid's slope (1.702 in gpt-oss).
        alpha: f32,
    },
}

/// A gated MLP's tensor names below its prefix.
#[derive(Clone, Copy, Debug)]
pub struct MlpNames {
    /// The gate projection (`gate_proj`; Mixtral's experts: `w1`).
    pub gate: &'static str,
    /// The up projection (`up_proj`; Mixtral's experts: `w3`).
    pub up: &'static str,
    /// The down projection (`down_proj`; Mixtral's experts: `w2`).
    pub down: &'static str,
}

/// Hugging Face's Llama names.
pub const MLP_NAMES: MlpNames = MlpNames { gate: "gate_proj", up: "up_proj", down: "down_proj" };

/// A gated MLP: `down(act(gate(h) + bg, up(h) + bu)) + bd` (biases where the family has
/// them: gpt-oss's experts).
pub struct Mlp {
    /// `[2*I, d]`: gate, up stacked.
    pub gate_up: Proj,
    /// `[d, I]`.
    pub down: Linear,
    /// The activation.
    pub act: Act,
    /// `(2*I,)` the gate's then the up projection's biases, when present.
    pub gate_up_bias: Option<Vec<f32>>,
    /// `(d,)` the down projection's bias, when present.
    pub down_bias: Option<Vec<f32>>,
    /// The projections a LoRA adapter may adapt (gate, up; down), applied by
    /// [`Mlp::forward`] (a dense MLP's step rows), never by [`Mlp::run`] on an expert's
    /// gathered rows.
    pub lora: Targets,
}

/// The scratch an [`Mlp`] runs in.
pub struct MlpScratch<'s> {
    /// `(rows, 2I)` gate | up.
    pub gu: &'s mut Vec<f32>,
    /// `(rows, I)` the activation.
    pub act: &'s mut Vec<f32>,
    /// For a projection that could not be fused.
    pub tmp: &'s mut Vec<f32>,
}

impl Mlp {
    /// The MLP under the `names` below `p` (`model.layers.N.mlp`), `I = inter`.
    pub fn load(w: &Loader<'_>, p: &str, names: MlpNames, d: usize, inter: usize, act: Act) -> Result<Mlp, ModelError> {
        let proj = |name: &str, out, inp| w.proj(&format!("{p}.{name}"), out, inp);
        let gate_up = Proj::new(vec![proj(names.gate, inter, d)?, proj(names.up, inter, d)?]);
        let t = |name: &str, inp, out, col| Target::new(format!("{p}.{name}"), inp, out, col);
        let lora = Targets {
            inp: vec![t(names.gate, d, inter, 0), t(names.up, d, inter, inter)],
            out: Some(t(names.down, inter, d, 0)),
        };
        Ok(Mlp { gate_up, down: proj(names.down, d, inter)?, act, gate_up_bias: None, down_bias: None, lora })
    }

    /// Width I.
    pub fn inter(&self) -> usize {
        self.down.inp()
    }

    /// `y` `(rows, d)` from `x` `(rows, d)`.
    pub fn run(&self, path: Path, x: &[f32], rows: usize, y: &mut [f32], s: MlpScratch<'_>) -> Result<(), ModelError> {
        self.run_adapted(path, x, rows, y, s, None)
    }

    /// [`Mlp::run`] over a step's rows in batch order, with their LoRA adapters applied.
    fn run_adapted(
        &self,
        path: Path,
        x: &[f32],
        rows: usize,
        y: &mut [f32],
        s: MlpScratch<'_>,
        mut lora: Option<(&LoraRows<'_>, &mut LoraBuffers)>,
    ) -> Result<(), ModelError> {
        let inter = self.inter();
        let gu = grow(s.gu, rows * 2 * inter); // (rows, 2I) gate | up
        self.gate_up.forward(x, rows, gu, s.tmp, "gate_up_proj")?;
        if let Some(b) = &self.gate_up_bias {
            add_bias(gu, b);
        }
        if let Some((lr, buf)) = &mut lora {
            for t in &self.lora.inp {
                lora::apply(lr, t, x, gu, 2 * inter, buf)?;
            }
        }
        let act = grow(s.act, rows * inter); // (rows, I)
        match self.act {
            Act::SwiGlu => swiglu(path, gu, act, inter),
            Act::GeluTanh => gelu_tanh_gated(path, gu, act, inter),
            Act::ClampedSwiGlu { limit, alpha } => clamped_swiglu(path, gu, act, inter, (limit, alpha)),
        }
        linear(&self.down, act, rows, y, "down_proj")?;
        if let Some(b) = &self.down_bias {
            add_bias(y, b);
        }
        if let (Some((lr, buf)), Some(t)) = (lora, &self.lora.out) {
            lora::apply(lr, t, act, y, t.out, buf)?;
        }
        Ok(())
    }

    /// `proj` `(N, d)` from `h` `(N, d)`.
    pub fn forward(&self, cx: &mut Cx<'_, '_>) -> Result<(), ModelError> {
        let (n, dm, path) = (cx.n, cx.dm, cx.path());
        let b = &mut *cx.b;
        let proj = grow(&mut b.proj, n * dm); // (N, d)
        let s = MlpScratch { gu: &mut b.gu, act: &mut b.act, tmp: &mut b.tmp };
        let lora = (!cx.step.lora.is_empty()).then_some((cx.step.lora, &mut b.lora));
        self.run_adapted(path, &b.h[..n * dm], n, proj, s, lora)
    }

    /// Bytes its weights hold.
    pub fn weight_bytes(&self) -> usize {
        let biases = self.gate_up_bias.as_deref().map_or(0, f32_bytes) + self.down_bias.as_deref().map_or(0, f32_bytes);
        self.gate_up.packed_bytes() + self.down.packed_bytes() + biases
    }
}
