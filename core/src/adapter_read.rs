//! Reading LoRA adapters: PEFT directories (`adapter_config.json` +
//! `adapter_model.safetensors`) and GGUF adapter files as llama.cpp's
//! `convert_lora_to_gguf.py` writes them. Both give a [`RawAdapter`] under Hugging Face's
//! module names, with every value widened exactly to f32, which [`Adapter::bind`] then
//! checks against the model.
//!
//! [`Adapter::bind`]: crate::adapter::Adapter::bind

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::quantized::gguf_file::Value as GValue;
use rayon::prelude::*;
use serde_json::Value;

use crate::adapter::{Adaptable, Adapter, AdapterError, Narrow, RawAdapter, RawLora};
use crate::config::ModelConfig;
use crate::gguf::{Gguf, TensorMap};
use crate::registry;
use crate::safetensors::SafeTensors;
use crate::weights::WeightStore;

/// Loads adapters for one model: its config (a GGUF adapter's head counts, a nested
/// checkpoint's names) and the projections it adapts.
#[derive(Clone)]
pub struct AdapterLoader {
    /// The base model's config.
    pub config: crate::config::ModelConfig,
    /// What the model adapts ([`crate::Model::adaptable`]).
    pub targets: Vec<Adaptable>,
}

impl AdapterLoader {
    /// Read the adapter at `path` (a PEFT directory or a GGUF adapter file) and bind it
    /// under `name` ([`Adapter::bind`]).
    pub fn load(&self, name: &str, path: &Path) -> Result<Adapter, AdapterError> {
        Adapter::bind(name, read(path, &self.config)?, &self.targets)
    }
}

/// Read the adapter at `path` (a PEFT directory or a `.gguf` file) for the model `base`
/// (its config gives a GGUF adapter's head counts, which the file does not carry, and a
/// nested checkpoint's prefixes).
pub fn read(path: &Path, base: &ModelConfig) -> Result<RawAdapter, AdapterError> {
    if path.is_dir() {
        return read_peft(path, base);
    }
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
        return read_gguf(path, base);
    }
    let error = if path.exists() {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "expected a PEFT adapter directory or a .gguf file")
    } else {
        std::io::Error::new(std::io::ErrorKind::NotFound, "no such adapter directory or file")
    };
    Err(AdapterError::Io { path: path.to_path_buf(), error })
}

fn config_err(path: &Path, field: &str, reason: impl Into<String>) -> AdapterError {
    AdapterError::Config { path: path.to_path_buf(), field: field.to_string(), reason: reason.into() }
}

fn tensor_err(path: &Path, tensor: &str, reason: impl Into<String>) -> AdapterError {
    AdapterError::Tensor { path: path.to_path_buf(), tensor: tensor.to_string(), reason: reason.into() }
}

/// What adapter_config.json says about the numbers.
struct PeftConfig {
    alpha: f64,
    rslora: bool,
    /// `alpha_pattern`: a module-name suffix and its alpha.
    alphas: Vec<(String, f64)>,
}

impl PeftConfig {
    /// The alpha of `module`: peft's rule, the first `alpha_pattern` key that is the
    /// module's name or a dotted suffix of it, else `lora_alpha`.
    fn alpha(&self, module: &str) -> f64 {
        let hit = |k: &str| module == k || module.strip_suffix(k).is_some_and(|p| p.ends_with('.'));
        self.alphas.iter().find(|(k, _)| hit(k)).map_or(self.alpha, |(_, a)| *a)
    }
}

