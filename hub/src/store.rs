//! What is on disk: `tl list` and `tl rm`.

use std::path::{Path, PathBuf};

use crate::catalog;
use crate::error::{io, HubError};
use crate::hf::snapshot_files;
use crate::reference::{self, ModelRef, Pick};
use crate::{pypi, HubConfig};

/// One model on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Local {
    /// The name to give `tl` (a catalog name or an `hf:` reference).
    pub name: String,
    /// Bytes on disk.
    pub bytes: u64,
    /// `GGUF` (with the quantization its name carries) or `safetensors`.
    pub format: String,
    /// Where it is.
    pub path: PathBuf,
}

fn size_of(p: &Path) -> u64 {
    // Follow links: snapshot files are links to blobs.
    match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => {
            std::fs::read_dir(p).map(|rd| rd.flatten().map(|e| size_of(&e.path())).sum()).unwrap_or(0)
        }
        Ok(m) => m.len(),
        Err(_) => 0,
    }
}

fn gguf_format(file: &str) -> String {
    let stem = file.rsplit('/').next().unwrap_or(file);
    let stem = stem.strip_suffix(".gguf").unwrap_or(stem);
    // The quantization is the last token that looks like one (Q4_K_M, IQ4_NL, F16, BF16...).
    let quant = stem.rsplit(['-', '.']).find(|t| {
        let u = t.to_ascii_uppercase();
        (u.starts_with('Q') || u.starts_with("IQ") || u == "F16" || u == "BF16" || u == "F32")
            && u.chars()
                .nth(1)
                .is_some_and(|c| c.is_ascii_digit() || c == '1' || u.starts_with("IQ") || u.starts_with("BF"))
    });
    match quant {
        Some(q) => format!("GGUF {}", q.to_ascii_uppercase()),
        None => "GGUF".into(),
    }
}

/// Every model on disk: catalog models in the tl cache, then each hub repository's
/// snapshot (its GGUF files one by one, or its safetensors directory).
pub fn list(cfg: &HubConfig) -> Result<Vec<Local>, HubError> {
    let mut out = Vec::new();
    for e in catalog::entries()? {
        if let Some(path) = pypi::local(cfg, &e) {
            let format = match &e.file {
                Some(f) => gguf_format(f),
                None => "safetensors".into(),
            };
            out.push(Local { name: e.name.clone(), bytes: size_of(&path), format, path });
        }
    }
    let Ok(rd) = std::fs::read_dir(&cfg.hub_cache) else { return Ok(out) };
    let mut repos: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
    repos.sort();
    for dir in repos {
        let Some(name) = dir.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_prefix("models--")) else {
            continue;
        };
        let repo = name.replacen("--", "/", 1);
        let Ok(main) = std::fs::read_to_string(dir.join("refs/main")) else { continue };
        let snap = dir.join("snapshots").join(main.trim());
        let files = snapshot_files(&snap);
        if files.iter().any(|f| f == "config.json") && files.iter().any(|f| f.ends_with(".safetensors")) {
            out.push(Local {
                name: format!("hf:{repo}"),
                bytes: size_of(&snap),
                format: "safetensors".into(),
                path: snap.clone(),
            });
        }
        for f in files.iter().filter(|f| f.to_ascii_lowercase().ends_with(".gguf")) {
            let path = snap.join(f);
            out.push(Local { name: format!("hf:{repo}/{f}"), bytes: size_of(&path), format: gguf_format(f), path });
        }
    }
    Ok(out)
}

/// Remove a pulled model: a catalog model's file or directory, a hub reference's file
/// (its snapshot link and blob) or, for `hf:ORG/REPO`, the whole cached repository.
/// Returns what was removed. A plain path is refused: `tl rm` removes only what it pulled.
pub fn remove(cfg: &HubConfig, text: &str) -> Result<Vec<PathBuf>, HubError> {
    let mut removed = Vec::new();
    match reference::parse(text)? {
        ModelRef::Path(p) => {
            return Err(HubError::Pick {
                reference: text.into(),
                why: format!("{} is a path, not a pulled model; remove it yourself", p.display()),
            })
        }
        ModelRef::Catalog(e) => {
            let p = cfg.tl_cache.join(e.local_name());
            let work = cfg.tl_cache.join(".pull").join(e.local_name());
            for p in [p, work] {
                if p.is_dir() {
                    std::fs::remove_dir_all(&p).map_err(io(&p))?;
                    removed.push(p);
                } else if p.exists() {
                    std::fs::remove_file(&p).map_err(io(&p))?;
                    removed.push(p);
                }
            }
        }
        ModelRef::Hf(r) => {
            let dir = cfg.hub_cache.join(format!("models--{}", r.repo.replace('/', "--")));
            if r.pick == Pick::Repo {
                if dir.is_dir() {
                    std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
                    removed.push(dir);
                }
            } else if let Some(link) = crate::hf::cached(cfg, &r)? {
                if let Ok(blob) = std::fs::canonicalize(&link) {
                    if blob != link {
                        std::fs::remove_file(&blob).map_err(io(&blob))?;
                        removed.push(blob);
                    }
                }
                std::fs::remove_file(&link).map_err(io(&link))?;
                removed.push(link);
            }
        }
    }
    if removed.is_empty() {
        return Err(HubError::Pick { reference: text.into(), why: "not on disk".into() });
    }
    Ok(removed)
}
