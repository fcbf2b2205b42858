//! MODEL by name in every `tl` subcommand: a model that is in huggingface_hub's cache (the
//! layout Python writes: blobs by sha256, snapshot links, refs/main) runs as
//! `hf:ORG/REPO` without a request (the endpoint is a closed port) and answers as its
//! path does; `tl list` shows it and `tl rm` removes it; a name that is not on disk is
//! not downloaded without consent, and unknown names fail in one line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const COMMIT: &str = "89abcdef0123456789abcdef0123456789abcdef";

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

fn tl(args: &[&str], hf_home: &Path, tl_cache: &Path) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tl"));
    cmd.args(args).env("RAYON_NUM_THREADS", "2");
    for v in ["TL_THREADS", "TL_WEIGHTS", "TL_ACTIVATIONS", "TL_KV", "TL_KV_MEMORY", "HF_HUB_CACHE", "HF_TOKEN"] {
        cmd.env_remove(v);
    }
    // Nothing listens on port 1: any request would fail the command.
    cmd.env("HF_HOME", hf_home).env("TL_CACHE", tl_cache).env("HF_ENDPOINT", "http://127.0.0.1:1");
    cmd.env("TL_PYPI_INDEX", "http://127.0.0.1:1/simple");
    cmd.output().expect("tl did not start")
}

fn ok(what: &str, out: &Output) -> String {
    assert!(out.status.success(), "{what} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Put a model directory into the cache as huggingface_hub would.
fn cache_repo(hf_home: &Path, repo: &str, model: &Path) -> PathBuf {
    let dir = hf_home.join("hub").join(format!("models--{}", repo.replace('/', "--")));
    let snap = dir.join("snapshots").join(COMMIT);
    std::fs::create_dir_all(dir.join("blobs")).unwrap();
    std::fs::create_dir_all(dir.join("refs")).unwrap();
    std::fs::create_dir_all(&snap).unwrap();
    for e in std::fs::read_dir(model).unwrap().flatten() {
        let name = e.file_name().into_string().unwrap();
        if !(name.ends_with(".json") || name.ends_with(".safetensors") || name.ends_with(".jinja")) {
            continue;
        }
        let bytes = std::fs::read(e.path()).unwrap();
        let blob = tl_hub::sha256_file(&e.path()).unwrap();
        std::fs::write(dir.join("blobs").join(&blob), bytes).unwrap();
        std::os::unix::fs::symlink(format!("../../blobs/{blob}"), snap.join(&name)).unwrap();
    }
    std::fs::write(dir.join("refs/main"), COMMIT).unwrap();
    snap
}

#[test]
fn a_cached_hub_model_runs_by_reference_without_a_request_and_answers_as_its_path() {
    let home = tempfile::tempdir().unwrap();
    let (hf, cache) = (home.path().join("hf"), home.path().join("tl"));
    let model = fixture("arch-qwen3/tests/fixtures/tiny-qwen3");
    let snap = cache_repo(&hf, "someone/tiny-qwen3", &model);
    let args = ["--temperature", "0", "--max-tokens", "8", "--threads", "1"];
    let by_path = ok("run PATH", &tl(&[&["run", model.to_str().unwrap(), "Hi"], &args[..]].concat(), &hf, &cache));
    let by_ref = ok("run hf:", &tl(&[&["run", "hf:someone/tiny-qwen3", "Hi"], &args[..]].concat(), &hf, &cache));
    assert_eq!(by_ref, by_path);
    // `--model` and the info subcommand take the same references.
    let info = ok("info", &tl(&["info", "--model", "hf:someone/tiny-qwen3"], &hf, &cache));
    assert!(info.contains(&snap.display().to_string()), "{info}");
    let list = ok("list", &tl(&["list"], &hf, &cache));
    assert!(list.lines().any(|l| l.starts_with("hf:someone/tiny-qwen3 ") && l.contains("safetensors")), "{list}");
    let rm = ok("rm", &tl(&["rm", "hf:someone/tiny-qwen3"], &hf, &cache));
    assert!(rm.contains("models--someone--tiny-qwen3"), "{rm}");
    // Now it is not on disk, and without --yes (no terminal here) nothing is downloaded.
    let out = tl(&["info", "hf:someone/tiny-qwen3"], &hf, &cache);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        err.trim(),
        "error: hf:someone/tiny-qwen3 is not on disk; run `tl pull hf:someone/tiny-qwen3` or pass --yes"
    );
    // With --yes it tries the (closed) endpoint and names the URL that failed, in one line.
    let out = tl(&["info", "--yes", "hf:someone/tiny-qwen3"], &hf, &cache);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.starts_with("error: http://127.0.0.1:1/api/models/someone/tiny-qwen3/revision/main: ")
            && err.trim().lines().count() == 1,
        "{err}"
    );
}

#[test]
fn a_catalog_name_not_on_disk_and_an_unknown_name_fail_in_one_line() {
    let home = tempfile::tempdir().unwrap();
    let (hf, cache) = (home.path().join("hf"), home.path().join("tl"));
    let out = tl(&["run", "smollm2:135m", "Hi"], &hf, &cache);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim(), "error: smollm2:135m is not on disk; run `tl pull smollm2:135m` or pass --yes");
    let out = tl(&["bench", "no-such-model:7b"], &hf, &cache);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.trim().starts_with("error: no-such-model:7b: no such file, catalog name or hf: reference"), "{err}");
    // A draft model is a MODEL too.
    let tiny = fixture("arch-llama/tests/fixtures/tiny-llama");
    let out = tl(&["serve", tiny.to_str().unwrap(), "--port", "0", "--speculate", "draft:smollm2:135m:4"], &hf, &cache);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim(), "error: smollm2:135m is not on disk; run `tl pull smollm2:135m` or pass --yes");
    let out = tl(&["pull", "hf:org"], &hf, &cache);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.trim().starts_with("error: hf:org: no repository after the organisation"), "{err}");
    // The catalog lists every name, none pulled here.
    let list = ok("list --catalog", &tl(&["list", "--catalog"], &hf, &cache));
    for name in ["smollm2:135m", "gemma3:270m", "qwen2.5-coder:0.5b", "qwen2.5-coder:1.5b", "all-minilm:l6-v2"] {
        assert!(list.lines().any(|l| l.starts_with(name) && l.ends_with("(not pulled)")), "{name}: {list}");
    }
}
