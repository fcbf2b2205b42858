//! llama.cpp's GGUF files as a [`WeightStore`], through a memory map.
//!
//! Candle's GGUF reader parses the header (metadata and tensor table) in place over the
//! map (IQ4_NL and MXFP4, which Candle's type list lacks, are read as Q4_0 from a patched
//! copy of the header, typed back and sized by tl-quant); tensor data stays in the map until a tensor
//! is asked for, and is dequantized to f32 then by `tl_quant::dequantize` (F32, F16, BF16,
//! Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K .. Q6_K, MXFP4), the same values the kernels use.
//!
//! The store reads the container only (header, metadata, tensor table, blocks) and
//! knows no architecture. The architecture registered for the file's
//! `general.architecture` ([`crate::gguf_arch`]) says, through [`Gguf::remap`], which
//! name each tensor is read by and whether its rows were stored in another order (a
//! converter's layout fix, undone here on read, whole rows at a time); it also
//! translates the metadata into a config.json. Before `remap`, tensors are served under
//! their GGUF names in stored order.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::quantized::gguf_file::{Content, Value as GValue};
use candle_core::quantized::GgmlDType;
use memmap2::Mmap;
use serde_json::Value;

use crate::config::ConfigError;
use crate::weights::{check_found, map_file, DType, TensorInfo, WeightError, WeightStore};

/// How a stored tensor is served: the name the architecture reads it by and, when the
/// converter stored its rows in another order, the order to undo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMap {
    /// The name the architecture reads the tensor by.
    pub name: String,
    /// `Some(p)`: row `i` as read is stored row `p[i]` (a permutation of the rows of a
    /// 2-D tensor); `None`: rows as stored.
    pub rows: Option<Vec<u32>>,
}

/// One tensor's place in the file.
#[derive(Clone, Debug)]
struct Entry {
    gguf_name: String,
    /// llama.cpp's name of the stored type ([`ggml_name`], or a [`PATCHED`] one).
    ggml: &'static str,
    shape: Vec<usize>, // HF order: (out, in)
    begin: usize,      // absolute byte offsets in the file
    end: usize,
    /// Row `i` as read is stored row `rows[i]`; `None`: as stored.
    rows: Option<Arc<[u32]>>,
}

/// A GGUF file, memory-mapped; tensors are dequantized on demand.
pub struct Gguf {
    path: PathBuf,
    map: Mmap,
    metadata: std::collections::HashMap<String, GValue>,
    tensors: BTreeMap<String, Entry>,
    /// The ranges loaded so far ([`crate::weights::Dropped`]).
    dropped: crate::weights::Dropped,
}

/// llama.cpp's name of a block type (what `DType::Other` carries).
pub fn ggml_name(t: GgmlDType) -> &'static str {
    match t {
        GgmlDType::F32 => "F32",
        GgmlDType::F16 => "F16",
        GgmlDType::BF16 => "BF16",
        GgmlDType::Q4_0 => "Q4_0",
        GgmlDType::Q4_1 => "Q4_1",
        GgmlDType::Q5_0 => "Q5_0",
        GgmlDType::Q5_1 => "Q5_1",
        GgmlDType::Q8_0 => "Q8_0",
        GgmlDType::Q8_1 => "Q8_1",
        GgmlDType::Q2K => "Q2_K",
        GgmlDType::Q3K => "Q3_K",
        GgmlDType::Q4K => "Q4_K",
        GgmlDType::Q5K => "Q5_K",
        GgmlDType::Q6K => "Q6_K",
        GgmlDType::Q8K => "Q8_K",
    }
}

/// GGML type ids Candle's `GgmlDType` lacks that tl reads, by llama.cpp's name: IQ4_NL and
/// MXFP4. Candle's header reader is given a copy of the header with them written as Q4_0
/// (any type it knows: the tensor table stores each tensor's offset, so the stand-in's
/// size is never used), and [`Gguf::open`] sizes them by tl-quant's facts.
const PATCHED: [(u32, &str); 2] = [(20, "IQ4_NL"), (39, "MXFP4")];
/// GGML type id of Q4_0, the stand-in.
const Q4_0: u32 = 2;

fn store_dtype(t: &'static str) -> DType {
    match t {
        "F32" => DType::F32,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        other => DType::Other(other.to_string()),
    }
}

