//! From a path to an understood model: which architecture it is, its config with the
//! typed part parsed once by that architecture, and its weights.
//!
//! This is the one place that joins the config, the registry, the architecture and the
//! weight formats, so none of those modules needs another (no module cycle in core).

use std::path::Path;

use serde_json::Value;

use crate::arch::Architecture;
use crate::config::{ConfigError, ModelConfig};
use crate::gguf::{config_error, gguf_source, Gguf, TensorMap};
use crate::gguf_arch::GgufArch;
use crate::registry;
use crate::weights::WeightStore;

/// The architecture a config.json names: `tl_arch`, else the architecture that
/// registered its Hugging Face `model_type`.
fn arch_name(json: &Value) -> Result<String, ConfigError> {
    match json.get("tl_arch") {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v) => Err(ConfigError::invalid("tl_arch", v, "expected a string")),
        None => match json.get("model_type").and_then(Value::as_str) {
            Some(t) => Ok(registry::model_type(t)?.arch.to_string()),
            None => Err(ConfigError::Missing { field: "tl_arch", hint: " (and no model_type)" }),
        },
    }
}

/// The registered architecture `config` names.
pub(crate) fn architecture(config: &ModelConfig) -> Result<Box<dyn Architecture>, ConfigError> {
    Ok((registry::architecture(&config.arch)?.make)())
}

/// Parse `json` (common fields, then the architecture's own, once) and return the
/// architecture object too, so the caller builds the model without making it again.
pub(crate) fn parse(json: Value, dir: Option<&Path>) -> Result<(ModelConfig, Box<dyn Architecture>), ConfigError> {
    if !json.is_object() {
        return Err(ConfigError::Json("expected a JSON object".into()));
    }
    let (json, nested) = crate::nested::flatten(json)?;
    let name = arch_name(&json)?;
    let arch = (registry::architecture(&name)?.make)();
    let mut cfg = ModelConfig::common(json, dir, name)?;
    cfg.nested = nested;
    let typed = arch.parse_config(&cfg)?;
    cfg.set_arch_config(typed);
    Ok((cfg, arch))
}

/// A GGUF file as its architecture reads it: the translation registered for its
/// `general.architecture` names every tensor and undoes any row layout, and turns the
/// metadata into a config.json (returned, not yet parsed). An architecture no linked
/// crate registered is an error listing the registered ones.
pub fn open_gguf(path: &Path) -> Result<(Gguf, Value), ConfigError> {
    let (store, translation) = gguf_weights(path)?;
    let json = translation.config_json(&store).map_err(|e| config_error(e, path))?;
    Ok((store, json))
}

/// A GGUF file's tensors as its architecture names them (no config: a directory with
/// its own config.json reads only the weights of its model.gguf).
pub(crate) fn gguf_weights(path: &Path) -> Result<(Gguf, Box<dyn GgufArch>), ConfigError> {
    let wrap = |e| config_error(e, path);
    let mut store = Gguf::open(path).map_err(wrap)?;
    let arch = store.architecture().map_err(wrap)?;
    let reg = registry::gguf_arch(arch).map_err(|e| wrap(store.meta_err("general.architecture", &e.to_string())))?;
    let translation = (reg.make)();
    let mut map = Vec::new();
    let mut stacked = Vec::new();
    for name in store.names() {
        let info = store.info(&name).ok_or_else(|| wrap(store.meta_err(&name, "tensor vanished")))?;
        match translation.stacked(&store, &name, &info).map_err(wrap)? {
            Some(slices) => stacked.push((name, slices)),
            None => map.push((name.clone(), translation.tensor(&store, &name, &info).map_err(wrap)?)),
        }
    }
    // A stacked tensor's slices are tensors of their own, already under their names.
    for (name, slices) in stacked {
        map.extend(slices.iter().map(|s| (s.clone(), TensorMap { name: s.clone(), rows: None })));
        store.split(&name, slices).map_err(wrap)?;
    }
    store.remap(map).map_err(wrap)?;
    Ok((store, translation))
}

/// The config of a GGUF file opened by [`open_gguf`]; its tokenizer is the file's.
pub(crate) fn gguf_config(store: &Gguf, json: Value) -> Result<(ModelConfig, Box<dyn Architecture>), ConfigError> {
    let path = store.path_buf();
    let (mut cfg, arch) = parse(json, None)?;
    cfg.dir = Some(path.parent().map(Path::to_path_buf).unwrap_or_default());
    cfg.gguf = Some(path);
    Ok((cfg, arch))
}

/// Read `<dir>/config.json`, or the metadata of a GGUF file `dir` names.
pub(crate) fn load_config(dir: &Path) -> Result<(ModelConfig, Box<dyn Architecture>), ConfigError> {
    if let Some(file) = gguf_source(dir) {
        let (store, json) = open_gguf(&file)?;
        return gguf_config(&store, json);
    }
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|error| ConfigError::Io { path, error })?;
    let json: Value = serde_json::from_str(&text).map_err(|e| ConfigError::Json(e.to_string()))?;
    parse(json, Some(dir))
}

impl ModelConfig {
    /// Parse config.json text (no directory: file checks are [`ModelConfig::load`]'s).
    pub fn from_json(text: &str) -> Result<ModelConfig, ConfigError> {
        let json: Value = serde_json::from_str(text).map_err(|e| ConfigError::Json(e.to_string()))?;
        Self::from_value(json, None)
    }

    /// Read `<dir>/config.json` and check the files the config requires. `dir` may also
    /// be a `.gguf` file, or a directory holding `model.gguf` and no config.json: the
    /// config then comes from the GGUF metadata.
    pub fn load(dir: &Path) -> Result<ModelConfig, ConfigError> {
        Ok(load_config(dir)?.0)
    }

    /// Parse a config already in JSON form (a GGUF's metadata translated, say): the
    /// common fields, then the named architecture's own fields, once.
    pub fn from_value(json: Value, dir: Option<&Path>) -> Result<ModelConfig, ConfigError> {
        Ok(parse(json, dir)?.0)
    }
}
