//! What can go wrong finding or fetching a model; every variant names the reference, file
//! or URL at fault so a binary prints it as its one line.

use std::path::PathBuf;

/// A failed resolve, pull, list or remove.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The text is neither a path on disk, a catalog name nor an `hf:` reference.
    #[error("{reference}: no such file, catalog name or hf: reference (`tl list --catalog` shows the names)")]
    Unknown {
        /// What the user wrote.
        reference: String,
    },
    /// An `hf:` reference that does not parse.
    #[error("{reference}: {why} (write hf:ORG/REPO, hf:ORG/REPO:QUANT or hf:ORG/REPO/FILE)")]
    BadReference {
        /// What the user wrote.
        reference: String,
        /// What is wrong with it.
        why: String,
    },
    /// The model is not on disk and the user did not agree to download it.
    #[error("{reference} is not on disk; run `tl pull {reference}` or pass --yes")]
    NotPulled {
        /// What the user wrote.
        reference: String,
    },
    /// The server answered with an error status.
    #[error("{url}: {status} {}", status_hint(*status))]
    Status {
        /// The request.
        url: String,
        /// Its HTTP status.
        status: u16,
    },
    /// The connection failed (DNS, TLS, a cut transfer after the retries).
    #[error("{url}: {why}")]
    Transport {
        /// The request.
        url: String,
        /// The client's words.
        why: String,
    },
    /// A downloaded file's bytes are not the ones the hub or the catalog pins; it was removed.
    #[error("{file}: {what} {actual}, expected {expected}; the download was removed")]
    Digest {
        /// The file (its name in the repository or the catalog).
        file: String,
        /// sha256, sha1 (git blob) or size.
        what: &'static str,
        /// What the bytes give.
        actual: String,
        /// What was promised.
        expected: String,
    },
    /// The repository has no file the reference selects, or several.
    #[error("{reference}: {why}")]
    Pick {
        /// What the user wrote.
        reference: String,
        /// What the repository holds instead.
        why: String,
    },
    /// A wheel lacks the member the catalog names, or is not a zip file.
    #[error("{wheel}: {why}")]
    Wheel {
        /// The wheel's file name.
        wheel: String,
        /// What is wrong.
        why: String,
    },
    /// A local file operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The catalog file in the repository does not parse (a defect of the build).
    #[error("hub/catalog.json: {0}")]
    Catalog(String),
}

fn status_hint(status: u16) -> &'static str {
    match status {
        401 => "Unauthorized: the repository is gated or private; set HF_TOKEN (or log in with huggingface-cli)",
        403 => "Forbidden: accept the model's license on its hub page with the account of HF_TOKEN",
        404 => "Not Found: no such repository, revision or file",
        _ => "",
    }
}

/// `Io` for `path`.
pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> HubError {
    let path = path.into();
    move |source| HubError::Io { path, source }
}