fn peft_config(path: &Path, base_class: Option<&str>) -> Result<PeftConfig, AdapterError> {
    let text = std::fs::read_to_string(path).map_err(|error| AdapterError::Io { path: path.to_path_buf(), error })?;
    let json: Value = serde_json::from_str(&text).map_err(|e| config_err(path, "(json)", e.to_string()))?;
    let get = |k: &str| json.get(k).filter(|v| !v.is_null());
    if let Some(t) = get("peft_type") {
        if t.as_str() != Some("LORA") {
            return Err(config_err(path, "peft_type", format!("{t}: only LORA adapters are read")));
        }
    }
    // peft records the class it was trained on; one for another family is refused even
    // when the shapes happen to agree.
    let trained = json.pointer("/auto_mapping/base_model_class").and_then(Value::as_str);
    if let (Some(t), Some(b)) = (trained, base_class) {
        if t != b {
            return Err(config_err(path, "auto_mapping.base_model_class", format!("{t}, but the model is a {b}")));
        }
    }
    let flag = |k: &str| -> Result<bool, AdapterError> {
        match get(k) {
            None => Ok(false),
            Some(v) => v.as_bool().ok_or_else(|| config_err(path, k, format!("{v}: expected true or false"))),
        }
    };
    for (k, what) in [
        ("use_dora", "DoRA (a magnitude vector per module) is not the LoRA rule tl runs"),
        ("fan_in_fan_out", "fan-in-fan-out weights (Conv1D bases) are not run"),
        ("lora_bias", "a bias on lora_B is not run"),
    ] {
        if flag(k)? {
            return Err(config_err(path, k, what));
        }
    }
    if let Some(b) = get("bias").filter(|b| b.as_str() != Some("none")) {
        return Err(config_err(path, "bias", format!("{b}: trained base biases are not run (only \"none\")")));
    }
    let nonempty =
        |v: &Value| v.as_array().is_some_and(|a| !a.is_empty()) || v.as_object().is_some_and(|o| !o.is_empty());
    for (k, what) in [
        ("modules_to_save", "whole modules saved beside the adapter (a new head or embedding) are not run"),
        ("target_parameters", "adapters on raw parameters (expert stacks) are not run"),
        ("alora_invocation_tokens", "activated LoRA (aLoRA) is not run"),
        ("layer_replication", "layer replication is not run"),
        ("trainable_token_indices", "trainable token rows are not run"),
    ] {
        if get(k).is_some_and(|v| nonempty(v) || v.is_number()) {
            return Err(config_err(path, k, what));
        }
    }
    let number = |k: &str, default: f64| -> Result<f64, AdapterError> {
        match get(k) {
            None => Ok(default),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .ok_or_else(|| config_err(path, k, format!("{v}: expected a finite number"))),
        }
    };
    let mut alphas = Vec::new();
    if let Some(p) = get("alpha_pattern") {
        let map = p.as_object().ok_or_else(|| config_err(path, "alpha_pattern", "expected an object"))?;
        for (k, v) in map {
            // peft matches keys as regular expressions; plain dotted names are the common
            // case and mean a name or a dotted suffix.
            if !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
                return Err(config_err(path, "alpha_pattern", format!("key {k:?}: only plain module names are read")));
            }
            let a = v
                .as_f64()
                .filter(|x| x.is_finite())
                .ok_or_else(|| config_err(path, "alpha_pattern", format!("{k}: {v} is not a number")))?;
            alphas.push((k.clone(), a));
        }
    }
    Ok(PeftConfig { alpha: number("lora_alpha", 8.0)?, rslora: flag("use_rslora")?, alphas })
}

/// One half of a pair as found.
struct Half {
    name: String,
    shape: Vec<usize>,
    values: Vec<f32>,
    /// The stored bytes when the file holds the tensor in F16 or BF16 (kept as stored).
    narrow: Option<Narrow>,
}

/// A tensor's F16 or BF16 bytes (rows in Hugging Face's order), when stored so.
fn narrow(stored: crate::weights::Stored<'_>) -> Option<Narrow> {
    match stored.dtype {
        crate::weights::DType::F16 => Some((tl_quant::Format::F16, stored.bytes.into_owned())),
        crate::weights::DType::BF16 => Some((tl_quant::Format::BF16, stored.bytes.into_owned())),
        _ => None,
    }
}

/// The halves found so far, per module: `(A, B)`.
type Found = BTreeMap<String, (Option<Half>, Option<Half>)>;

/// Record `half` as `module`'s A (`is_a`) or B.
fn put(found: &mut Found, module: String, is_a: bool, half: Half) {
    let slot = found.entry(module).or_default();
    if is_a {
        slot.0 = Some(half);
    } else {
        slot.1 = Some(half);
    }
}

