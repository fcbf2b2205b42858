//! Hub references, in huggingface_hub's cache layout (`models--ORG--REPO/{blobs, refs,
//! snapshots}`): [`cached`] answers from the cache alone (no request, so a model that
//! Python's huggingface_hub, llama.cpp or any other tool already downloaded is used as it
//! is); [`pull`] lists the repository, picks the files (reference.rs's rules) and
//! downloads each through hf-hub, then checks each blob against its etag.

use std::path::{Path, PathBuf};

use hf_hub::api::sync::{ApiBuilder, ApiError};
use hf_hub::{Cache, Repo, RepoType};

use crate::digest::check_etag;
use crate::error::{io, HubError};
use crate::reference::{HfRef, Pick};
use crate::HubConfig;

/// The files a model directory needs from a safetensors repository (besides its
/// `*.safetensors` weights): config, tokenizer, chat template, generation defaults and
/// sentence-transformers' pooling files.
const DIR_FILES: &[&str] = &[
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
    "model.safetensors.index.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
    "vocab.txt",
];

/// What a reference selects in a repository's file list.
#[derive(Debug, PartialEq, Eq)]
pub enum Selection {
    /// One file (its path in the repository).
    File(String),
    /// A model directory: these files.
    Dir(Vec<String>),
}

fn is_gguf(f: &str) -> bool {
    f.to_ascii_lowercase().ends_with(".gguf") && !f.to_ascii_lowercase().contains("mmproj")
}

/// Whether the file name carries `quant` as a whole token (`-Q4_K_M.gguf`, `.q4_k_m-`).
fn has_quant(file: &str, quant: &str) -> bool {
    let name = file.rsplit('/').next().unwrap_or(file).to_ascii_lowercase();
    let stem = name.strip_suffix(".gguf").unwrap_or(&name);
    let q = quant.to_ascii_lowercase();
    stem.match_indices(&q).any(|(i, _)| {
        let before = stem[..i].chars().next_back();
        let after = stem[i + q.len()..].chars().next();
        before.is_none_or(|c| "-._".contains(c)) && after.is_none_or(|c| "-._".contains(c))
    })
}

/// Apply the reference's pick to a repository's file list.
pub fn select(r: &HfRef, files: &[String]) -> Result<Selection, HubError> {
    let pick_err = |why: String| HubError::Pick { reference: r.text.clone(), why };
    let ggufs: Vec<&String> = files.iter().filter(|f| is_gguf(f)).collect();
    let list = |v: &[&String]| v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
    match &r.pick {
        Pick::File(f) if files.contains(f) => Ok(Selection::File(f.clone())),
        Pick::File(f) => Err(pick_err(format!("no file {f} in {} at {}", r.repo, r.revision))),
        Pick::Quant(q) => {
            let hits: Vec<&String> = ggufs.iter().copied().filter(|f| has_quant(f, q)).collect();
            match hits.as_slice() {
                [one] => Ok(Selection::File((*one).clone())),
                [] if ggufs.is_empty() => Err(pick_err("the repository holds no GGUF file".into())),
                [] => Err(pick_err(format!("no GGUF file is {q}; the repository holds {}", list(&ggufs)))),
                many if many.iter().any(|f| f.contains("-of-")) => Err(pick_err(format!(
                    "{q} is split into several files ({}); tl reads single-file GGUF",
                    list(many)
                ))),
                many => Err(pick_err(format!("several GGUF files are {q}: {}; name one with /FILE", list(many)))),
            }
        }
        Pick::Repo => {
            let weights: Vec<&String> =
                files.iter().filter(|f| !f.contains('/') && f.ends_with(".safetensors")).collect();
            if files.iter().any(|f| f == "config.json") && !weights.is_empty() {
                let mut want: Vec<String> = files.iter().filter(|f| DIR_FILES.contains(&f.as_str())).cloned().collect();
                want.extend(weights.into_iter().cloned());
                return Ok(Selection::Dir(want));
            }
            match ggufs.as_slice() {
                [one] => Ok(Selection::File((*one).clone())),
                [] => Err(pick_err("neither config.json with safetensors weights nor a GGUF file".into())),
                many => Err(pick_err(format!("several GGUF files ({}): pick one with :QUANT", list(many)))),
            }
        }
    }
}

fn repo_dir(cfg: &HubConfig, r: &HfRef) -> PathBuf {
    cfg.hub_cache.join(format!("models--{}", r.repo.replace('/', "--")))
}