/// Names of GGML type ids Candle cannot read, for the error that names the tensor.
fn unknown_type_name(id: u32) -> String {
    let name = match id {
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        20 => "IQ4_NL",
        21 => "IQ3_S",
        22 => "IQ2_S",
        23 => "IQ4_XS",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        _ => return format!("type id {id}"),
    };
    format!("{name} (type id {id})")
}

/// One tensor-table entry: name, GGML type id, data offset.
type TensorType = (String, u32, usize);

/// Walk the header by hand: each tensor's name, type id and the offset of its type field,
/// and where the tensor table ends. Only runs when Candle's reader failed (a type id it
/// does not know), to read [`PATCHED`] types or to name the tensor in the error.
fn tensor_types(buf: &[u8]) -> Option<(Vec<TensorType>, usize)> {
    struct R<'a>(&'a [u8], usize);
    impl R<'_> {
        fn take(&mut self, n: usize) -> Option<&[u8]> {
            let s = self.0.get(self.1..self.1.checked_add(n)?)?;
            self.1 += n;
            Some(s)
        }
        fn u32(&mut self) -> Option<u32> {
            Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
        }
        fn u64(&mut self) -> Option<u64> {
            Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
        }
        fn string(&mut self) -> Option<String> {
            let n = self.u64()? as usize;
            Some(String::from_utf8_lossy(self.take(n)?).into_owned())
        }
        fn skip_value(&mut self, t: u32, depth: usize) -> Option<()> {
            match t {
                0 | 1 | 7 => self.take(1).map(drop),
                2 | 3 => self.take(2).map(drop),
                4..=6 => self.take(4).map(drop),
                10..=12 => self.take(8).map(drop),
                8 => self.string().map(drop),
                9 if depth < 8 => {
                    let (et, n) = (self.u32()?, self.u64()?);
                    (0..n).try_for_each(|_| self.skip_value(et, depth + 1))
                }
                _ => None,
            }
        }
    }
    let mut r = R(buf, 0);
    if r.take(4)? != b"GGUF" || r.u32()? < 2 {
        return None;
    }
    let (n_tensors, n_kv) = (r.u64()?, r.u64()?);
    for _ in 0..n_kv {
        r.string()?;
        let t = r.u32()?;
        r.skip_value(t, 0)?;
    }
    let mut types = Vec::new();
    for _ in 0..n_tensors.min(buf.len() as u64) {
        let name = r.string()?;
        let dims = r.u32()? as usize;
        r.take(dims.checked_mul(8)?)?;
        let at = r.1;
        let t = r.u32()?;
        r.u64()?;
        types.push((name, t, at));
    }
    Some((types, r.1))
}

/// Whether Candle's reader knows a GGML type id.
fn candle_knows(t: u32) -> bool {
    matches!(t, 0..=3 | 6..=15 | 30)
}

/// Candle's reading of a header whose only unknown type ids are [`PATCHED`]: a copy of the
/// header with them written as Q4_0, and each such tensor's name with its type's name.
/// `Err(Some((name, id)))`: the first tensor of another unknown type; `Err(None)`: the
/// header does not parse.
#[allow(clippy::type_complexity)]
fn read_patched(buf: &[u8]) -> Result<(Content, BTreeMap<String, &'static str>), Option<(String, u32)>> {
    let (types, end) = tensor_types(buf).ok_or(None)?;
    let patched = |t: u32| PATCHED.iter().find(|p| p.0 == t).map(|p| p.1);
    if let Some((name, t, _)) = types.iter().find(|(_, t, _)| !candle_knows(*t) && patched(*t).is_none()) {
        return Err(Some((name.clone(), *t)));
    }
    let mut head = buf[..end].to_vec();
    let mut names = BTreeMap::new();
    for (name, t, at) in types {
        if let Some(real) = patched(t) {
            head[at..at + 4].copy_from_slice(&Q4_0.to_le_bytes());
            names.insert(name, real);
        }
    }
    let content = Content::read(&mut Cursor::new(&head[..])).map_err(|_| None)?;
    Ok((content, names))
}

