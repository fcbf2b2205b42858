//! The weight store extension point: named tensors from a checkpoint.
//!
//! The first implementation is the memory-mapped safetensors file ([`crate::SafeTensors`]);
//! the trait carries no safetensors detail so other formats (GGUF) fit behind it.

use std::path::{Path, PathBuf};

use thiserror::Error;

/// A stored element type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    BF16,
    /// Bytes (packed int4 weights).
    U8,
    /// A type the store can only dequantize (a GGUF block quant, say), by name.
    Other(String),
}

impl DType {
    /// Bytes per element, where elements have a whole size.
    pub fn size(&self) -> Option<usize> {
        match self {
            DType::F32 => Some(4),
            DType::F16 | DType::BF16 => Some(2),
            DType::U8 => Some(1),
            DType::Other(_) => None,
        }
    }
}

/// What a store knows of a tensor without reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Stored element type.
    pub dtype: DType,
    /// Shape, outermost first (Hugging Face's `[out, in]` for a linear weight).
    pub shape: Vec<usize>,
}

/// A weight that cannot be read as asked. Every variant names the file.
#[derive(Debug, Error)]
pub enum WeightError {
    /// The file could not be opened or mapped.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// The file's structure breaks the format's rules.
    #[error("{}: {reason}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What rule it breaks.
        reason: String,
    },
    /// A tensor breaks the format's rules.
    #[error("{}: tensor {name:?}: {reason}", path.display())]
    Tensor {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor the model needs is not in the file.
    #[error("{}: missing tensor {name:?}", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
    },
    /// A tensor whose shape is not what the config implies.
    #[error("{}: tensor {name:?} has shape {actual:?}, expected {expected:?}", path.display())]
    Shape {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// The shape the config implies.
        expected: Vec<usize>,
        /// The stored shape.
        actual: Vec<usize>,
    },
    /// A tensor stored in a type this read does not accept.
    #[error("{}: tensor {name:?} is {actual:?}, expected {expected}", path.display())]
    DType {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// What the read accepts.
        expected: &'static str,
        /// The stored type.
        actual: DType,
    },
}

/// Map a checkpoint file read-only: the one `unsafe` of weight loading, shared by every
/// store (safetensors, GGUF), so its contract is stated and kept in one place.
///
/// # Safety
///
/// memmap2's map is unsafe because another process could truncate or rewrite the file
/// while it is mapped. Model files are opened read-only and treated as immutable while
/// the runner lives; a user who rewrites a checkpoint under a running model gets
/// undefined contents, as with every mmap-based loader (Candle, llama.cpp, safetensors).
pub(crate) fn map_file(path: &Path) -> Result<memmap2::Mmap, WeightError> {
    let io = |error| WeightError::Io { path: path.to_path_buf(), error };
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: see the doc comment: the file is not modified while mapped.
    unsafe { memmap2::Mmap::map(&file) }.map_err(io)
}

/// Drop the pages of `map[begin..end]` from memory (a hint; errors are ignored: the
/// pages then simply stay resident). The next access reads them again from the file.
///
/// Loading copies every tensor into the kernels' layout; without this hint the mapped
/// file and the repacked copy would both be resident at the end of load (peak RSS twice
/// the weights for an F32 file).
pub(crate) fn drop_pages(map: &memmap2::Mmap, begin: usize, end: usize) {
    if begin >= end || end > map.len() {
        return;
    }
    // SAFETY: MADV_DONTNEED on a read-only, never-written file mapping discards only
    // clean page-cache pages; any later read (including through a slice borrowed
    // before this call) faults them back in from the file with the same bytes. It
    // relies on the file not changing while mapped, which `map_file` already assumes.
    // memmap2 checks the range and rounds it out to whole pages.
    #[cfg(unix)]
    let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, begin, end - begin) };
}

/// The ranges of a map whose tensors are loaded, dropped again now and then: the kernel's
/// readahead past a tensor's end brings in pages of the tensor after it in the file, and
/// when that one was loaded already (files order tensors by name, `blk.10` before `blk.2`;
/// loaders go by layer) nothing drops them again until the map goes. On a 2.2 GB MoE file
/// those pages grew to ~120 MB by the end of the load: the load's peak RSS.
#[derive(Default)]
pub(crate) struct Dropped(std::sync::Mutex<(Vec<(usize, usize)>, usize)>);

impl Dropped {
    /// Bytes dropped between two sweeps of every loaded range.
    const SWEEP: usize = 64 << 20;

    /// `map[begin..end]` is loaded: drop its pages, and every [`Dropped::SWEEP`] bytes
    /// those of every range loaded so far (merged, so the sweep is a few calls).
    pub(crate) fn done(&self, map: &memmap2::Mmap, begin: usize, end: usize) {
        drop_pages(map, begin, end);
        let Ok(mut g) = self.0.lock() else { return };
        let (ranges, since) = &mut *g;
        ranges.push((begin, end));
        *since += end.saturating_sub(begin);
        if *since < Self::SWEEP {
            return;
        }
        *since = 0;
        ranges.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
        for &(b, e) in ranges.iter() {
            match merged.last_mut() {
                // Touching or overlapping (a page apart at most: the bytes between two
                // tensors are alignment padding).
                Some(last) if b <= last.1 + 4096 => last.1 = last.1.max(e),
                _ => merged.push((b, e)),
            }
        }
        for &(b, e) in &merged {
            drop_pages(map, b, e);
        }
        *ranges = merged;
    }
}

