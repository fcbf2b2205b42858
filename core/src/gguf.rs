//! llama.cpp's GGUF files as a [`WeightStore`], through a memory map.
//!
//! Candle's GGUF reader parses the header (metadata and tensor table) in place over the
//! map; tensor data stays in the map until a tensor is asked for, and is dequantized to
//! f32 then (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1 and the k-quants).
//!
//! The store speaks Hugging Face: GGUF names are mapped to HF names
//! (`blk.N.attn_q.weight` -> `model.layers.N.self_attn.q_proj.weight`, ...), shapes are
//! HF's `[out, in]`, and the row permutation llama.cpp's converter applies to the Q and
//! K projections is undone, so an architecture written against HF checkpoints runs
//! unchanged. [`Gguf::config_json`] translates the `llama.*` metadata to a config.json.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{Content, Value as GValue};
use candle_core::quantized::{GgmlDType, QStorage, QTensor};
use memmap2::Mmap;
use serde_json::{json, Map, Value};

use crate::config::ConfigError;
use crate::safetensors::widen;
use crate::weights::{check_found, map_file, DType, TensorInfo, WeightError, WeightStore};

/// Whether a tensor's rows were permuted by llama.cpp's converter, and over how many heads.
#[derive(Clone, Copy, Debug)]
enum Rows {
    AsStored,
    /// `permute(w, n_head, n_head_kv)` was applied with this many heads.
    Permuted(usize),
}

/// One tensor's place in the file.
#[derive(Clone, Debug)]
struct Entry {
    gguf_name: String,
    ggml: GgmlDType,
    shape: Vec<usize>, // HF order: (out, in)
    begin: usize,      // absolute byte offsets in the file
    end: usize,
    rows: Rows,
}