impl Gguf {
    /// Map a GGUF file and check its header and tensor table.
    pub fn open(path: &Path) -> Result<Gguf, WeightError> {
        let map = map_file(path)?; // the shared read-only map (weights.rs, its safety contract)
        let fmt = |reason: String| WeightError::Format { path: path.to_path_buf(), reason };
        let (content, patched) = match Content::read(&mut Cursor::new(&map[..])) {
            Ok(c) => (c, BTreeMap::new()),
            Err(e) => read_patched(&map).map_err(|unknown| match unknown {
                Some((name, t)) => WeightError::Tensor {
                    path: path.to_path_buf(),
                    name,
                    reason: format!("quantization {} is not supported", unknown_type_name(t)),
                },
                None => fmt(format!("not a readable GGUF file: {}", candle_msg(&e))),
            })?,
        };
        let mut tensors = BTreeMap::new();
        for (gname, info) in &content.tensor_infos {
            let ggml = patched.get(gname).copied().unwrap_or_else(|| ggml_name(info.ggml_dtype));
            let tensor = |reason: String| WeightError::Tensor { path: path.to_path_buf(), name: gname.clone(), reason };
            let shape = info.shape.dims().to_vec();
            let elems = shape
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .ok_or_else(|| tensor("shape overflows".into()))?;
            // A patched type's block from tl-quant's facts (its stand-in's is Candle's).
            let (block, type_size) = match patched.get(gname).and_then(|n| tl_quant::Format::from_ggml_name(n)) {
                Some(f) => f.block_shape().map_or((1, 0), |b| (b.weights, b.bytes)),
                None => (info.ggml_dtype.block_size(), info.ggml_dtype.type_size()),
            };
            if shape.last().is_some_and(|&c| c % block != 0) {
                return Err(tensor(format!(
                    "rows of {} values do not split into {} blocks of {block}",
                    shape.last().copied().unwrap_or(0),
                    ggml
                )));
            }
            // Checked: a claimed 2^63 Q8_0 weights would overflow the byte count (34 / 32).
            let bytes = (elems / block).checked_mul(type_size).ok_or_else(|| tensor("byte size overflows".into()))?;
            let begin = content.tensor_data_offset.checked_add(info.offset).filter(|&b| b <= map.len() as u64);
            let Some(begin) =
                begin.map(|b| b as usize).filter(|b| b.checked_add(bytes).is_some_and(|e| e <= map.len()))
            else {
                return Err(tensor(format!(
                    "data at offset {} + {} bytes runs past the end of the file ({} bytes)",
                    content.tensor_data_offset.saturating_add(info.offset),
                    bytes,
                    map.len()
                )));
            };
            let entry = Entry { gguf_name: gname.clone(), ggml, shape, begin, end: begin + bytes, rows: None };
            tensors.insert(gname.clone(), entry);
        }
        Ok(Gguf { path: path.to_path_buf(), map, metadata: content.metadata, tensors, dropped: Default::default() })
    }

    /// The file's `general.architecture`.
    pub fn architecture(&self) -> Result<&str, WeightError> {
        self.string("general.architecture")?.ok_or_else(|| self.meta_err("general.architecture", "missing"))
    }

    /// Serve the slices of the stacked tensor `gguf_name` (its outermost axis: `[S, ...]`,
    /// `S = names.len()`) as tensors of their own under `names`, each a view of its bytes
    /// (no copy); [`Gguf::remap`] must then list each name. A tensor that is not `S`
    /// slices of whole rows is an error naming it.
    pub fn split(&mut self, gguf_name: &str, names: Vec<String>) -> Result<(), WeightError> {
        let fail = |reason: String| WeightError::Tensor { path: self.path.clone(), name: gguf_name.into(), reason };
        let e = self.tensors.remove(gguf_name).ok_or_else(|| fail("not in the file, or split twice".into()))?;
        let slices = names.len();
        if e.shape.len() < 2 || e.shape[0] != slices || slices == 0 || e.rows.is_some() {
            return Err(fail(format!("shape {:?} is not {slices} stacked slices", e.shape)));
        }
        let bytes = (e.end - e.begin) / slices;
        if bytes * slices != e.end - e.begin {
            return Err(fail(format!("{} bytes do not split into {slices} slices", e.end - e.begin)));
        }
        for (i, name) in names.into_iter().enumerate() {
            let begin = e.begin + i * bytes;
            let slice = Entry {
                gguf_name: format!("{gguf_name}[{i}]"),
                ggml: e.ggml,
                shape: e.shape[1..].to_vec(),
                begin,
                end: begin + bytes,
                rows: None,
            };
            if self.tensors.insert(name.clone(), slice).is_some() {
                return Err(fail(format!("slice {i}'s name {name:?} is taken")));
            }
        }
        Ok(())
    }

