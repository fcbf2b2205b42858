//! What a MODEL argument may be: a path on disk, a catalog name, or a hub reference.
//!
//! - `hf:ORG/REPO` — a safetensors repository (the files a model directory needs), or a
//!   GGUF repository holding one GGUF file;
//! - `hf:ORG/REPO:Q4_K_M` — the GGUF file of that quantization in the repository;
//! - `hf:ORG/REPO/FILE` — one file (`FILE` may have folders);
//! - `@REV` after `REPO` picks a branch, tag or commit (default `main`). `hf.co/` works
//!   as well as `hf:`, as in Ollama.

use std::path::PathBuf;

use crate::catalog::{self, Entry};
use crate::error::HubError;

/// What a hub reference selects in its repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    /// The model directory's files, or the repository's only GGUF file.
    Repo,
    /// The GGUF file whose name carries this quantization (case-insensitive).
    Quant(String),
    /// This file.
    File(String),
}

/// A parsed `hf:` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HfRef {
    /// `ORG/REPO`.
    pub repo: String,
    /// Branch, tag or commit.
    pub revision: String,
    /// What to take.
    pub pick: Pick,
    /// The text as written (for messages).
    pub text: String,
}

/// A MODEL argument, resolved to what it names.
#[derive(Debug, Clone)]
pub enum ModelRef {
    /// A file or directory on disk.
    Path(PathBuf),
    /// A catalog model.
    Catalog(Entry),
    /// A hub reference.
    Hf(HfRef),
}

fn name_ok(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && s.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

/// Parse an `hf:` (or `hf.co/`) reference; `None` when the text is not one.
pub fn parse_hf(text: &str) -> Option<Result<HfRef, HubError>> {
    let rest = text.strip_prefix("hf:").or_else(|| text.strip_prefix("hf.co/"))?;
    let bad = |why: &str| HubError::BadReference { reference: text.to_string(), why: why.to_string() };
    Some((|| {
        let mut segs = rest.split('/');
        let org = segs.next().unwrap_or_default();
        let repo_seg = segs.next().ok_or_else(|| bad("no repository after the organisation"))?;
        let file: Vec<&str> = segs.collect();
        let (repo_seg, quant) = match repo_seg.split_once(':') {
            Some((r, q)) => (r, Some(q)),
            None => (repo_seg, None),
        };
        let (repo, revision) = match repo_seg.split_once('@') {
            Some((r, v)) => (r, v),
            None => (repo_seg, "main"),
        };
        if !name_ok(org) || !name_ok(repo) {
            return Err(bad("organisation and repository are letters, digits, '.', '_' or '-'"));
        }
        if !name_ok(revision) {
            return Err(bad("the revision after '@' is a branch, tag or commit name"));
        }
        let pick = match (quant, file.is_empty()) {
            (Some(_), false) => return Err(bad("give a :QUANT or a /FILE, not both")),
            (Some(q), true) if name_ok(q) => Pick::Quant(q.to_string()),
            (Some(_), true) => return Err(bad("the quantization after ':' is a name such as Q4_K_M")),
            (None, true) => Pick::Repo,
            (None, false) if file.iter().all(|s| name_ok(s)) => Pick::File(file.join("/")),
            (None, false) => return Err(bad("a file path's parts are letters, digits, '.', '_' or '-'")),
        };
        Ok(HfRef { repo: format!("{org}/{repo}"), revision: revision.to_string(), pick, text: text.to_string() })
    })())
}

/// What `text` names: an `hf:` reference, an existing path, or a catalog name (in that
/// order, so a file called like a catalog name in the working directory wins).
pub fn parse(text: &str) -> Result<ModelRef, HubError> {
    if let Some(r) = parse_hf(text) {
        return r.map(ModelRef::Hf);
    }
    let path = PathBuf::from(text);
    if path.exists() {
        return Ok(ModelRef::Path(path));
    }
    match catalog::find(text)? {
        Some(e) => Ok(ModelRef::Catalog(e)),
        None => Err(HubError::Unknown { reference: text.to_string() }),
    }
}
