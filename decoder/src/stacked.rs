//! Experts stacked as transformers 5 keeps them in memory and recent checkpoints store
//! them (Qwen3.5-MoE's `model.layers.N.mlp.experts.gate_up_proj`, Gemma 4's
//! `model.layers.N.experts.gate_up_proj`): `<base>.experts.gate_up_proj` `[E, 2I, d]` (each
//! expert's gate rows, then its up rows) and `<base>.experts.down_proj` `[E, d, I]`. The
//! loader reads one tensor per expert (`<base>.experts.E.{gate,up,down}_proj.weight`), so
//! [`StackedExperts`] serves those names as byte ranges of the stacked tensors: each
//! expert's matrix is a contiguous run of whole rows (floats, or GGUF blocks: a Gemma 4
//! GGUF keeps the stack as transformers does), kept in the stored type, without a copy
//! where the store maps the file.

use std::borrow::Cow;
use std::path::Path;

use tl_core::{DType, Stored, TensorInfo, WeightError, WeightStore};
use tl_quant::Format;

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

    fn no_rows(&self, s: &Slice, dtype: &DType) -> WeightError {
        WeightError::Tensor {
            path: self.inner.path().to_path_buf(),
            name: s.stacked.clone(),
            reason: format!("stacked experts stored as {dtype:?}, which tl cannot cut into rows of {}", s.shape[2]),
        }
    }

    /// Bytes of one stored row of the stack (`cols` values of `dtype`).
    fn row_bytes(&self, s: &Slice, dtype: &DType) -> Result<usize, WeightError> {
        format(dtype).and_then(|f| f.row_bytes(s.shape[2])).ok_or_else(|| self.no_rows(s, dtype))
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

/// The stored format of `dtype`: a float type or a GGUF block type (whose rows are whole
/// runs of blocks, so an expert's rows are a byte range of the stack in either case).
fn format(dtype: &DType) -> Option<Format> {
    match dtype {
        DType::F32 => Some(Format::F32),
        DType::F16 => Some(Format::F16),
        DType::BF16 => Some(Format::BF16),
        DType::Other(name) => Format::from_ggml_name(name),
        DType::U8 => None,
    }
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
        let Some(s) = self.slice(name) else { return self.inner.f32(name, shape) };
        let stored = self.stored(name, shape)?;
        let f = format(&stored.dtype).ok_or_else(|| self.no_rows(&s, &stored.dtype))?;
        // The values of the stack's own `f32` (tl-quant's dequantization of those rows).
        tl_quant::dequantize(f, &stored.bytes, s.rows.1, s.shape[2]).map_err(|e| WeightError::Tensor {
            path: self.inner.path().to_path_buf(),
            name: s.stacked.clone(),
            reason: e.to_string(),
        })
    }

    fn raw(&self, name: &str, dtype: DType, shape: &[usize]) -> Result<&[u8], WeightError> {
        let Some(s) = self.slice(name) else { return self.inner.raw(name, dtype, shape) };
        self.check(name, &s, shape)?;
        let row = self.row_bytes(&s, &dtype)?;
        let all = self.inner.raw(&s.stacked, dtype, &s.shape)?;
        Ok(&all[s.rows.0 * row..(s.rows.0 + s.rows.1) * row])
    }

    fn stored(&self, name: &str, shape: &[usize]) -> Result<Stored<'_>, WeightError> {
        let Some(s) = self.slice(name) else { return self.inner.stored(name, shape) };
        self.check(name, &s, shape)?;
        let all = self.inner.stored(&s.stacked, &s.shape)?;
        let row = self.row_bytes(&s, &all.dtype)?;
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
