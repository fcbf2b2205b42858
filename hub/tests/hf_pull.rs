//! `hf:` references against a local server in the hub's layout (tests/common): picking by
//! quantization, a model directory, resume after a cut connection, a wrong sha256, 404,
//! 401 and HF_TOKEN, and a file already in huggingface_hub's cache (no request made).

mod common;

use common::{git_sha1, sha256, HubFile, HubRepo, Server, State};
use tl_hub::{Consent, HubConfig, HubError};

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

fn lfs(n: usize, seed: u8) -> HubFile {
    HubFile { bytes: (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect(), lfs: true, lie: None }
}

fn git(text: &str) -> HubFile {
    HubFile { bytes: text.as_bytes().to_vec(), lfs: false, lie: None }
}

fn repo(files: Vec<(&str, HubFile)>) -> HubRepo {
    HubRepo { commit: COMMIT.into(), files: files.into_iter().map(|(n, f)| (n.to_string(), f)).collect(), token: None }
}

fn config(server: &Server, dir: &tempfile::TempDir) -> HubConfig {
    HubConfig {
        tl_cache: dir.path().join("tl"),
        hub_cache: dir.path().join("hf/hub"),
        endpoint: server.url.clone(),
        token: None,
        pypi_index: format!("{}/simple", server.url),
        progress: false,
    }
}

fn gguf_repo() -> HubRepo {
    repo(vec![
        ("README.md", git("# a model\n")),
        ("model-Q4_K_M.gguf", lfs(5000, 1)),
        ("model-Q8_0.gguf", lfs(7000, 2)),
        ("mmproj-model-f16.gguf", lfs(100, 3)),
    ])
}

#[test]
fn a_gguf_file_is_picked_by_its_quantization_and_lands_in_the_huggingface_cache_layout() {
    let mut st = State::default();
    st.repos.insert("org/gguf".into(), gguf_repo());
    let server = Server::start(st);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&server, &dir);
    let path = tl_hub::pull(&cfg, "hf:org/gguf:q4_k_m").unwrap();
    let want = lfs(5000, 1).bytes;
    assert_eq!(std::fs::read(&path).unwrap(), want);
    let repo_dir = cfg.hub_cache.join("models--org--gguf");
    assert_eq!(path, repo_dir.join("snapshots").join(COMMIT).join("model-Q4_K_M.gguf"));
    assert_eq!(std::fs::read_to_string(repo_dir.join("refs/main")).unwrap().trim(), COMMIT);
    // The snapshot entry is a link to the blob named by its sha256, as huggingface_hub keeps it.
    assert_eq!(
        std::fs::canonicalize(&path).unwrap(),
        std::fs::canonicalize(repo_dir.join("blobs").join(sha256(&want))).unwrap()
    );
    // Only the picked file was downloaded.
    assert!(!server.log().iter().any(|l| l.contains("Q8_0")), "{:?}", server.log());
    // Asked again, it is answered from the cache without a request.
    let before = server.log().len();
    assert_eq!(tl_hub::resolve(&cfg, "hf:org/gguf:Q4_K_M", &Consent::No).unwrap(), path);
    assert_eq!(server.log().len(), before);
}

#[test]
fn a_safetensors_repository_gives_a_model_directory_with_only_the_files_a_model_needs() {
    let mut st = State::default();
    st.repos.insert(
        "org/st".into(),
        repo(vec![
            ("README.md", git("readme")),
            ("config.json", git("{\"model_type\": \"llama\"}")),
            ("tokenizer.json", git("{}")),
            ("model.safetensors", lfs(3000, 9)),
            ("onnx/model.onnx", lfs(50, 4)),
            ("1_Pooling/config.json", git("{\"pooling_mode_mean_tokens\": true}")),
        ]),
    );
    let server = Server::start(st);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&server, &dir);
    let snap = tl_hub::pull(&cfg, "hf:org/st").unwrap();
    assert_eq!(snap, cfg.hub_cache.join("models--org--st/snapshots").join(COMMIT));
    let files = tl_hub::hf::snapshot_files(&snap);
    assert_eq!(files, ["1_Pooling/config.json", "config.json", "model.safetensors", "tokenizer.json"]);
    assert_eq!(std::fs::read(snap.join("model.safetensors")).unwrap(), lfs(3000, 9).bytes);
    // git files are checked against their blob sha1: the blob is named by it.
    let cfg_blob = std::fs::canonicalize(snap.join("config.json")).unwrap();
    assert_eq!(cfg_blob.file_name().unwrap().to_str().unwrap(), git_sha1(b"{\"model_type\": \"llama\"}"));
}

