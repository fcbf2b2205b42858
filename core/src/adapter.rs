//! LoRA adapters (docs/spec/numbers.md, "Adapters"): what a loaded adapter is, what a
//! model offers to adapt, and the per-sequence choice a step carries.
//!
//! An adapted projection is `y = W x (+ bias) + s * B (A x)`, unmerged: the base weights
//! are never touched, so one model serves any number of adapters, and a row without one
//! runs exactly the unadapted arithmetic. `A` `[r, in]` and `B` `[out, r]` are held as
//! tl-quant `Linear`s, in the file's f16 or bf16 when it stores them so (as most PEFT
//! files do), else f32: every format computes on the exact values, each output element one
//! f32 FMA chain in a fixed order whatever the other rows of the step, so a row's result
//! is the same bits alone or beside rows with other adapters. Reading the files (PEFT directories, GGUF adapters) is
//! [`crate::adapter_read`]; this file binds what was read to a model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
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

/// A matrix's F16 or BF16 bytes as the file stores them (row-major, Hugging Face's row
/// order).
pub type Narrow = (tl_quant::Format, Vec<u8>);

/// One module's pair as read (f32, widened exactly from the stored type).
pub struct RawLora {
    /// `A`'s name in the file.
    pub a_name: String,
    /// `[r, in]` row-major.
    pub a: Vec<f32>,
    /// `A`'s shape as stored.
    pub a_shape: Vec<usize>,
    /// `A` as stored, when the file holds it in F16 or BF16.
    pub a_narrow: Option<Narrow>,
    /// `B`'s name in the file.
    pub b_name: String,
    /// `[out, r]` row-major, rows in Hugging Face's order.
    pub b: Vec<f32>,
    /// `B`'s shape as stored.
    pub b_shape: Vec<usize>,
    /// `B` as stored, when the file holds it in F16 or BF16.
    pub b_narrow: Option<Narrow>,
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

/// `w` (`[out, inp]`, exact values) as a `Linear`: in the file's F16 or BF16 when it
/// stores the matrix so (as PEFT saves most adapters), half the bytes a step reads and
/// the same bits (every `Linear` format computes on the exact values it holds); else f32.
fn held(w: &[f32], narrow: &Option<Narrow>, out: usize, inp: usize) -> Result<Linear, tl_quant::QuantError> {
    match narrow {
        Some((format, bytes)) => Linear::from_stored(*format, bytes, out, inp),
        None => Linear::from_f32(w, out, inp),
    }
}

/// A 64-bit digest of `a` then `b`'s f32 bit patterns: four interleaved multiply-rotate
/// lanes over pairs of values (a byte-at-a-time FNV over a 1B model's adapter took tens of
/// milliseconds of the load), folded with FNV-1a with the lengths. Stable across machines.
fn values_digest(a: &[f32], b: &[f32]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut lanes = [0x243F_6A88_85A3_08D3u64, 0x1319_8A2E_0370_7344, 0xA409_3822_299F_31D0, 0x082E_FA98_EC4E_6C89];
    let mut words = a.iter().chain(b).map(|x| u64::from(x.to_bits()));
    let mut k = 0;
    while let Some(lo) = words.next() {
        let w = lo | words.next().map_or(0, |hi| hi << 32);
        lanes[k & 3] = (lanes[k & 3] ^ w).wrapping_mul(K).rotate_left(29);
        k += 1;
    }
    let mut h = Fnv::new();
    for v in lanes.iter().chain([&(a.len() as u64), &(b.len() as u64)]) {
        h.update(&v.to_le_bytes());
    }
    h.finish()
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
        // Names, shapes and scales first (cheap, in order, so the first bad tensor is the
        // one named); then each module's values checked, packed and digested in parallel
        // (a 1B model's rank-16 adapter is ~10M values).
        let mut checked = Vec::with_capacity(raw.modules.len());
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
            let scale = if l.rslora { l.alpha / (r as f64).sqrt() } else { l.alpha / r as f64 } as f32;
            if !scale.is_finite() {
                return Err(tensor_err(
                    &path,
                    &l.a_name,
                    format!("alpha {} over rank {r} is not a finite f32 scale", l.alpha),
                ));
            }
            checked.push((module, l, r, t.inp, t.out, scale));
        }
        let built: Vec<Result<(Lora, u64), AdapterError>> = checked
            .par_iter()
            .map(|(_, l, r, inp, out, scale)| {
                for (tensor, v) in [(&l.a_name, &l.a), (&l.b_name, &l.b)] {
                    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
                        return Err(tensor_err(&path, tensor, format!("value {i} is {}", v[i])));
                    }
                }
                let linear = |w: &[f32], narrow, out, inp, tensor: &str| {
                    held(w, narrow, out, inp).map_err(|e| tensor_err(&path, tensor, e.to_string()))
                };
                let a = linear(&l.a, &l.a_narrow, *r, *inp, &l.a_name)?;
                let lora = Lora { a, b: linear(&l.b, &l.b_narrow, *out, *r, &l.b_name)?, scale: *scale };
                Ok((lora, values_digest(&l.a, &l.b)))
            })
            .collect();
        // The digest is of what the arithmetic uses (module, scale, rank, A and B as f32
        // bits), so the same adapter read from PEFT or from GGUF has one digest.
        let mut modules = BTreeMap::new();
        let mut h = Fnv::new();
        h.update(b"tl-lora-2");
        let mut bytes = 0;
        for ((module, _, r, _, _, scale), built) in checked.into_iter().zip(built) {
            let (lora, values) = built?;
            h.update(module.as_bytes());
            h.update(&[0]);
            h.update(&scale.to_bits().to_le_bytes());
            h.update(&(r as u64).to_le_bytes());
            h.update(&values.to_le_bytes());
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