    /// Serve each tensor as `map` says (every tensor of the file, by its GGUF name, must
    /// be listed once); a name two tensors map to, or a row order that is not a
    /// permutation of a 2-D tensor's rows, is an error naming the tensor.
    pub fn remap(&mut self, map: Vec<(String, TensorMap)>) -> Result<(), WeightError> {
        let mut old = std::mem::take(&mut self.tensors);
        let fail =
            |name: &str, reason: String| WeightError::Tensor { path: self.path.clone(), name: name.into(), reason };
        for (gname, m) in map {
            let mut e = old.remove(&gname).ok_or_else(|| fail(&gname, "not in the file, or mapped twice".into()))?;
            if let Some(p) = m.rows {
                let rows = e.shape.first().copied().unwrap_or(0);
                let mut seen = vec![false; rows];
                let ok = e.shape.len() == 2
                    && p.len() == rows
                    && p.iter().all(|&r| (r as usize) < rows && !std::mem::replace(&mut seen[r as usize], true));
                if !ok {
                    return Err(fail(
                        &gname,
                        format!("row order of {} entries is not a permutation of its {rows} rows", p.len()),
                    ));
                }
                e.rows = Some(p.into());
            }
            if self.tensors.insert(m.name.clone(), e).is_some() {
                return Err(fail(&gname, format!("two tensors map to {:?}", m.name)));
            }
        }
        if let Some(left) = old.keys().next() {
            return Err(fail(left, "the architecture's translation does not map it".into()));
        }
        Ok(())
    }

    /// A metadata value, as Candle read it.
    pub fn value(&self, key: &str) -> Option<&GValue> {
        self.metadata.get(key)
    }

    /// Set metadata `key` to `value` when the file has none (a GGUF adapter, which
    /// carries no hyperparameters, read with its base model's).
    pub fn set_default(&mut self, key: &str, value: GValue) {
        self.metadata.entry(key.to_string()).or_insert(value);
    }

    /// A `Format` error naming this file and the metadata key.
    pub fn meta_err(&self, key: &str, reason: &str) -> WeightError {
        WeightError::Format { path: self.path.clone(), reason: format!("metadata {key}: {reason}") }
    }

    /// A metadata string.
    pub fn string(&self, key: &str) -> Result<Option<&str>, WeightError> {
        match self.metadata.get(key) {
            None => Ok(None),
            Some(GValue::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.meta_err(key, "expected a string")),
        }
    }

    /// A metadata unsigned integer.
    pub fn uint(&self, key: &str) -> Result<Option<u64>, WeightError> {
        match self.metadata.get(key) {
            None => Ok(None),
            Some(v) => v.to_u64().map(Some).map_err(|_| self.meta_err(key, "expected an unsigned integer")),
        }
    }

    /// A metadata number (f32 values as their shortest decimal).
    pub fn float(&self, key: &str) -> Result<Option<f64>, WeightError> {
        match self.metadata.get(key) {
            None => Ok(None),
            // f32 values are written as their shortest decimal (1e-5, not 9.99999974e-6),
            // as the checkpoint's own config.json had them.
            Some(GValue::F32(x)) => Ok(Some(x.to_string().parse().unwrap_or(*x as f64))),
            Some(GValue::F64(x)) => Ok(Some(*x)),
            Some(v) => v.to_u64().map(|n| Some(n as f64)).map_err(|_| self.meta_err(key, "expected a number")),
        }
    }

    /// A metadata unsigned integer that must be present.
    pub fn required(&self, key: &str) -> Result<u64, WeightError> {
        self.uint(key)?.ok_or_else(|| self.meta_err(key, "missing"))
    }