/// The snapshot the revision points at in the cache, if any.
fn snapshot(cfg: &HubConfig, r: &HfRef) -> Option<PathBuf> {
    let dir = repo_dir(cfg, r);
    let commit = if r.revision.len() == 40 && r.revision.chars().all(|c| c.is_ascii_hexdigit()) {
        r.revision.clone()
    } else {
        std::fs::read_to_string(dir.join("refs").join(&r.revision)).ok()?.trim().to_string()
    };
    let snap = dir.join("snapshots").join(commit);
    snap.is_dir().then_some(snap)
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for ent in rd.flatten() {
        let p = ent.path();
        // `exists` follows the link: a dangling one (its blob removed) is not a file.
        if p.is_dir() {
            walk(root, &p, out);
        } else if p.exists() {
            if let Ok(rel) = p.strip_prefix(root) {
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
}

/// The files of a cached snapshot, relative to it.
pub fn snapshot_files(snap: &Path) -> Vec<String> {
    let mut out = Vec::new();
    walk(snap, snap, &mut out);
    out.sort();
    out
}

/// The reference's path from the cache alone, or `None` when the cache lacks it. A
/// directory counts when every shard its weight index names is there.
pub fn cached(cfg: &HubConfig, r: &HfRef) -> Result<Option<PathBuf>, HubError> {
    let Some(snap) = snapshot(cfg, r) else { return Ok(None) };
    let files = snapshot_files(&snap);
    Ok(match select(r, &files) {
        Ok(Selection::File(f)) => Some(snap.join(f)),
        Ok(Selection::Dir(_)) if shards_complete(&snap, &files) => Some(snap),
        // What the cache holds may be a partial download: ask the hub.
        _ => None,
    })
}

fn shards_complete(snap: &Path, files: &[String]) -> bool {
    let Ok(text) = std::fs::read_to_string(snap.join("model.safetensors.index.json")) else {
        return true;
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else { return false };
    v["weight_map"]
        .as_object()
        .is_some_and(|m| m.values().all(|s| s.as_str().is_some_and(|s| files.iter().any(|f| f == s))))
}

fn api_err(url: String, e: ApiError) -> HubError {
    match e {
        ApiError::RequestError(e) => match *e {
            ureq::Error::Status(status, _) => HubError::Status { url, status },
            ureq::Error::Transport(t) => HubError::Transport { url, why: t.to_string() },
        },
        ApiError::TooManyRetries(inner) => api_err(url, *inner),
        e => HubError::Transport { url, why: e.to_string() },
    }
}

/// Download what the reference selects into the cache (files already there are not
/// fetched again) and give its path.
pub fn pull(cfg: &HubConfig, r: &HfRef) -> Result<PathBuf, HubError> {
    std::fs::create_dir_all(&cfg.hub_cache).map_err(io(&cfg.hub_cache))?;
    let api = ApiBuilder::from_cache(Cache::new(cfg.hub_cache.clone()))
        .with_endpoint(cfg.endpoint.clone())
        .with_token(cfg.token.clone())
        .with_progress(cfg.progress)
        // A cut transfer resumes from its `.part` blob with a Range request.
        .with_retries(3)
        .build()
        .map_err(|e| api_err(cfg.endpoint.clone(), e))?;
    let repo = api.repo(Repo::with_revision(r.repo.clone(), RepoType::Model, r.revision.clone()));
    let info_url = format!("{}/api/models/{}/revision/{}", cfg.endpoint, r.repo, r.revision);
    let info = repo.info().map_err(|e| api_err(info_url, e))?;
    let files: Vec<String> = info.siblings.into_iter().map(|s| s.rfilename).collect();
    let (want, dir) = match select(r, &files)? {
        Selection::File(f) => (vec![f], false),
        Selection::Dir(fs) => (fs, true),
    };
    let mut last = None;
    for f in &want {
        let link = repo.download(f).map_err(|e| api_err(repo.url(f), e))?;
        let blob = std::fs::canonicalize(&link).map_err(io(&link))?;
        // hf-hub names a blob by the etag it was promised: check the bytes against it.
        let etag = blob.file_name().unwrap_or_default().to_string_lossy().into_owned();
        check_etag(&blob, &etag, &format!("{}/{f}", r.repo), &[&blob, &link])?;
        last = Some(link);
    }
    let link = last.ok_or_else(|| HubError::Pick { reference: r.text.clone(), why: "nothing to download".into() })?;
    if dir {
        let snap = link.ancestors().nth(want[want.len() - 1].split('/').count()).unwrap_or(&link).to_path_buf();
        Ok(snap)
    } else {
        Ok(link)
    }
}
