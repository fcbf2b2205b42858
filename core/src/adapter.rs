//! LoRA adapters (docs/spec/numbers.md, "Adapters"): what a loaded adapter is, what a
//! model offers to adapt, and the per-sequence choice a step carries.
//!
//! An adapted projection is `y = W x (+ bias) + s * B (A x)`, unmerged: the base weights
//! are never touched, so one model serves any number of adapters, and a row without one
//! runs exactly the unadapted arithmetic. `A` `[r, in]` and `B` `[out, r]` are held as
//! tl-quant `Linear`s, in f16 or bf16 when every value is one (as stored by most PEFT
//! files), else f32: every format computes on the exact values, each output element one
//! f32 FMA chain in a fixed order whatever the other rows of the step, so a row's result
//! is the same bits alone or beside rows with other adapters. Reading the files (PEFT directories, GGUF adapters) is
//! [`crate::adapter_read`]; this file binds what was read to a model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use thiserror::Error;
use tl_quant::Linear;

use crate::hash::Fnv;
use crate::weights::WeightError;

/// An adapter that cannot be read or does not fit the model. Every variant names the file.
#[derive(Debug, Error)]
pub enum AdapterError {
    /// The file or directory could not be read.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// A weight file refused (truncated, bad header, wrong type).
    #[error(transparent)]
    Weights(#[from] WeightError),
    /// adapter_config.json (or the GGUF metadata) asks for what tl does not run.
    #[error("{}: {field}: {reason}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// The field or metadata key.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor is wrong for the adapter or for the base model.
    #[error("{}: tensor {tensor:?}: {reason}", path.display())]
    Tensor {
        /// The file.
        path: PathBuf,
        /// The tensor as the file names it.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
}

/// One adapted projection's pair: `s * B (A x)`.
pub struct Lora {
    /// `[r, in]`.
    pub a: Linear,
    /// `[out, r]`.
    pub b: Linear,
    /// `alpha / r` (`alpha / sqrt(r)` for rsLoRA), computed in f64 and rounded to f32.
    pub scale: f32,
}

impl Lora {
    /// The rank r.
    pub fn rank(&self) -> usize {
        self.a.out()
    }
}

/// A projection a model can adapt: what [`crate::Model::adaptable`] lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adaptable {
    /// Hugging Face's module name (`model.layers.3.self_attn.q_proj`): the weight's name
    /// without `.weight`.
    pub module: String,
    /// Input features.
    pub inp: usize,
    /// Output features.
    pub out: usize,
}

/// An adapter as read from its file, before it is bound to a model.
pub struct RawAdapter {
    /// Where it was read from.
    pub path: PathBuf,
    /// Per adapted module (Hugging Face's name), its pair.
    pub modules: BTreeMap<String, RawLora>,
}

/// One module's pair as read (f32, widened exactly from the stored type).
pub struct RawLora {
    /// `A`'s name in the file.
    pub a_name: String,
    /// `[r, in]` row-major.
    pub a: Vec<f32>,
    /// `A`'s shape as stored.
    pub a_shape: Vec<usize>,
    /// `B`'s name in the file.
    pub b_name: String,
    /// `[out, r]` row-major, rows in Hugging Face's order.
    pub b: Vec<f32>,
    /// `B`'s shape as stored.
    pub b_shape: Vec<usize>,
    /// The module's alpha.
    pub alpha: f64,
    /// rsLoRA: `s = alpha / sqrt(r)`.
    pub rslora: bool,
}

/// A loaded adapter, bound to one model's projections.
pub struct Adapter {
    name: String,
    digest: u64,
    modules: BTreeMap<String, Lora>,
    bytes: usize,
}

impl std::fmt::Debug for Adapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Adapter {{ name: {:?}, digest: {:016x}, modules: {} }}", self.name, self.digest, self.modules.len())
    }
}

/// A sequence's adapter in a step: the adapter and the request's scale on it (1 unless
/// the request asks for another; llama.cpp's `lora: [{id, scale}]`).
#[derive(Clone, Copy, Debug)]
pub struct Applied<'a> {
    /// The adapter.
    pub adapter: &'a Adapter,
    /// Multiplies every module's `alpha / r` (one f32 product).
    pub scale: f32,
}

impl Applied<'_> {
    /// The key of this choice for prefix hashes and fingerprints: the adapter's digest and
    /// the scale's bits, so a prefix computed under one adapter (or scale) never serves
    /// another.
    pub fn key(&self) -> u64 {
        let mut h = Fnv::new();
        h.update(b"tl-lora-key");
        h.update(&self.adapter.digest.to_le_bytes());
        h.update(&self.scale.to_bits().to_le_bytes());
        h.finish()
    }

    /// Two choices that give the same numbers (same adapter bits, same scale).
    pub fn same(&self, other: &Applied<'_>) -> bool {
        self.adapter.digest == other.adapter.digest && self.scale.to_bits() == other.scale.to_bits()
    }
}