/// Pair the halves found per module; a half without its other is refused, naming it.
fn pair(
    path: &Path,
    found: Found,
    alpha: impl Fn(&str, usize) -> f64,
    rslora: bool,
) -> Result<RawAdapter, AdapterError> {
    let mut modules = BTreeMap::new();
    for (module, halves) in found {
        let (a, b) = match halves {
            (Some(a), Some(b)) => (a, b),
            (Some(h), None) => return Err(tensor_err(path, &h.name, "its lora_B half is missing")),
            (None, Some(h)) => return Err(tensor_err(path, &h.name, "its lora_A half is missing")),
            (None, None) => continue,
        };
        let r = a.shape.first().copied().unwrap_or(0);
        let lora = RawLora {
            alpha: alpha(&module, r),
            rslora,
            a_name: a.name,
            a: a.values,
            a_shape: a.shape,
            a_narrow: a.narrow,
            b_name: b.name,
            b: b.values,
            b_shape: b.shape,
            b_narrow: b.narrow,
        };
        modules.insert(module, lora);
    }
    Ok(RawAdapter { path: path.to_path_buf(), modules })
}

/// The base model's class, as its config.json's `architectures` names it.
fn base_class(base: &ModelConfig) -> Option<&str> {
    base.json().get("architectures")?.as_array()?.first()?.as_str()
}

fn read_peft(dir: &Path, base: &ModelConfig) -> Result<RawAdapter, AdapterError> {
    let cfg_path = dir.join("adapter_config.json");
    let cfg = peft_config(&cfg_path, base_class(base))?;
    let file = dir.join("adapter_model.safetensors");
    if !file.exists() {
        let reason = if dir.join("adapter_model.bin").exists() {
            "adapter_model.bin (a pickle) is not read: save the adapter with safe_serialization"
        } else {
            "missing"
        };
        return Err(AdapterError::Io { path: file, error: std::io::Error::new(std::io::ErrorKind::NotFound, reason) });
    }
    let store = SafeTensors::open(&file)?;
    // Each tensor read (widened, its stored bytes kept) in parallel: a 1B model's adapter
    // is hundreds of tensors; the first bad one in name order is the one named.
    let read: Vec<Result<(String, bool, Half), AdapterError>> = store
        .names()
        .into_par_iter()
        .map(|name| {
            let bad = |reason: &str| tensor_err(&file, &name, reason);
            let inner = name
                .strip_prefix("base_model.model.")
                .ok_or_else(|| bad("not a LoRA tensor (expected base_model.model.<module>.lora_A/B.weight)"))?;
            let (module, is_a) = match (inner.strip_suffix(".lora_A.weight"), inner.strip_suffix(".lora_B.weight")) {
                (Some(m), _) => (m, true),
                (_, Some(m)) => (m, false),
                _ => return Err(bad(
                    "not a lora_A or lora_B weight (embedding adapters, DoRA magnitudes and saved modules are not run)",
                )),
            };
            // A nested checkpoint's text model is named as its text-only checkpoint.
            let module = match base.nested {
                Some(n) => match module.strip_prefix(n.weights) {
                    Some(rest) => format!("{}{rest}", n.text_weights),
                    None => module.to_string(),
                },
                None => module.to_string(),
            };
            let info = store.info(&name).ok_or_else(|| bad("vanished"))?;
            let values = store.f32(&name, &info.shape)?;
            let narrow = narrow(store.stored(&name, &info.shape)?);
            Ok((module, is_a, Half { name: name.clone(), shape: info.shape, values, narrow }))
        })
        .collect();
    let mut found = Found::new();
    for r in read {
        let (module, is_a, half) = r?;
        put(&mut found, module, is_a, half);
    }
    pair(&file, found, |m, _| cfg.alpha(m), cfg.rslora)
}

/// Whether a GGUF `general.architecture` names the base's family: its `tl_arch` or
/// `model_type` with `_` and `-` ignored (a GGUF name drops the underscore), or, for a
/// base read from a GGUF file, that file's own `general.architecture` (a converter may
/// write one family's files under another's name).
fn same_family(arch: &str, base: &ModelConfig) -> bool {
    let norm = |s: &str| s.chars().filter(|c| *c != '_' && *c != '-').collect::<String>().to_ascii_lowercase();
    let model_type = base.json().get("model_type").and_then(Value::as_str).unwrap_or_default();
    let a = norm(arch);
    if a == norm(&base.arch) || a == norm(model_type) {
        return true;
    }
    let file = base.gguf.as_deref().and_then(|p| Gguf::open(p).ok());
    file.is_some_and(|f| f.architecture().is_ok_and(|b| norm(b) == a))
}