    /// A metadata array of strings.
    pub fn strings(&self, key: &str) -> Result<Option<Vec<&str>>, WeightError> {
        let Some(v) = self.metadata.get(key) else { return Ok(None) };
        let GValue::Array(items) = v else { return Err(self.meta_err(key, "expected an array of strings")) };
        items
            .iter()
            .map(|v| match v {
                GValue::String(s) => Ok(s.as_str()),
                _ => Err(self.meta_err(key, "expected an array of strings")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// A metadata array of integers.
    pub fn ints(&self, key: &str) -> Result<Option<Vec<i64>>, WeightError> {
        let Some(v) = self.metadata.get(key) else { return Ok(None) };
        let GValue::Array(items) = v else { return Err(self.meta_err(key, "expected an array of integers")) };
        items
            .iter()
            .map(|v| {
                v.to_i64()
                    .or_else(|_| v.to_i32().map(i64::from))
                    .or_else(|_| v.to_u32().map(i64::from))
                    .map_err(|_| self.meta_err(key, "expected an array of integers"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// Whether the file stores a tensor under the GGUF name `gguf_name` (before or after
    /// [`Gguf::remap`]).
    pub fn has_gguf_tensor(&self, gguf_name: &str) -> bool {
        self.tensors.values().any(|e| e.gguf_name == gguf_name)
    }

    /// The GGUF name of the tensor served under `name`.
    pub fn gguf_name(&self, hf: &str) -> Option<&str> {
        self.tensors.get(hf).map(|e| e.gguf_name.as_str())
    }

    /// The file's path.
    pub fn path_buf(&self) -> PathBuf {
        self.path.clone()
    }

    fn entry(&self, name: &str, shape: &[usize]) -> Result<&Entry, WeightError> {
        check_found(&self.path, name, self.tensors.get(name), |e| &e.shape, shape).map_err(|e| match e {
            // A renamed tensor's error names what the file calls it too.
            WeightError::Shape { path, name, expected, actual } => {
                let stored = self.tensors.get(&name).map(|t| t.gguf_name.as_str()).filter(|g| *g != name);
                let name = match stored {
                    Some(g) => format!("{name} (stored as {g})"),
                    None => name,
                };
                WeightError::Shape { path, name, expected, actual }
            }
            e => e,
        })
    }

    /// Every stored type widened by `tl_quant::dequantize` (numbers.md's values, the ones
    /// the kernels compute with), so `--weights f32` and `--weights native` cannot drift.
    fn dequantize(&self, name: &str, e: &Entry) -> Result<Vec<f32>, WeightError> {
        let fail = |reason: String| WeightError::Tensor { path: self.path.clone(), name: name.to_string(), reason };
        let format = tl_quant::Format::from_ggml_name(e.ggml)
            .ok_or_else(|| fail(format!("quantization {} is not supported", e.ggml)))?;
        let elems: usize = e.shape.iter().product();
        if elems == 0 {
            return Ok(Vec::new());
        }
        let cols = e.shape.last().copied().unwrap_or(1); // nonzero: elems is
        tl_quant::dequantize(format, &self.map[e.begin..e.end], elems / cols, cols)
            .map_err(|err| fail(format!("dequantizing {}: {err}", e.ggml)))
    }
}

/// A Candle error's message without the backtrace Candle appends when RUST_BACKTRACE is set.
fn candle_msg(e: &candle_core::Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

/// A GGUF read error as a config error (loading a config from a GGUF reads the file).
pub(crate) fn config_error(e: WeightError, path: &Path) -> ConfigError {
    match e {
        WeightError::Io { path, error } => ConfigError::Io { path, error },
        other => {
            let s = other.to_string();
            let msg = s.strip_prefix(&format!("{}: ", path.display())).map(str::to_string).unwrap_or(s);
            ConfigError::Io {
                path: path.to_path_buf(),
                error: std::io::Error::new(std::io::ErrorKind::InvalidData, msg),
            }
        }
    }
}

/// The GGUF file a model path names: the path itself when it is a `.gguf` file, or
/// `<dir>/model.gguf` when the directory has it and no config.json.
pub fn gguf_source(path: &Path) -> Option<PathBuf> {
    if path.is_file() {
        return path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")).then(|| path.to_path_buf());
    }
    let file = path.join("model.gguf");
    (!path.join("config.json").exists() && file.is_file()).then_some(file)
}

/// Rows back in the order they are read: row `i` of the result is stored row `order[i]`.
fn reorder_rows<T: Copy + Default>(w: &[T], order: &[u32], cols: usize) -> Vec<T> {
    let mut out = vec![T::default(); w.len()];
    for (dst, &src) in out.chunks_exact_mut(cols.max(1)).zip(order) {
        let src = src as usize;
        dst.copy_from_slice(&w[src * cols..(src + 1) * cols]);
    }
    out
}

/// Metadata as text: a top-level string as it is, numbers in decimal, arrays as JSON.
fn render(v: &GValue, top: bool) -> String {
    match v {
        GValue::String(s) if top => s.clone(),
        GValue::String(s) => Value::String(s.clone()).to_string(),
        GValue::Array(items) => format!("[{}]", items.iter().map(|x| render(x, false)).collect::<Vec<_>>().join(",")),
        GValue::U8(x) => x.to_string(),
        GValue::I8(x) => x.to_string(),
        GValue::U16(x) => x.to_string(),
        GValue::I16(x) => x.to_string(),
        GValue::U32(x) => x.to_string(),
        GValue::I32(x) => x.to_string(),
        GValue::U64(x) => x.to_string(),
        GValue::I64(x) => x.to_string(),
        GValue::F32(x) => x.to_string(),
        GValue::F64(x) => x.to_string(),
        GValue::Bool(x) => x.to_string(),
    }
}

impl WeightStore for Gguf {
    fn path(&self) -> &Path {
        &self.path
    }

    fn names(&self) -> Vec<String> {
        self.tensors.keys().cloned().collect()
    }

    fn info(&self, name: &str) -> Option<TensorInfo> {
        self.tensors.get(name).map(|e| TensorInfo { dtype: store_dtype(e.ggml), shape: e.shape.clone() })
    }

    /// GGUF metadata: strings as they are, numbers and booleans in decimal, arrays as JSON.
    fn metadata(&self, key: &str) -> Option<String> {
        self.metadata.get(key).map(|v| render(v, true))
    }

    fn f32(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, WeightError> {
        let e = self.entry(name, shape)?;
        let w = self.dequantize(name, e)?;
        Ok(match &e.rows {
            None => w,
            Some(order) => reorder_rows(&w, order, e.shape[1]),
        })
    }

    fn done_with(&self, name: &str) {
        if let Some(e) = self.tensors.get(name) {
            self.dropped.done(&self.map, e.begin, e.end);
        }
    }

    /// The stored blocks, rows in the order they are read: a reordered tensor's rows are
    /// moved whole (a row is a run of blocks), so its values are not touched.
    fn stored(&self, name: &str, shape: &[usize]) -> Result<crate::weights::Stored<'_>, WeightError> {
        let e = self.entry(name, shape)?;
        let bytes = &self.map[e.begin..e.end];
        let bytes = match &e.rows {
            None => Cow::Borrowed(bytes),
            Some(order) => {
                let row_bytes = bytes.len() / e.shape[0].max(1);
                Cow::Owned(reorder_rows(bytes, order, row_bytes))
            }
        };
        Ok(crate::weights::Stored { dtype: store_dtype(e.ggml), bytes })
    }

    /// The stored bytes. Refused for a tensor whose rows are stored in another order
    /// than they are read: read it with `f32` or `stored`.
    fn raw(&self, name: &str, dtype: DType, shape: &[usize]) -> Result<&[u8], WeightError> {
        let e = self.entry(name, shape)?;
        let stored = store_dtype(e.ggml);
        if stored != dtype {
            return Err(WeightError::DType {
                path: self.path.clone(),
                name: name.into(),
                expected: match dtype {
                    DType::F32 => "F32",
                    DType::F16 => "F16",
                    DType::BF16 => "BF16",
                    DType::U8 => "U8",
                    DType::Other(_) => "another GGML type",
                },
                actual: stored,
            });
        }
        if e.rows.is_some() {
            return Err(WeightError::Tensor {
                path: self.path.clone(),
                name: name.into(),
                reason: "rows are stored permuted (a converter's layout); read it with f32() or stored()".into(),
            });
        }
        Ok(&self.map[e.begin..e.end])
    }
}
