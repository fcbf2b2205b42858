//! The pieces every encoder family builds from (BERT here, and the crates that reuse this
//! one: ModernBERT, nomic-bert): a LayerNorm's vectors, a projection with its optional
//! bias in the kernel that suits its weights, and the split of a batch's stacked hidden
//! rows into each input's outputs. One copy, so every family rounds alike
//! (docs/spec/encoders.md, "Arithmetic").

use tl_core::{ConfigError, EncodeInput, Encoded, ModelConfig, ModelError};
use tl_decoder::{f32_bytes, Loader, Proj};
use tl_quant::{Format, Linear, Path};

use crate::config::Activation;
use crate::gemm::Packed;
use crate::ops::add_bias;
use crate::pooling::Pipeline;

/// A LayerNorm's weight and bias (zeros for a norm without one: `fma(v, w, +0)` rounds
/// as `v * w` does, so a bias-free norm is the same bits).
pub struct Norm {
    /// `(d,)` weight.
    pub w: Vec<f32>,
    /// `(d,)` bias.
    pub b: Vec<f32>,
}

impl Norm {
    /// The LayerNorm under `base`: `weight` and, with `bias`, `bias` (or the TF-era
    /// `gamma`/`beta` that transformers still renames on load).
    pub fn load(w: &Loader<'_>, base: &str, d: usize, bias: bool) -> Result<Norm, ModelError> {
        let (wn, bn) =
            if w.store().info(&format!("{base}.gamma")).is_some() { ("gamma", "beta") } else { ("weight", "bias") };
        let b = if bias { w.vector(&format!("{base}.{bn}"), d)? } else { vec![0.0; d] };
        Ok(Norm { w: w.vector(&format!("{base}.{wn}"), d)?, b })
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        f32_bytes(&self.w) + f32_bytes(&self.b)
    }
}

/// A projection's weights: f32 ones in this crate's own panels ([`crate::gemm`], the same
/// bits as tl-quant's f32 kernel), any other weight mode through tl-quant.
enum Weights {
    F32(Packed),
    Quant(Proj),
}

/// A projection and its bias (empty: none).
pub struct Dense {
    w: Weights,
    b: Vec<f32>,
}

impl Dense {
    /// The `[out, inp]` projection `<base>.weight`, and `<base>.bias` when `bias`.
    pub fn load(w: &Loader<'_>, base: &str, out: usize, inp: usize, bias: bool) -> Result<Dense, ModelError> {
        Dense::fused(w, &[base], out, inp, bias)
    }

    /// Projections `bases` (each `[out, inp]`) reading the same input, outputs side by
    /// side in that order (BERT's query, key and value; a SwiGLU's gate and up), with
    /// their biases when `bias`.
    pub fn fused(w: &Loader<'_>, bases: &[&str], out: usize, inp: usize, bias: bool) -> Result<Dense, ModelError> {
        let mut parts = Vec::with_capacity(bases.len());
        let mut b = Vec::new();
        for base in bases {
            parts.push(w.proj(base, out, inp)?);
            if bias {
                b.extend(w.vector(&format!("{base}.bias"), out)?);
            }
        }
        Ok(Dense { w: weights(parts, &b), b })
    }

    /// Output features.
    pub fn out(&self) -> usize {
        match &self.w {
            Weights::F32(p) => p.out(),
            Weights::Quant(w) => w.out(),
        }
    }

    /// `y = x W^T + b` for `n` stacked rows; `tmp` is scratch, `what` names the projection
    /// in errors.
    pub fn run(&self, x: &[f32], n: usize, y: &mut [f32], tmp: &mut Vec<f32>, what: &str) -> Result<(), ModelError> {
        match &self.w {
            Weights::F32(p) => {
                if x.len() != n * p.inp() || y.len() != n * p.out() {
                    return Err(ModelError::Other(format!(
                        "{what}: buffers of {} and {} floats for {n} rows",
                        x.len(),
                        y.len()
                    )));
                }
                // The bias is added in the kernel's store.
                p.forward(Path::best(), x, n, y)
            }
            Weights::Quant(w) => {
                w.forward(x, n, y, tmp, what)?;
                add_bias(y, &self.b)
            }
        }
        Ok(())
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        match &self.w {
            Weights::F32(p) => p.bytes(),
            Weights::Quant(w) => w.packed_bytes() + f32_bytes(&self.b),
        }
    }
}

/// Projections reading the same input, outputs side by side: repacked for
/// [`crate::gemm`] when every part is stored f32 (widening is exact, so the products are
/// the same bits as tl-quant's), else fused (or not) by tl-decoder's `Proj`.
fn weights(parts: Vec<Linear>, bias: &[f32]) -> Weights {
    if parts.iter().all(|l| l.format() == Format::F32) && parts.windows(2).all(|p| p[0].inp() == p[1].inp()) {
        let inp = parts.first().map_or(0, Linear::inp);
        let out: usize = parts.iter().map(Linear::out).sum();
        let mut w = Vec::with_capacity(out * inp);
        for l in &parts {
            w.extend(l.dequantize());
        }
        return Weights::F32(Packed::new(&w, bias, out, inp));
    }
    Weights::Quant(Proj::new(parts))
}