#[test]
fn a_cut_connection_resumes_from_where_it_stopped() {
    let mut st = State::default();
    st.repos.insert("org/gguf".into(), gguf_repo());
    st.cut.insert("/org/gguf/resolve/main/model-Q8_0.gguf".into(), 2500);
    let server = Server::start(st);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&server, &dir);
    let path = tl_hub::pull(&cfg, "hf:org/gguf/model-Q8_0.gguf").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), lfs(7000, 2).bytes);
    let log = server.log();
    assert!(log.iter().any(|l| l.ends_with("model-Q8_0.gguf bytes=2500-")), "no resumed range request: {log:?}");
}

#[test]
fn bytes_that_are_not_the_announced_sha256_are_refused_and_removed() {
    let mut st = State::default();
    let mut r = gguf_repo();
    r.files[1].1.lie = Some("ab".repeat(32));
    st.repos.insert("org/gguf".into(), r);
    let server = Server::start(st);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&server, &dir);
    let err = tl_hub::pull(&cfg, "hf:org/gguf:Q4_K_M").unwrap_err();
    let HubError::Digest { file, what, expected, .. } = &err else { panic!("{err}") };
    assert_eq!(
        (file.as_str(), *what, expected.as_str()),
        ("org/gguf/model-Q4_K_M.gguf", "sha256", "ab".repeat(32).as_str())
    );
    let snap = cfg.hub_cache.join("models--org--gguf/snapshots").join(COMMIT);
    assert!(!snap.join("model-Q4_K_M.gguf").exists());
    assert!(!cfg.hub_cache.join("models--org--gguf/blobs").join("ab".repeat(32)).exists());
    assert!(tl_hub::hf::cached(&cfg, &tl_hub::reference::parse_hf("hf:org/gguf:Q4_K_M").unwrap().unwrap())
        .unwrap()
        .is_none());
}

#[test]
fn a_missing_repository_is_a_404_and_a_gated_one_a_401_until_hf_token_is_given() {
    let mut st = State::default();
    let mut gated = gguf_repo();
    gated.token = Some("hf_secret".into());
    st.repos.insert("org/gated".into(), gated);
    st.repos.insert("org/gguf".into(), gguf_repo());
    let server = Server::start(st);
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&server, &dir);
    let err = tl_hub::pull(&cfg, "hf:org/nothere:Q4_K_M").unwrap_err();
    assert!(matches!(err, HubError::Status { status: 404, .. }), "{err}");
    assert!(err.to_string().contains("/api/models/org/nothere/revision/main"), "{err}");
    let err = tl_hub::pull(&cfg, "hf:org/gguf/nothere.gguf").unwrap_err();
    assert!(err.to_string().contains("no file nothere.gguf in org/gguf"), "{err}");
    let err = tl_hub::pull(&cfg, "hf:org/gated:Q4_K_M").unwrap_err();
    assert!(matches!(err, HubError::Status { status: 401, .. }), "{err}");
    assert!(err.to_string().contains("HF_TOKEN"), "{err}");
    cfg.token = Some("hf_secret".into());
    let path = tl_hub::pull(&cfg, "hf:org/gated:Q4_K_M").unwrap();
    assert_eq!(std::fs::read(path).unwrap(), lfs(5000, 1).bytes);
}

