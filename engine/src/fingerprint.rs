//! `system_fingerprint`: one digest of everything that decides an answer besides the
//! request: the weights, the config, the tokenizer and chat template, the weight mode
//! and this engine's version. Two responses with the same fingerprint and seed are equal.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use tl_core::EngineConfig;
use xxhash_rust::xxh3::Xxh3;

use crate::error::EngineError;

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

/// `fp_` and 16 hex digits: XXH3-64 over each model file's name and bytes, the weight
/// mode and the engine version. The files are read once, sequentially (a few GB/s; the
/// weights' pages are the ones loading reads next anyway).
pub fn fingerprint(model: &Path, engine: &EngineConfig) -> Result<String, EngineError> {
    let mut digest = Xxh3::new();
    let mut buf = vec![0u8; 1 << 20];
    for path in model_files(model) {
        let io = |e: std::io::Error| EngineError::Internal(format!("{}: {e}", path.display()));
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut file = File::open(&path).map_err(io)?;
        let mut h = Xxh3::new();
        loop {
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => h.update(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(e)),
            }
        }
        digest.update(name.as_bytes());
        digest.update(&h.digest().to_le_bytes());
    }
    digest.update(format!("weights={};tl-engine={}", engine.weights, env!("CARGO_PKG_VERSION")).as_bytes());
    // Only the q8 mode adds to the digest, and only where it changes a number (a tensor
    // in a format with an integer kernel): exact runs keep the fingerprints they had, and
    // an f32/f16/bf16 model answers the same bits, under the same fingerprint, in both.
    // Weights that cannot be opened count as changed (the safe side: an unequal fingerprint
    // never promises an equal answer).
    let matters = || tl_core::activations_matter(model, &engine.weights).unwrap_or(true);
    if engine.activations != tl_core::Activations::Exact && matters() {
        digest.update(format!(";activations={}", engine.activations).as_bytes());
    }
    Ok(format!("fp_{:016x}", digest.digest()))
}

/// The fingerprint of answers given under `adapter`: the base's (`base`, from
/// [`fingerprint`]) for `None`, else `fp_` and the XXH3-64 of the base's and the adapter's
/// key (its numbers' digest and the request's scale): an answer under an adapter is
/// reproduced only by the same model, build, adapter bits and scale.
pub fn adapted(base: &str, adapter: Option<&crate::AdapterChoice>) -> String {
    match adapter {
        None => base.to_string(),
        Some(a) => {
            let mut digest = Xxh3::new();
            digest.update(base.as_bytes());
            digest.update(b";lora=");
            digest.update(&a.key().to_le_bytes());
            format!("fp_{:016x}", digest.digest())
        }
    }
}
