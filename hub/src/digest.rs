//! Checking bytes: sha256 (what the hub's `X-Linked-Etag` carries for LFS files and what
//! the catalog pins) and git's blob sha1 (the `ETag` of a small file kept in git).

use std::fs::File;
use std::io::Read;
use std::path::Path;

use sha1::Sha1;
use sha2::{Digest, Sha256};

use crate::error::{io, HubError};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn feed(path: &Path, mut each: impl FnMut(&[u8])) -> Result<u64, HubError> {
    let mut f = File::open(path).map_err(io(path))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            return Ok(total);
        }
        total += n as u64;
        each(&buf[..n]);
    }
}

/// The file's sha256, lowercase hex.
pub fn sha256_file(path: &Path) -> Result<String, HubError> {
    let mut h = Sha256::new();
    feed(path, |b| h.update(b))?;
    Ok(hex(&h.finalize()))
}

/// Git's object id of the file as a blob: sha1 of `blob <len>\0` then the bytes.
pub fn git_sha1_file(path: &Path) -> Result<String, HubError> {
    let len = std::fs::metadata(path).map_err(io(path))?.len();
    let mut h = Sha1::new();
    h.update(format!("blob {len}\0").as_bytes());
    feed(path, |b| h.update(b))?;
    Ok(hex(&h.finalize()))
}

/// Check `path` against the hub's etag (64 hex digits: sha256; 40: git blob sha1); on a
/// mismatch, remove `remove` (the blob and its snapshot link) and name the file.
pub fn check_etag(path: &Path, etag: &str, file: &str, remove: &[&Path]) -> Result<(), HubError> {
    let etag = etag.trim_matches('"').to_ascii_lowercase();
    let (what, actual) = match etag.len() {
        64 => ("sha256", sha256_file(path)?),
        40 => ("git sha1", git_sha1_file(path)?),
        // An etag that is neither (a weak or CDN etag) says nothing about the bytes.
        _ => return Ok(()),
    };
    if actual == etag {
        return Ok(());
    }
    for p in remove {
        let _ = std::fs::remove_file(p);
    }
    Err(HubError::Digest { file: file.to_string(), what, actual, expected: etag })
}

/// Check size and sha256 against a pin; on a mismatch remove the file.
pub fn check_pin(path: &Path, name: &str, size: u64, sha256: &str) -> Result<(), HubError> {
    let got = std::fs::metadata(path).map_err(io(path))?.len();
    let fail = |what, actual: String, expected: String| {
        let _ = std::fs::remove_file(path);
        Err(HubError::Digest { file: name.to_string(), what, actual, expected })
    };
    if got != size {
        return fail("size", got.to_string(), size.to_string());
    }
    let actual = sha256_file(path)?;
    if actual != sha256 {
        return fail("sha256", actual, sha256.to_string());
    }
    Ok(())
}