/// The `Missing` or `Shape` error for tensor `name` of `path`, or `Ok` when `found` holds
/// a tensor of the `expected` shape; the stores' shared lookup rule.
pub(crate) fn check_found<'a, T>(
    path: &Path,
    name: &str,
    found: Option<&'a T>,
    shape_of: impl Fn(&T) -> &[usize],
    expected: &[usize],
) -> Result<&'a T, WeightError> {
    let t = found.ok_or_else(|| WeightError::Missing { path: path.to_path_buf(), name: name.to_string() })?;
    if shape_of(t) != expected {
        return Err(WeightError::Shape {
            path: path.to_path_buf(),
            name: name.to_string(),
            expected: expected.to_vec(),
            actual: shape_of(t).to_vec(),
        });
    }
    Ok(t)
}

/// A tensor as the file stores it.
#[derive(Clone, Debug)]
pub struct Stored<'a> {
    /// The stored element or block type.
    pub dtype: DType,
    /// Little-endian bytes, rows in Hugging Face order (`[out, in]` row-major; a GGML
    /// block type as a run of blocks along each row). Borrowed from the file's map where
    /// the file's order is already Hugging Face's.
    pub bytes: std::borrow::Cow<'a, [u8]>,
}

/// Named tensors from a checkpoint.
pub trait WeightStore: Send + Sync {
    /// The file the tensors come from (for messages).
    fn path(&self) -> &Path;
    /// Every tensor name, sorted.
    fn names(&self) -> Vec<String>;
    /// Type and shape of a tensor, or `None` when absent.
    fn info(&self, name: &str) -> Option<TensorInfo>;
    /// A free-form metadata entry of the file (safetensors `__metadata__`, GGUF keys).
    fn metadata(&self, key: &str) -> Option<String>;
    /// The tensor widened to f32 (F32, F16, BF16; other stores may dequantize), after
    /// checking its shape equals `shape`.
    fn f32(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, WeightError>;
    /// The stored bytes of a tensor (little-endian), after checking type and shape.
    fn raw(&self, name: &str, dtype: DType, shape: &[usize]) -> Result<&[u8], WeightError>;

    /// The tensor in its stored type (so a model can keep f16, bf16 or quantized blocks
    /// as they are), after checking its shape. The default widens to f32 through
    /// [`WeightStore::f32`], for stores that have nothing narrower.
    fn stored(&self, name: &str, shape: &[usize]) -> Result<Stored<'_>, WeightError> {
        let w = self.f32(name, shape)?;
        Ok(Stored { dtype: DType::F32, bytes: w.iter().flat_map(|v| v.to_le_bytes()).collect() })
    }

    /// A hint that the caller has copied what it keeps of tensor `name`: a mapped store
    /// drops the tensor's pages from memory (read again from the file if asked for
    /// again), so load never holds the whole mapped file beside the repacked weights.
    /// Results never depend on it; the default does nothing.
    fn done_with(&self, name: &str) {
        let _ = name;
    }

    /// True when the store has a tensor of that name.
    fn contains(&self, name: &str) -> bool {
        self.info(name).is_some()
    }

    /// The tensor as an f32 Candle tensor of shape `shape` on `device`.
    fn tensor(
        &self,
        name: &str,
        shape: &[usize],
        device: &candle_core::Device,
    ) -> Result<candle_core::Tensor, WeightError> {
        let data = self.f32(name, shape)?;
        candle_core::Tensor::from_vec(data, shape, device).map_err(|e| WeightError::Tensor {
            path: self.path().to_path_buf(),
            name: name.to_string(),
            reason: e.to_string(),
        })
    }
}

/// Keep glibc's heap from holding on to what loading frees. Loading a model allocates and
/// frees many buffers of a few hundred KiB (stored bytes being repacked, parts fused into
/// one projection); glibc raises its mmap threshold each time such a chunk is freed, so
/// later ones come from the heap, and the freed temporaries stay resident between the
/// weights that outlive them. On a mixture of experts (thousands of expert matrices) that
/// was 19% more resident memory than the weights, and twice the load time (measured:
/// docs/benchmarks.md, the MoE table). [`bound_heap`] fixes the threshold at glibc's
/// default (128 KiB) for the load, so chunks that size are mapped and unmapped whole;
/// [`steady_heap`] raises it after, to glibc's own ceiling (32 MiB), so a step's buffers
/// (logits, scratch) are reused from the heap rather than mapped and unmapped every step.
/// No-ops off glibc.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn mmap_threshold(bytes: i32) {
    extern "C" {
        fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
    }
    const M_MMAP_THRESHOLD: std::ffi::c_int = -3; // glibc's malloc.h
                                                  // SAFETY: mallopt is glibc's documented, thread-safe tuning call; it changes where
                                                  // later allocations come from, never what a live allocation holds.
    let _ = unsafe { mallopt(M_MMAP_THRESHOLD, bytes) };
}

/// Before a load: see [`mmap_threshold`].
pub(crate) fn bound_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    mmap_threshold(128 * 1024);
}

/// After a load: see [`mmap_threshold`].
pub(crate) fn steady_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    mmap_threshold(32 * 1024 * 1024);
}
