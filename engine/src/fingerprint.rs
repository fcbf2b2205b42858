//! `system_fingerprint`: one digest of everything that decides an answer besides the
//! request: the weights, the config, the tokenizer and chat template, the weight mode
//! and this engine's version. Two responses with the same fingerprint and seed are equal.

use std::fs::File;
use std::path::{Path, PathBuf};

use tl_core::EngineConfig;

use crate::request::EngineError;

/// The files of a model that can change an answer: a `.gguf` file holds them all; a
/// directory has config.json, the weights and the tokenizer and template files.
fn model_files(model: &Path) -> Vec<PathBuf> {
    if model.is_file() {
        return vec![model.to_path_buf()];
    }
    ["config.json", "model.safetensors", "model.gguf", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]
        .iter()
        .map(|f| model.join(f))
        .filter(|p| p.is_file())
        .collect()
}

/// `fp_` and 16 hex digits: FNV-1a 64 over each model file's name and bytes, the weight
/// mode and the engine version.
pub fn fingerprint(model: &Path, engine: &EngineConfig) -> Result<String, EngineError> {
    let mut digest: Vec<u8> = Vec::new();
    for path in model_files(model) {
        let io = |e: std::io::Error| EngineError::Internal(format!("{}: {e}", path.display()));
        let file = File::open(&path).map_err(io)?;
        // SAFETY: the model files are read-only inputs for the life of the server; a file
        // changed underneath would change the fingerprint, which is the point.
        let bytes = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        digest.extend_from_slice(name.as_bytes());
        digest.extend_from_slice(&tl_kv::fnv1a64(&bytes).to_le_bytes());
    }
    digest.extend_from_slice(format!("weights={};tl-engine={}", engine.weights, env!("CARGO_PKG_VERSION")).as_bytes());
    Ok(format!("fp_{:016x}", tl_kv::fnv1a64(&digest)))
}