/// A GGUF file, memory-mapped; tensors are dequantized on demand.
pub struct Gguf {
    path: PathBuf,
    map: Mmap,
    metadata: std::collections::HashMap<String, GValue>,
    tensors: BTreeMap<String, Entry>,
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

fn store_dtype(t: GgmlDType) -> DType {
    match t {
        GgmlDType::F32 => DType::F32,
        GgmlDType::F16 => DType::F16,
        GgmlDType::BF16 => DType::BF16,
        other => DType::Other(ggml_name(other).to_string()),
    }
}

/// The HF name of a GGUF tensor name, or `None` when it has no HF counterpart.
pub fn hf_name(gguf: &str) -> Option<String> {
    match gguf {
        "token_embd.weight" => return Some("model.embed_tokens.weight".into()),
        "output_norm.weight" => return Some("model.norm.weight".into()),
        "output.weight" => return Some("lm_head.weight".into()),
        _ => {}
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, part) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let hf = match part {
        "attn_q.weight" => "self_attn.q_proj.weight",
        "attn_k.weight" => "self_attn.k_proj.weight",
        "attn_v.weight" => "self_attn.v_proj.weight",
        "attn_output.weight" => "self_attn.o_proj.weight",
        "ffn_gate.weight" => "mlp.gate_proj.weight",
        "ffn_up.weight" => "mlp.up_proj.weight",
        "ffn_down.weight" => "mlp.down_proj.weight",
        "attn_norm.weight" => "input_layernorm.weight",
        "ffn_norm.weight" => "post_attention_layernorm.weight",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}"))
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

/// Walk the header by hand to find the first tensor whose type id Candle does not know;
/// only runs when Candle's reader failed, to name the tensor in the error.
fn find_unknown_type(buf: &[u8]) -> Option<(String, u32)> {
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
    for _ in 0..n_tensors {
        let name = r.string()?;
        let dims = r.u32()? as usize;
        r.take(dims.checked_mul(8)?)?;
        let t = r.u32()?;
        r.u64()?;
        if !matches!(t, 0..=3 | 6..=15 | 30) {
            return Some((name, t));
        }
    }
    None
}

impl Gguf {
    /// Map a GGUF file and check its header and tensor table.
    pub fn open(path: &Path) -> Result<Gguf, WeightError> {
        let map = map_file(path)?; // the shared read-only map (weights.rs, its safety contract)
        let fmt = |reason: String| WeightError::Format { path: path.to_path_buf(), reason };
        let content = Content::read(&mut Cursor::new(&map[..])).map_err(|e| match find_unknown_type(&map) {
            Some((name, t)) => WeightError::Tensor {
                path: path.to_path_buf(),
                name,
                reason: format!("quantization {} is not supported (Candle cannot read it)", unknown_type_name(t)),
            },
            None => fmt(format!("not a readable GGUF file: {}", candle_msg(&e))),
        })?;
        match content.metadata.get("general.architecture") {
            Some(GValue::String(a)) if a == "llama" => {}
            Some(GValue::String(a)) => {
                return Err(fmt(format!("general.architecture = {a:?}: only \"llama\" GGUF files are supported")))
            }
            _ => return Err(fmt("metadata key general.architecture is missing".into())),
        }
        let heads = |key: &str| -> Result<usize, WeightError> {
            content
                .metadata
                .get(key)
                .and_then(|v| v.to_u64().ok())
                .filter(|&n| n > 0)
                .map(|n| n as usize)
                .ok_or_else(|| fmt(format!("metadata key {key} is missing or not a positive integer")))
        };
        let n_head = heads("llama.attention.head_count")?;
        let n_kv = match content.metadata.get("llama.attention.head_count_kv") {
            None => n_head,
            Some(_) => heads("llama.attention.head_count_kv")?,
        };
        let mut tensors = BTreeMap::new();
        for (gname, info) in &content.tensor_infos {
            let tensor = |reason: String| WeightError::Tensor { path: path.to_path_buf(), name: gname.clone(), reason };
            let shape = info.shape.dims().to_vec();
            let elems = shape
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .ok_or_else(|| tensor("shape overflows".into()))?;
            let block = info.ggml_dtype.block_size();
            if shape.last().is_some_and(|&c| c % block != 0) {
                return Err(tensor(format!(
                    "rows of {} values do not split into {} blocks of {block}",
                    shape.last().copied().unwrap_or(0),
                    ggml_name(info.ggml_dtype)
                )));
            }
            let bytes = elems / block * info.ggml_dtype.type_size();
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
            let rows = match gname.rsplit('.').nth(1) {
                Some("attn_q") => Rows::Permuted(n_head),
                Some("attn_k") => Rows::Permuted(n_kv),
                _ => Rows::AsStored,
            };
            if let Rows::Permuted(h) = rows {
                if shape.len() != 2 || shape[0] % (2 * h) != 0 {
                    return Err(tensor(format!("shape {shape:?} does not split into {h} heads of even size")));
                }
            }
            let name = hf_name(gname).unwrap_or_else(|| gname.clone());
            let entry =
                Entry { gguf_name: gname.clone(), ggml: info.ggml_dtype, shape, begin, end: begin + bytes, rows };
            if tensors.insert(name.clone(), entry).is_some() {
                return Err(tensor(format!("two tensors map to {name:?}")));
            }
        }
        Ok(Gguf { path: path.to_path_buf(), map, metadata: content.metadata, tensors })
    }

    /// A metadata value, as Candle read it.
    pub fn value(&self, key: &str) -> Option<&GValue> {
        self.metadata.get(key)
    }

    pub(crate) fn meta_err(&self, key: &str, reason: &str) -> WeightError {
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

    fn float(&self, key: &str) -> Result<Option<f64>, WeightError> {
        match self.metadata.get(key) {
            None => Ok(None),
            // f32 values are written as their shortest decimal (1e-5, not 9.99999974e-6),
            // as the checkpoint's own config.json had them.
            Some(GValue::F32(x)) => Ok(Some(x.to_string().parse().unwrap_or(*x as f64))),
            Some(GValue::F64(x)) => Ok(Some(*x)),
            Some(v) => v.to_u64().map(|n| Some(n as f64)).map_err(|_| self.meta_err(key, "expected a number")),
        }
    }

    fn required(&self, key: &str) -> Result<u64, WeightError> {
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

    /// The GGUF name of the tensor stored under an HF name.
    pub fn gguf_name(&self, hf: &str) -> Option<&str> {
        self.tensors.get(hf).map(|e| e.gguf_name.as_str())
    }

    /// A config.json (Hugging Face's Llama fields plus `tl_arch: "llama"` and
    /// `tl_tokenizer: "hf"`) translated from the `llama.*` and `tokenizer.ggml.*` metadata.
    pub fn config_json(&self) -> Result<Value, WeightError> {
        let hidden = self.required("llama.embedding_length")?;
        let heads = self.required("llama.attention.head_count")?;
        let kv_heads = self.uint("llama.attention.head_count_kv")?.unwrap_or(heads);
        if heads == 0 || hidden % heads != 0 {
            return Err(self.meta_err("llama.attention.head_count", &format!("{heads} does not divide {hidden}")));
        }
        let head_dim = self.uint("llama.attention.key_length")?.unwrap_or(hidden / heads);
        if let Some(v) = self.uint("llama.attention.value_length")? {
            if v != head_dim {
                return Err(self.meta_err("llama.attention.value_length", "differs from the key length"));
            }
        }
        if let Some(rot) = self.uint("llama.rope.dimension_count")? {
            if rot != head_dim {
                return Err(self.meta_err(
                    "llama.rope.dimension_count",
                    &format!("{rot} != head size {head_dim}: partial rotary embeddings are not supported"),
                ));
            }
        }
        if let Some(t) = self.string("llama.rope.scaling.type")? {
            if t != "none" {
                return Err(self.meta_err("llama.rope.scaling.type", &format!("{t:?}: scaled RoPE is not supported")));
            }
        }
        if self.tensors.contains_key("rope_freqs.weight") {
            return Err(self.meta_err("rope_freqs.weight", "per-frequency RoPE factors are not supported"));
        }
        let vocab = match self.strings("tokenizer.ggml.tokens")? {
            Some(t) => t.len() as u64,
            None => self.required("llama.vocab_size")?,
        };
        let mut cfg = Map::new();
        cfg.insert("architectures".into(), json!(["LlamaForCausalLM"]));
        cfg.insert("model_type".into(), json!("llama"));
        cfg.insert("tl_arch".into(), json!("llama"));
        cfg.insert("tl_tokenizer".into(), json!("hf"));
        cfg.insert("vocab_size".into(), json!(vocab));
        cfg.insert("hidden_size".into(), json!(hidden));
        cfg.insert("intermediate_size".into(), json!(self.required("llama.feed_forward_length")?));
        cfg.insert("num_hidden_layers".into(), json!(self.required("llama.block_count")?));
        cfg.insert("num_attention_heads".into(), json!(heads));
        cfg.insert("num_key_value_heads".into(), json!(kv_heads));
        cfg.insert("head_dim".into(), json!(head_dim));
        cfg.insert("hidden_act".into(), json!("silu"));
        cfg.insert("attention_bias".into(), json!(false));
        cfg.insert("mlp_bias".into(), json!(false));
        if let Some(eps) = self.float("llama.attention.layer_norm_rms_epsilon")? {
            cfg.insert("rms_norm_eps".into(), json!(eps));
        }
        cfg.insert("rope_theta".into(), json!(self.float("llama.rope.freq_base")?.unwrap_or(10000.0)));
        if let Some(ctx) = self.uint("llama.context_length")? {
            cfg.insert("max_position_embeddings".into(), json!(ctx));
        }
        cfg.insert("tie_word_embeddings".into(), json!(!self.tensors.contains_key("lm_head.weight")));
        if let Some(bos) = self.uint("tokenizer.ggml.bos_token_id")? {
            cfg.insert("bos_token_id".into(), json!(bos));
        }
        // llama.cpp stops at every end-of-generation id: EOS and, when given, EOT.
        let mut eos: Vec<u64> = Vec::new();
        for key in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"] {
            if let Some(id) = self.uint(key)? {
                if !eos.contains(&id) {
                    eos.push(id);
                }
            }
        }
        match eos.as_slice() {
            [] => {}
            [one] => drop(cfg.insert("eos_token_id".into(), json!(one))),
            many => drop(cfg.insert("eos_token_id".into(), json!(many))),
        }
        if let Some(pad) = self.uint("tokenizer.ggml.padding_token_id")? {
            cfg.insert("pad_token_id".into(), json!(pad));
        }
        Ok(Value::Object(cfg))
    }

    /// The file's path.
    pub fn path_buf(&self) -> PathBuf {
        self.path.clone()
    }

    fn entry(&self, name: &str, shape: &[usize]) -> Result<&Entry, WeightError> {
        check_found(&self.path, name, self.tensors.get(name), |e| &e.shape, shape)
    }

    fn dequantize(&self, name: &str, e: &Entry) -> Result<Vec<f32>, WeightError> {
        let bytes = &self.map[e.begin..e.end];
        if let Some(v) = widen(&store_dtype(e.ggml), bytes) {
            return Ok(v);
        }
        let fail = |reason: String| WeightError::Tensor { path: self.path.clone(), name: name.to_string(), reason };
        // Candle reinterprets the bytes as blocks in place and asserts their alignment (at
        // most 4 for any block type); GGUF aligns tensor data to 32, so the copy below
        // only runs for an odd file, and keeps it from panicking.
        let aligned: Vec<u64>;
        let bytes: &[u8] = if bytes.as_ptr().align_offset(8) == 0 {
            bytes
        } else {
            let mut buf = vec![0u64; bytes.len().div_ceil(8)];
            bytemuck::cast_slice_mut::<u64, u8>(&mut buf)[..bytes.len()].copy_from_slice(bytes);
            aligned = buf;
            &bytemuck::cast_slice::<u64, u8>(&aligned)[..bytes.len()]
        };
        let storage = QStorage::from_data(Cow::Borrowed(bytes), &candle_core::Device::Cpu, e.ggml)
            .map_err(|err| fail(candle_msg(&err)))?;
        let q = QTensor::new(storage, e.shape.as_slice()).map_err(|err| fail(candle_msg(&err)))?;
        q.dequantize(&candle_core::Device::Cpu)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(|err| fail(format!("dequantizing {}: {}", ggml_name(e.ggml), candle_msg(&err))))
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

/// Undo llama.cpp's `permute(w, n_head)`: HF row `h*D + half*D/2 + i` is stored as row
/// `h*D + 2*i + half` (the converter interleaves the two RoPE halves of each head).
fn unpermute_rows<T: Copy + Default>(w: &[T], rows: usize, cols: usize, n_head: usize) -> Vec<T> {
    let d = rows / n_head;
    let mut out = vec![T::default(); w.len()];
    for h in 0..n_head {
        for half in 0..2 {
            for i in 0..d / 2 {
                let hf = h * d + half * (d / 2) + i;
                let stored = h * d + 2 * i + half;
                out[hf * cols..(hf + 1) * cols].copy_from_slice(&w[stored * cols..(stored + 1) * cols]);
            }
        }
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
        Ok(match e.rows {
            Rows::AsStored => w,
            Rows::Permuted(h) => unpermute_rows(&w, e.shape[0], e.shape[1], h),
        })
    }

    /// The stored blocks, rows in Hugging Face order: the Q and K projections' rows are
    /// moved back from llama.cpp's permuted order whole (a row is a run of blocks), so
    /// their values are not touched.
    fn done_with(&self, name: &str) {
        if let Some(e) = self.tensors.get(name) {
            crate::weights::drop_pages(&self.map, e.begin, e.end);
        }
    }

    fn stored(&self, name: &str, shape: &[usize]) -> Result<crate::weights::Stored<'_>, WeightError> {
        let e = self.entry(name, shape)?;
        let bytes = &self.map[e.begin..e.end];
        let bytes = match e.rows {
            Rows::AsStored => Cow::Borrowed(bytes),
            Rows::Permuted(h) => {
                let rows = e.shape[0];
                let row_bytes = bytes.len() / rows.max(1);
                Cow::Owned(unpermute_rows(bytes, rows, row_bytes, h))
            }
        };
        Ok(crate::weights::Stored { dtype: store_dtype(e.ggml), bytes })
    }

    /// The stored bytes. Refused for the Q and K projections, whose stored rows are in
    /// llama.cpp's permuted order: read those with `f32`.
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
        if let Rows::Permuted(_) = e.rows {
            return Err(WeightError::Tensor {
                path: self.path.clone(),
                name: name.into(),
                reason: "rows are stored in llama.cpp's permuted order; read it with f32()".into(),
            });
        }
        Ok(&self.map[e.begin..e.end])
    }
}