impl Activation {
    /// The activation of one logit.
    pub fn apply(self, v: f32) -> f32 {
        match self {
            Activation::Identity => v,
            Activation::Sigmoid => 1.0 / (1.0 + (-v).exp()),
            Activation::Tanh => v.tanh(),
        }
    }
}

/// The positions of stacked inputs' rows: `0..len` for each input in turn (every input
/// starts at position 0, whatever precedes it in the batch).
pub fn positions(lens: &[usize]) -> Vec<usize> {
    lens.iter().flat_map(|&t| 0..t).collect()
}

/// A classifier over one input's hidden rows (its outputs after the activation).
pub type Scores<'a> = &'a dyn Fn(&[f32]) -> Result<Vec<f32>, ModelError>;

/// A classification head's last step: the `classifier` projection of the pooled,
/// transformed row, then the cross-encoder's activation.
pub struct Logits {
    /// `[labels, d]` with its bias.
    pub out: Dense,
    /// Applied to each logit.
    pub activation: Activation,
}

impl Logits {
    /// The scores of one row `x`.
    pub fn run(&self, x: &[f32], tmp: &mut Vec<f32>) -> Result<Vec<f32>, ModelError> {
        let mut out = vec![0f32; self.out.out()];
        self.out.run(x, 1, &mut out, tmp, "classifier")?;
        out.iter_mut().for_each(|v| *v = self.activation.apply(*v));
        Ok(out)
    }
}

/// The refusal of a KV geometry every encoder architecture gives (an encoder keeps none).
pub fn no_kv(config: &ModelConfig, family: &str) -> ConfigError {
    ConfigError::Invalid {
        field: "tl_arch".into(),
        value: format!("{:?}", config.arch),
        reason: format!("{family} is an encoder: it keeps no KV"),
    }
}

/// `tl_core::Encoder` and `tl_core::Model` for an encoder family's model type `$t`, alike
/// in every family: `$t` has the fields `info: EncoderInfo`, `classifier: Option<C>` and
/// `pipeline: Option<Pipeline>`, and the methods `hidden(&self, inputs) -> Result<Vec<f32>>`
/// (the stacked last hidden states), `scores(&self, &C, rows) -> Result<Vec<f32>>` and
/// `bytes(&self) -> usize` (the weights held). `$name` names the family in the refusal of
/// forward steps.
#[macro_export]
macro_rules! encoder_model {
    ($t:ty, $name:literal) => {
        impl ::tl_core::Encoder for $t {
            fn info(&self) -> &::tl_core::EncoderInfo {
                &self.info
            }

            fn encode(
                &self,
                inputs: &[::tl_core::EncodeInput<'_>],
                want_hidden: bool,
            ) -> Result<Vec<::tl_core::Encoded>, ::tl_core::ModelError> {
                let h = self.hidden(inputs)?;
                let head = self.classifier.as_ref().map(|c| move |rows: &[f32]| self.scores(c, rows));
                let scores = head.as_ref().map(|f| f as $crate::parts::Scores<'_>);
                let d = self.info.hidden_size;
                $crate::parts::outputs(&h, inputs, d, want_hidden, self.pipeline.as_ref(), scores)
            }
        }

        impl ::tl_core::Model for $t {
            fn hidden_size(&self) -> usize {
                self.info.hidden_size
            }

            fn weight_bytes(&self) -> Option<usize> {
                Some(self.bytes())
            }

            fn forward(
                &self,
                _: &::tl_core::ForwardBatch,
                _: &mut ::tl_core::ForwardCtx<'_>,
            ) -> Result<::tl_core::ForwardOutput, ::tl_core::ModelError> {
                Err(::tl_core::ModelError::BadBatch(
                    concat!($name, " is an encoder: it answers encode, not forward steps").into(),
                ))
            }

            fn encoder(&self) -> Option<&dyn ::tl_core::Encoder> {
                Some(self)
            }
        }
    };
}

/// Each input's outputs from the stacked last hidden states `h` `(N, d)`: its rows when
/// `want_hidden`, its `pipeline` vector, and `scores` of its rows when the model has a
/// head. Everything after the stack is per input.
pub fn outputs(
    h: &[f32],
    inputs: &[EncodeInput<'_>],
    d: usize,
    want_hidden: bool,
    pipeline: Option<&Pipeline>,
    scores: Option<Scores<'_>>,
) -> Result<Vec<Encoded>, ModelError> {
    let mut out = Vec::with_capacity(inputs.len());
    let mut at = 0;
    for input in inputs {
        let rows =
            h.get(at * d..(at + input.ids.len()) * d).ok_or_else(|| ModelError::Other("hidden rows ran out".into()))?;
        at += input.ids.len();
        out.push(Encoded {
            hidden: want_hidden.then(|| rows.to_vec()),
            vector: pipeline.map(|p| p.pool(rows, d)),
            scores: scores.map(|f| f(rows)).transpose()?,
        });
    }
    Ok(out)
}
