//! config.json: the fields every architecture shares (docs/spec/model-dir.md).
//!
//! Core reads `tl_tokenizer`, the vocabulary and the special ids and keeps the whole JSON.
//! Which architecture the config names (`tl_arch`, or an HF `model_type` an architecture
//! registered) and its typed config are resolved by [`crate::load`], which asks the
//! architecture to parse its own fields once; the result is kept here. This module
//! depends on no other part of core but the error type, so the architecture interface can
//! take a `ModelConfig` without a module cycle.

use std::any::Any;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use thiserror::Error;

use crate::error::RegistryError;

/// Vocabulary sizes above this are refused as absurd (no real model comes close).
pub const MAX_VOCAB: usize = 1 << 24;

/// A config the engine refuses. Messages name the file or the field and the value.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// config.json (or another file of the directory) could not be read.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// The text is not JSON, or not a JSON object.
    #[error("config.json: bad JSON: {0}")]
    Json(String),
    /// A required field is absent.
    #[error("config.json: missing field {field:?}{hint}")]
    Missing {
        /// The field.
        field: &'static str,
        /// Extra words (how to fix it), may be empty.
        hint: &'static str,
    },
    /// A field holds a value the engine cannot run (or not of the right type).
    #[error("config.json: {field} = {value}: {reason}")]
    Invalid {
        /// The field (dotted for nested ones).
        field: String,
        /// The offending value, as JSON.
        value: String,
        /// Why it is refused.
        reason: String,
    },
    /// `tl_arch` (or `model_type`) names no linked architecture.
    #[error("config.json: tl_arch: {0}")]
    UnknownArch(#[from] RegistryError),
    /// A file the config requires is missing from the directory.
    #[error("{}: {reason}", path.display())]
    MissingFile {
        /// The file expected.
        path: PathBuf,
        /// Why it is needed.
        reason: String,
    },
}

impl ConfigError {
    /// An `Invalid` error for `field` holding `value`.
    pub fn invalid(field: impl Into<String>, value: &Value, reason: impl Into<String>) -> Self {
        ConfigError::Invalid { field: field.into(), value: value.to_string(), reason: reason.into() }
    }
}

/// How text becomes token ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerKind {
    /// Ids 0..255 are the bytes.
    Byte,
    /// tokenizer.json, read by the `tokenizers` crate.
    Hf,
}

/// A parsed config.json.
#[derive(Clone)]
pub struct ModelConfig {
    /// The registered architecture to build (`tl_arch`).
    pub arch: String,
    /// The tokenizer (`tl_tokenizer`).
    pub tokenizer: TokenizerKind,
    /// Vocabulary size (logits row length).
    pub vocab_size: usize,
    /// Beginning-of-sequence id, when the config names one.
    pub bos_token_id: Option<u32>,
    /// End-of-sequence ids (`eos_token_id`, a number or a list).
    pub eos_token_ids: Vec<u32>,
    /// Longest context, when the config gives one.
    pub max_position_embeddings: Option<usize>,
    /// The model directory, when loaded from one.
    pub dir: Option<PathBuf>,
    /// The GGUF file the config was translated from (its tokenizer is the model's).
    pub gguf: Option<PathBuf>,
    /// Where the text model's weights are when the checkpoint nests it (a multimodal
    /// checkpoint; the nested module): `json` is then its text config.
    pub nested: Option<Nesting>,
    json: Value,
    arch_config: Option<Arc<dyn Any + Send + Sync>>,
}

/// Where a nested checkpoint keeps its text model's weights (an architecture's
/// `NestedRegistration` says, for its outer `model_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nesting {
    /// The outer config's `model_type` (for messages).
    pub model_type: &'static str,
    /// The stored weights' prefix of the text model (`"model.language_model."`).
    pub weights: &'static str,
    /// The same tensors' prefix in a text-only checkpoint (`"model."`).
    pub text_weights: &'static str,
}

impl fmt::Debug for ModelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelConfig")
            .field("arch", &self.arch)
            .field("tokenizer", &self.tokenizer)
            .field("vocab_size", &self.vocab_size)
            .field("bos_token_id", &self.bos_token_id)
            .field("eos_token_ids", &self.eos_token_ids)
            .field("max_position_embeddings", &self.max_position_embeddings)
            .finish_non_exhaustive()
    }
}

fn id_field(json: &Value, field: &'static str) -> Result<Option<u32>, ConfigError> {
    match json.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n <= u32::MAX as u64 => Ok(Some(n as u32)),
            _ => Err(ConfigError::invalid(field, v, "expected a token id")),
        },
    }
}

