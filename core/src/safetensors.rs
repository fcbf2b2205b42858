//! The memory-mapped safetensors reader (docs/spec/model-dir.md).
//!
//! Layout: a u64 little-endian header length N, N bytes of JSON, then the data buffer.
//! `data_offsets` count from the start of the DATA BUFFER and must tile it exactly. The
//! `safetensors` crate checks those rules; this module maps the file, names the file and
//! tensor in every error, and widens F16/BF16 to f32 (numbers.md).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::tensor::{Dtype, Metadata, SafeTensorError};
use safetensors::SafeTensors as Parser;

use crate::weights::{check_found, map_file, DType, TensorInfo, WeightError, WeightStore};

/// One tensor's place in the data buffer.
#[derive(Clone, Debug)]
struct Entry {
    dtype: DType,
    shape: Vec<usize>,
    begin: usize,
    end: usize,
}

/// A safetensors file, memory-mapped; tensors are read in place on demand.
pub struct SafeTensors {
    path: PathBuf,
    map: Mmap,
    data_start: usize,
    tensors: BTreeMap<String, Entry>,
    metadata: BTreeMap<String, String>,
    /// The ranges loaded so far ([`crate::weights::Dropped`]).
    dropped: crate::weights::Dropped,
}

fn convert_dtype(d: Dtype) -> DType {
    match d {
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::U8 => DType::U8,
        other => DType::Other(format!("{other:?}")),
    }
}

/// Name the tensor whose byte range disagrees with its shape and dtype (the crate's
/// error for that case names none); only runs on the error path.
fn find_bad_range(header: &[u8]) -> Option<String> {
    let json: serde_json::Value = serde_json::from_slice(header).ok()?;
    for (name, t) in json.as_object()? {
        if name == "__metadata__" {
            continue;
        }
        let size: u64 = match t.get("dtype")?.as_str()? {
            "F64" | "I64" | "U64" => 8,
            "F32" | "I32" | "U32" => 4,
            "F16" | "BF16" | "I16" | "U16" => 2,
            _ => 1,
        };
        let elems = t.get("shape")?.as_array()?.iter().try_fold(1u64, |a, d| a.checked_mul(d.as_u64()?))?;
        let off = t.get("data_offsets")?.as_array()?;
        let (b, e) = (off.first()?.as_u64()?, off.get(1)?.as_u64()?);
        if e.checked_sub(b) != elems.checked_mul(size) {
            return Some(format!(
                "tensor {name:?}: data_offsets [{b}, {e}) hold {} bytes, shape and dtype need {}",
                e.saturating_sub(b),
                elems.saturating_mul(size)
            ));
        }
    }
    None
}

impl SafeTensors {
    /// Map and validate a safetensors file (mapped by the one `map_file` of weights.rs,
    /// whose safety contract applies: the file must not change while mapped).
    pub fn open(path: &Path) -> Result<SafeTensors, WeightError> {
        let map = map_file(path)?;
        let fmt = |reason: String| WeightError::Format { path: path.to_path_buf(), reason };
        if map.len() < 8 {
            return Err(fmt(format!("truncated: {} bytes, shorter than the 8-byte header length", map.len())));
        }
        let n = u64::from_le_bytes(map[..8].try_into().unwrap_or([0; 8]));
        if n > (map.len() - 8) as u64 {
            return Err(fmt(format!("header length {n} runs past the end of the file ({} bytes)", map.len())));
        }
        let (n, meta): (usize, Metadata) = Parser::read_metadata(&map).map_err(|e| {
            fmt(match e {
                SafeTensorError::InvalidHeaderDeserialization(e) => format!("bad header JSON: {e}"),
                SafeTensorError::InvalidOffset(name) => format!(
                    "tensor {name:?}: data_offsets do not tile the data buffer (a gap, an overlap, or not starting at 0)"
                ),
                SafeTensorError::MetadataIncompleteBuffer => {
                    "the tensors do not cover the data buffer exactly (trailing bytes, or the file is truncated)"
                        .to_string()
                }
                SafeTensorError::TensorInvalidInfo => find_bad_range(&map[8..8 + n as usize])
                    .unwrap_or_else(|| "a tensor's byte range disagrees with its shape and dtype".into()),
                SafeTensorError::ValidationOverflow => "a tensor's shape overflows".to_string(),
                other => other.to_string(),
            })
        })?;
        let data_start = 8 + n;
        let mut tensors = BTreeMap::new();
        for (name, info) in meta.tensors() {
            let (begin, end) = info.data_offsets;
            let entry = Entry { dtype: convert_dtype(info.dtype), shape: info.shape.clone(), begin, end };
            tensors.insert(name, entry);
        }
        let metadata = meta.metadata().clone().unwrap_or_default().into_iter().collect();
        Ok(SafeTensors { path: path.to_path_buf(), map, data_start, tensors, metadata, dropped: Default::default() })
    }