/// `w` (`[out, inp]`, exact values) as a `Linear` in the narrowest of f16, bf16 and f32
/// that holds every value exactly: an adapter stored in f16 or bf16 (as PEFT usually
/// saves them) is held in its 2-byte form, half the bytes a step reads, and gives the same
/// bits as f32 (every `Linear` format computes on the exact values it holds).
fn held(w: &[f32], out: usize, inp: usize) -> Result<Linear, tl_quant::QuantError> {
    let exact = |narrow: fn(f32) -> f32| w.iter().all(|&x| narrow(x).to_bits() == x.to_bits());
    if exact(|x| half::f16::from_f32(x).to_f32()) {
        let bytes: Vec<u8> = w.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect();
        Linear::from_stored(tl_quant::Format::F16, &bytes, out, inp)
    } else if exact(|x| half::bf16::from_f32(x).to_f32()) {
        let bytes: Vec<u8> = w.iter().flat_map(|&x| half::bf16::from_f32(x).to_le_bytes()).collect();
        Linear::from_stored(tl_quant::Format::BF16, &bytes, out, inp)
    } else {
        Linear::from_f32(w, out, inp)
    }
}

fn tensor_err(path: &Path, tensor: &str, reason: String) -> AdapterError {
    AdapterError::Tensor { path: path.to_path_buf(), tensor: tensor.to_string(), reason }
}

impl Adapter {
    /// Bind `raw` to a model that adapts `targets`: every module must be one of them, with
    /// `A` `[r, in]` and `B` `[out, r]` for its shape, and finite values; anything else is
    /// refused, naming the tensor.
    pub fn bind(name: &str, raw: RawAdapter, targets: &[Adaptable]) -> Result<Adapter, AdapterError> {
        let path = raw.path;
        if raw.modules.is_empty() {
            return Err(AdapterError::Config {
                path,
                field: "tensors".into(),
                reason: "the adapter holds no LoRA pair".into(),
            });
        }
        let by_name: BTreeMap<&str, &Adaptable> = targets.iter().map(|t| (t.module.as_str(), t)).collect();
        let mut modules = BTreeMap::new();
        let mut h = Fnv::new();
        h.update(b"tl-lora-1");
        let mut bytes = 0;
        for (module, l) in raw.modules {
            let Some(t) = by_name.get(module.as_str()) else {
                let reason = if targets.is_empty() {
                    "this model's architecture takes no adapters".to_string()
                } else {
                    format!("module {module:?} is not one this model adapts (attention q/k/v/o and MLP gate/up/down)")
                };
                return Err(tensor_err(&path, &l.a_name, reason));
            };
            let r = l.a_shape.first().copied().unwrap_or(0);
            if l.a_shape.len() != 2 || r == 0 || l.a_shape[1] != t.inp {
                let reason = format!("shape {:?}, expected [r, {}] for {module} (r > 0)", l.a_shape, t.inp);
                return Err(tensor_err(&path, &l.a_name, reason));
            }
            if l.b_shape != [t.out, r] {
                let reason =
                    format!("shape {:?}, expected [{}, {r}] for {module} (its A has rank {r})", l.b_shape, t.out);
                return Err(tensor_err(&path, &l.b_name, reason));
            }
            for (tensor, v) in [(&l.a_name, &l.a), (&l.b_name, &l.b)] {
                if let Some(i) = v.iter().position(|x| !x.is_finite()) {
                    return Err(tensor_err(&path, tensor, format!("value {i} is {}", v[i])));
                }
            }
            let scale = if l.rslora { l.alpha / (r as f64).sqrt() } else { l.alpha / r as f64 } as f32;
            if !scale.is_finite() {
                return Err(tensor_err(
                    &path,
                    &l.a_name,
                    format!("alpha {} over rank {r} is not a finite f32 scale", l.alpha),
                ));
            }
            let linear = |w: &[f32], out, inp, tensor: &str| {
                held(w, out, inp).map_err(|e| tensor_err(&path, tensor, e.to_string()))
            };
            let lora = Lora { a: linear(&l.a, r, t.inp, &l.a_name)?, b: linear(&l.b, t.out, r, &l.b_name)?, scale };
            // The digest is of what the arithmetic uses (module, scale, A, B as f32), so
            // the same adapter read from PEFT or from GGUF has one digest.
            h.update(module.as_bytes());
            h.update(&[0]);
            h.update(&scale.to_bits().to_le_bytes());
            h.update(&(r as u64).to_le_bytes());
            for v in l.a.iter().chain(&l.b) {
                h.update(&v.to_bits().to_le_bytes());
            }
            bytes += lora.a.packed_bytes() + lora.b.packed_bytes();
            modules.insert(module, lora);
        }
        Ok(Adapter { name: name.to_string(), digest: h.finish(), modules, bytes })
    }

    /// The name it was loaded under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A 64-bit digest of its numbers (modules, scales, A and B bits).
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// The pair of `module`, when the adapter adapts it.
    pub fn module(&self, module: &str) -> Option<&Lora> {
        self.modules.get(module)
    }

    /// The adapted modules, by name.
    pub fn modules(&self) -> impl Iterator<Item = (&str, &Lora)> {
        self.modules.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Bytes its pairs hold in memory.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}