impl ModelConfig {
    /// The fields every architecture shares, for the architecture named `arch` (already
    /// resolved from `tl_arch` or `model_type` by [`crate::load`]); the typed config is
    /// not parsed yet.
    pub(crate) fn common(json: Value, dir: Option<&Path>, arch: String) -> Result<ModelConfig, ConfigError> {
        let tokenizer = match json.get("tl_tokenizer") {
            Some(Value::String(s)) if s == "byte" => TokenizerKind::Byte,
            Some(Value::String(s)) if s == "hf" => TokenizerKind::Hf,
            Some(v) => return Err(ConfigError::invalid("tl_tokenizer", v, "expected \"byte\" or \"hf\"")),
            // A Hugging Face directory as the hub serves it names no tokenizer field of ours;
            // its tokenizer.json is the one meant.
            None if dir.is_some_and(|d| d.join("tokenizer.json").is_file()) => TokenizerKind::Hf,
            None => return Err(ConfigError::Missing { field: "tl_tokenizer", hint: " (\"byte\" or \"hf\")" }),
        };
        let vocab_size = match json.get("vocab_size") {
            None => return Err(ConfigError::Missing { field: "vocab_size", hint: "" }),
            Some(v) => match v.as_u64() {
                Some(n) if n > 0 && n as usize <= MAX_VOCAB => n as usize,
                _ => return Err(ConfigError::invalid("vocab_size", v, format!("expected 1..={MAX_VOCAB}"))),
            },
        };
        if tokenizer == TokenizerKind::Byte && vocab_size < 256 {
            return Err(ConfigError::invalid(
                "vocab_size",
                &json["vocab_size"],
                "a \"byte\" tokenizer needs at least 256 ids",
            ));
        }
        let bos_token_id = id_field(&json, "bos_token_id")?;
        let eos_token_ids = match json.get("eos_token_id") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                let mut ids = Vec::with_capacity(items.len());
                for v in items {
                    match v.as_u64() {
                        Some(n) if n <= u32::MAX as u64 => ids.push(n as u32),
                        _ => return Err(ConfigError::invalid("eos_token_id", v, "expected token ids")),
                    }
                }
                ids
            }
            Some(_) => id_field(&json, "eos_token_id")?.into_iter().collect(),
        };
        for &id in bos_token_id.iter().chain(&eos_token_ids) {
            if id as usize >= vocab_size {
                return Err(ConfigError::Invalid {
                    field: "bos_token_id/eos_token_id".into(),
                    value: id.to_string(),
                    reason: format!("not below vocab_size {vocab_size}"),
                });
            }
        }
        // GPT-2-style configs spell it `n_positions`, which transformers maps to
        // `max_position_embeddings`.
        let (key, pos) = match json.get("max_position_embeddings").filter(|v| !v.is_null()) {
            Some(v) => ("max_position_embeddings", Some(v)),
            None => ("n_positions", json.get("n_positions").filter(|v| !v.is_null())),
        };
        let max_position_embeddings = match pos {
            None => None,
            Some(v) => match v.as_u64() {
                Some(n) if n > 0 && n <= (1 << 26) => Some(n as usize),
                _ => return Err(ConfigError::invalid(key, v, "expected 1..=2^26")),
            },
        };
        if let (Some(dir), TokenizerKind::Hf) = (dir, tokenizer) {
            let path = dir.join("tokenizer.json");
            if !path.is_file() {
                return Err(ConfigError::MissingFile {
                    path,
                    reason: "tl_tokenizer is \"hf\" but tokenizer.json is missing".into(),
                });
            }
        }
        Ok(ModelConfig {
            arch,
            tokenizer,
            vocab_size,
            bos_token_id,
            eos_token_ids,
            max_position_embeddings,
            dir: dir.map(Path::to_path_buf),
            gguf: None,
            nested: None,
            json,
            arch_config: None,
        })
    }

    /// Keep the architecture's typed config (what its `parse_config` returned).
    pub(crate) fn set_arch_config(&mut self, typed: Arc<dyn Any + Send + Sync>) {
        self.arch_config = Some(typed);
    }

    /// The whole config.json.
    pub fn json(&self) -> &Value {
        &self.json
    }

    /// The architecture's typed config, as its `parse_config` produced it.
    pub fn arch_config<T: Any + Send + Sync>(&self) -> Result<&T, ConfigError> {
        self.arch_config.as_ref().and_then(|c| c.downcast_ref::<T>()).ok_or_else(|| ConfigError::Invalid {
            field: "tl_arch".into(),
            value: format!("{:?}", self.arch),
            reason: "the typed config is not this architecture's".into(),
        })
    }
}