fn read_gguf(path: &Path, base: &ModelConfig) -> Result<RawAdapter, AdapterError> {
    let mut file = Gguf::open(path)?;
    let meta = |k: &str, r: &str| config_err(path, k, r);
    match file.string("general.type")? {
        Some("adapter") => {}
        other => return Err(meta("general.type", &format!("{other:?}: not an adapter file (a model?)"))),
    }
    match file.string("adapter.type")? {
        Some("lora") => {}
        other => return Err(meta("adapter.type", &format!("{other:?}: only LoRA adapters are read"))),
    }
    if file.value("adapter.alora.invocation_tokens").is_some() {
        return Err(meta("adapter.alora.invocation_tokens", "activated LoRA (aLoRA) is not run"));
    }
    // llama.cpp: an alpha of 0 (or none) means a scale of 1, which alpha = r gives here.
    let alpha = file.float("adapter.lora.alpha")?.filter(|&a| a != 0.0);
    let arch = file.architecture()?.to_string();
    if !same_family(&arch, base) {
        let reason = format!("{arch:?}, but the model is {:?}", base.arch);
        return Err(meta("general.architecture", &reason));
    }
    let translation = (registry::gguf_arch(&arch).map_err(|e| meta("general.architecture", &e.to_string()))?.make)();
    // The converter writes no hyperparameters; the family's translation reads the head
    // counts (to undo its Q/K row permutation) as the base model's GGUF would give them.
    let json = base.json();
    let heads = json.get("num_attention_heads").and_then(Value::as_u64);
    let kv_heads = json.get("num_key_value_heads").and_then(Value::as_u64).or(heads);
    for (key, v) in [("head_count", heads), ("head_count_kv", kv_heads)] {
        if let Some(v) = v.and_then(|v| u32::try_from(v).ok()) {
            file.set_default(&format!("{arch}.attention.{key}"), GValue::U32(v));
        }
    }
    let mut stems: BTreeMap<String, [Option<String>; 2]> = BTreeMap::new();
    for name in file.names() {
        let (stem, half) = match (name.strip_suffix(".lora_a"), name.strip_suffix(".lora_b")) {
            (Some(s), _) => (s, 0),
            (_, Some(s)) => (s, 1),
            _ => {
                let reason = "not a .lora_a or .lora_b tensor (norms or embeddings in an adapter are not run)";
                return Err(tensor_err(path, &name, reason));
            }
        };
        stems.entry(stem.to_string()).or_default()[half] = Some(name.clone());
    }
    let mut map = Vec::new();
    let mut modules = Vec::new();
    for (stem, [a, b]) in stems {
        let has_a = a.is_some();
        let (Some(a), Some(b)) = (a, b) else {
            let (name, missing) =
                if has_a { (stem.clone() + ".lora_a", "lora_b") } else { (stem.clone() + ".lora_b", "lora_a") };
            return Err(tensor_err(path, &name, format!("its {missing} half is missing")));
        };
        // B's rows are the base weight's rows (permuted as the base's were, which the
        // family's translation undoes); A's rows are the rank, never permuted.
        let info = file.info(&b).ok_or_else(|| tensor_err(path, &b, "vanished"))?;
        let m = translation.tensor(&file, &stem, &info)?;
        let module = m.name.strip_suffix(".weight").unwrap_or(&m.name).to_string();
        for (name, rows, is_a) in [(a, None, true), (b, m.rows, false)] {
            let served = format!("{module}.{}", if is_a { "lora_a" } else { "lora_b" });
            modules.push((served.clone(), name.clone(), module.clone(), is_a));
            map.push((name, TensorMap { name: served, rows }));
        }
    }
    file.remap(map)?;
    // Each tensor read in parallel (as PEFT's); the first bad one in order is named.
    let read: Vec<Result<(String, bool, Half), AdapterError>> = modules
        .into_par_iter()
        .map(|(served, name, module, is_a)| {
            let info = file.info(&served).ok_or_else(|| tensor_err(path, &name, "vanished"))?;
            let values = file.f32(&served, &info.shape)?;
            let narrow = narrow(file.stored(&served, &info.shape)?);
            Ok((module, is_a, Half { name, shape: info.shape, values, narrow }))
        })
        .collect();
    let mut found = Found::new();
    for r in read {
        let (module, is_a, half) = r?;
        put(&mut found, module, is_a, half);
    }
    pair(path, found, |_, r| alpha.unwrap_or(r as f64), false)
}
