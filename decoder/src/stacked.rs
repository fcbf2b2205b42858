//! Experts stacked as transformers 5 keeps them in memory and recent checkpoints store
//! them (Qwen3.5-MoE's `model.layers.N.mlp.experts.gate_up_proj`, Gemma 4's
//! `model.layers.N.experts.gate_up_proj`): `<base>.experts.gate_up_proj` `[E, 2I, d]` (each
//! expert's gate rows, then its up rows) and `<base>.experts.down_proj` `[E, d, I]`. The
//! loader reads one tensor per expert (`<base>.experts.E.{gate,up,down}_proj.weight`), so
//! [`StackedExperts`] serves those names as byte ranges of the stacked tensors: each
//! expert's matrix is a contiguous run of whole rows, kept in the stored type, without a
//! copy where the store maps the file.

use std::borrow::Cow;
use std::path::Path;

use tl_core::{DType, Stored, TensorInfo, WeightError, WeightStore};

/// A store that adds per-expert views of stacked expert tensors to `inner`.
pub struct StackedExperts<'a> {
    /// The checkpoint.
    pub inner: &'a dyn WeightStore,
}

/// Where a per-expert name lives in a stacked tensor: the stacked name, its shape
/// `[E, R, C]`, and the first row and row count of the expert's matrix.
struct Slice {
    stacked: String,
    shape: Vec<usize>,
    rows: (usize, usize),
}

impl StackedExperts<'_> {
    /// The stacked slice serving `name`, when `inner` lacks `name` and has its stack.
    fn slice(&self, name: &str) -> Option<Slice> {
        if self.inner.contains(name) {
            return None;
        }
        let (base, rest) = name.rsplit_once(".experts.")?;
        let (e, proj) = rest.split_once('.')?;
        let e: usize = e.parse().ok()?;
        let (stacked, half) = match proj {
            "gate_proj.weight" => ("gate_up_proj", Some(0)),
            "up_proj.weight" => ("gate_up_proj", Some(1)),
            "down_proj.weight" => ("down_proj", None),
            _ => return None,
        };
        let stacked = format!("{base}.experts.{stacked}");
        let shape = self.inner.info(&stacked)?.shape;
        let &[experts, rows, _] = shape.as_slice() else { return None };
        let rows = match half {
            _ if e >= experts => return None,
            None => (e * rows, rows),
            // gate_up: rows [0, I) of the expert's 2I are the gate, [I, 2I) the up projection.
            Some(h) if rows.is_multiple_of(2) => (e * rows + h * rows / 2, rows / 2),
            Some(_) => return None,
        };
        Some(Slice { stacked, shape, rows })
    }

    fn not_float(&self, s: &Slice) -> WeightError {
        WeightError::Tensor {
            path: self.inner.path().to_path_buf(),
            name: s.stacked.clone(),
            reason: "stacked experts must be stored as F32, F16 or BF16".into(),
        }
    }

    fn check(&self, name: &str, s: &Slice, shape: &[usize]) -> Result<(), WeightError> {
        if shape != [s.rows.1, s.shape[2]] {
            return Err(WeightError::Shape {
                path: self.inner.path().to_path_buf(),
                name: format!("{name} (rows {}.. of {})", s.rows.0, s.stacked),
                expected: shape.to_vec(),
                actual: vec![s.rows.1, s.shape[2]],
            });
        }
        Ok(())
    }
}

/// Bytes per element of a float type, or `None`.
fn elem(dtype: &DType) -> Option<usize> {
    match dtype {
        DType::F32 => Some(4),
        DType::F16 | DType::BF16 => Some(2),
        _ => None,
    }
}

/// `bytes` of `dtype` widened to f32 (every F16 and BF16 value is an f32 exactly).
fn widen(dtype: &DType, bytes: &[u8]) -> Vec<f32> {
    match dtype {
        DType::F32 => bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        DType::BF16 => {
            bytes.chunks_exact(2).map(|b| f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16)).collect()
        }
        _ => bytes.chunks_exact(2).map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]]))).collect(),
    }
}

/// IEEE half to single, exact.
fn f16_to_f32(h: u16) -> f32 {
    let (sign, exp, man) = (((h >> 15) as u32) << 31, ((h >> 10) & 0x1f) as u32, (h & 0x3ff) as u32);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: m * 2^-24.
            return if sign != 0 { -(m as f32) } else { m as f32 } * f32::from_bits(0x3380_0000);
        }
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

impl WeightStore for StackedExperts<'_> {
    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn names(&self) -> Vec<String> {
        self.inner.names()
    }

    fn info(&self, name: &str) -> Option<TensorInfo> {
        match self.slice(name) {
            None => self.inner.info(name),
            Some(s) => {
                let dtype = self.inner.info(&s.stacked)?.dtype;
                Some(TensorInfo { dtype, shape: vec![s.rows.1, s.shape[2]] })
            }
        }
    }

    fn metadata(&self, key: &str) -> Option<String> {
        self.inner.metadata(key)
    }

    fn f32(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, WeightError> {
        if self.slice(name).is_none() {
            return self.inner.f32(name, shape);
        }
        let stored = self.stored(name, shape)?;
        Ok(widen(&stored.dtype, &stored.bytes))
    }

    fn raw(&self, name: &str, dtype: DType, shape: &[usize]) -> Result<&[u8], WeightError> {
        let Some(s) = self.slice(name) else { return self.inner.raw(name, dtype, shape) };
        self.check(name, &s, shape)?;
        let size = elem(&dtype).ok_or_else(|| self.not_float(&s))?;
        let all = self.inner.raw(&s.stacked, dtype, &s.shape)?;
        let row = s.shape[2] * size;
        Ok(&all[s.rows.0 * row..(s.rows.0 + s.rows.1) * row])
    }

    fn stored(&self, name: &str, shape: &[usize]) -> Result<Stored<'_>, WeightError> {
        let Some(s) = self.slice(name) else { return self.inner.stored(name, shape) };
        self.check(name, &s, shape)?;
        let all = self.inner.stored(&s.stacked, &s.shape)?;
        let size = elem(&all.dtype).ok_or_else(|| self.not_float(&s))?;
        let row = s.shape[2] * size;
        let range = s.rows.0 * row..(s.rows.0 + s.rows.1) * row;
        let bytes = match all.bytes {
            Cow::Borrowed(b) => Cow::Borrowed(&b[range]),
            Cow::Owned(b) => Cow::Owned(b[range].to_vec()),
        };
        Ok(Stored { dtype: all.dtype, bytes })
    }

    fn done_with(&self, name: &str) {
        // A stacked tensor serves many experts: its pages stay until the load ends.
        if self.slice(name).is_none() {
            self.inner.done_with(name);
        }
    }
}