    fn entry(&self, name: &str, shape: &[usize]) -> Result<&Entry, WeightError> {
        check_found(&self.path, name, self.tensors.get(name), |e| &e.shape, shape)
    }

    fn bytes(&self, e: &Entry) -> &[u8] {
        &self.map[self.data_start + e.begin..self.data_start + e.end]
    }
}

/// Widen little-endian F32, F16 or BF16 bytes to f32 (numbers.md; exact).
pub fn widen(dtype: &DType, bytes: &[u8]) -> Option<Vec<f32>> {
    Some(match dtype {
        DType::F32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        // Whole slices: half converts them with F16C where the CPU has it (exact, as the
        // scalar conversion; one call per element cost a 1B adapter's load ~20 ms).
        DType::F16 | DType::BF16 => {
            use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
            let bits: Vec<u16> = bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
            let mut out = vec![0f32; bits.len()];
            if matches!(dtype, DType::F16) {
                bits.reinterpret_cast::<half::f16>().convert_to_f32_slice(&mut out);
            } else {
                bits.reinterpret_cast::<half::bf16>().convert_to_f32_slice(&mut out);
            }
            out
        }
        _ => return None,
    })
}

impl WeightStore for SafeTensors {
    fn path(&self) -> &Path {
        &self.path
    }

    fn names(&self) -> Vec<String> {
        self.tensors.keys().cloned().collect()
    }

    fn info(&self, name: &str) -> Option<TensorInfo> {
        self.tensors.get(name).map(|e| TensorInfo { dtype: e.dtype.clone(), shape: e.shape.clone() })
    }

    fn metadata(&self, key: &str) -> Option<String> {
        self.metadata.get(key).cloned()
    }

    fn f32(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, WeightError> {
        let e = self.entry(name, shape)?;
        widen(&e.dtype, self.bytes(e)).ok_or_else(|| WeightError::DType {
            path: self.path.clone(),
            name: name.to_string(),
            expected: "F32, F16 or BF16",
            actual: e.dtype.clone(),
        })
    }

    fn raw(&self, name: &str, dtype: DType, shape: &[usize]) -> Result<&[u8], WeightError> {
        let e = self.entry(name, shape)?;
        if e.dtype != dtype {
            let expected = match dtype {
                DType::F32 => "F32",
                DType::F16 => "F16",
                DType::BF16 => "BF16",
                DType::U8 => "U8",
                DType::Other(_) => "another type",
            };
            return Err(WeightError::DType {
                path: self.path.clone(),
                name: name.into(),
                expected,
                actual: e.dtype.clone(),
            });
        }
        Ok(self.bytes(e))
    }

    /// The stored bytes of a floating-point tensor (F32, F16, BF16), borrowed from the map.
    fn done_with(&self, name: &str) {
        if let Some(e) = self.tensors.get(name) {
            self.dropped.done(&self.map, self.data_start + e.begin, self.data_start + e.end);
        }
    }

    fn stored(&self, name: &str, shape: &[usize]) -> Result<crate::weights::Stored<'_>, WeightError> {
        let e = self.entry(name, shape)?;
        if !matches!(e.dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(WeightError::DType {
                path: self.path.clone(),
                name: name.into(),
                expected: "F32, F16 or BF16",
                actual: e.dtype.clone(),
            });
        }
        Ok(crate::weights::Stored { dtype: e.dtype.clone(), bytes: std::borrow::Cow::Borrowed(self.bytes(e)) })
    }
}