#[test]
fn a_file_already_in_the_huggingface_cache_is_used_without_a_request() {
    let server = Server::start(State::default());
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&server, &dir);
    // The layout Python's huggingface_hub writes: blobs by sha256, snapshot links, refs.
    let bytes = lfs(4096, 7).bytes;
    let repo_dir = cfg.hub_cache.join("models--bartowski--Some-Model-GGUF");
    std::fs::create_dir_all(repo_dir.join("blobs")).unwrap();
    std::fs::create_dir_all(repo_dir.join("refs")).unwrap();
    let snap = repo_dir.join("snapshots").join(COMMIT);
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::write(repo_dir.join("blobs").join(sha256(&bytes)), &bytes).unwrap();
    std::os::unix::fs::symlink(format!("../../blobs/{}", sha256(&bytes)), snap.join("Some-Model-Q4_K_M.gguf")).unwrap();
    std::fs::write(repo_dir.join("refs/main"), COMMIT).unwrap();
    for reference in [
        "hf:bartowski/Some-Model-GGUF:Q4_K_M",
        "hf:bartowski/Some-Model-GGUF",
        "hf:bartowski/Some-Model-GGUF/Some-Model-Q4_K_M.gguf",
    ] {
        let path = tl_hub::resolve(&cfg, reference, &Consent::No).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{reference}");
    }
    assert!(server.log().is_empty(), "{:?}", server.log());
    // What the cache lacks is not downloaded without consent, and the message says how.
    let err = tl_hub::resolve(&cfg, "hf:bartowski/Some-Model-GGUF:Q8_0", &Consent::No).unwrap_err();
    assert_eq!(err.to_string(), "hf:bartowski/Some-Model-GGUF:Q8_0 is not on disk; run `tl pull hf:bartowski/Some-Model-GGUF:Q8_0` or pass --yes");
    assert!(server.log().is_empty());
    let listed = tl_hub::store::list(&cfg).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "hf:bartowski/Some-Model-GGUF/Some-Model-Q4_K_M.gguf");
    assert_eq!((listed[0].bytes, listed[0].format.as_str()), (4096, "GGUF Q4_K_M"));
    tl_hub::store::remove(&cfg, "hf:bartowski/Some-Model-GGUF").unwrap();
    assert!(!repo_dir.exists());
    assert!(tl_hub::store::list(&cfg).unwrap().is_empty());
}

#[test]
fn ambiguous_and_absent_picks_name_what_the_repository_holds() {
    let mut st = State::default();
    st.repos.insert("org/gguf".into(), gguf_repo());
    st.repos.insert(
        "org/split".into(),
        repo(vec![("m-Q4_K_M-00001-of-00002.gguf", lfs(10, 1)), ("m-Q4_K_M-00002-of-00002.gguf", lfs(10, 2))]),
    );
    let server = Server::start(st);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&server, &dir);
    let err = tl_hub::pull(&cfg, "hf:org/gguf").unwrap_err().to_string();
    assert!(err.contains("several GGUF files (model-Q4_K_M.gguf, model-Q8_0.gguf): pick one with :QUANT"), "{err}");
    let err = tl_hub::pull(&cfg, "hf:org/gguf:Q5_K_M").unwrap_err().to_string();
    assert!(err.contains("no GGUF file is Q5_K_M; the repository holds model-Q4_K_M.gguf, model-Q8_0.gguf"), "{err}");
    let err = tl_hub::pull(&cfg, "hf:org/split:Q4_K_M").unwrap_err().to_string();
    assert!(err.contains("split into several files"), "{err}");
    // Nothing was downloaded for any of them.
    assert!(!server.log().iter().any(|l| l.contains("/resolve/")), "{:?}", server.log());
}

#[test]
fn malformed_references_are_refused_with_one_line() {
    for (text, why) in [
        ("hf:org", "no repository after the organisation"),
        ("hf:org/re po", "organisation and repository are letters"),
        ("hf:org/repo:Q4/file.gguf", "give a :QUANT or a /FILE, not both"),
        ("hf:org/repo@", "the revision after '@'"),
        ("hf:org/repo/../x", "a file path's parts"),
    ] {
        let err = tl_hub::reference::parse(text).unwrap_err().to_string();
        assert!(err.starts_with(text) && err.contains(why) && !err.contains('\n'), "{text}: {err}");
    }
    let err = tl_hub::reference::parse("no-such-model:7b").unwrap_err().to_string();
    assert_eq!(
        err,
        "no-such-model:7b: no such file, catalog name or hf: reference (`tl list --catalog` shows the names)"
    );
    let r = tl_hub::reference::parse_hf("hf.co/org/repo@v1.0/sub/f.gguf").unwrap().unwrap();
    assert_eq!((r.repo.as_str(), r.revision.as_str()), ("org/repo", "v1.0"));
    assert_eq!(r.pick, tl_hub::Pick::File("sub/f.gguf".into()));
}
