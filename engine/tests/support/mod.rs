//! Where the test models are, shared by tl-engine's and tl-serve's tests (serve includes
//! this file by path).
#![allow(dead_code)]

use std::path::PathBuf;

// The engine names no KV backend (they are plugins): link tl-kv's "f16-slab" and
// "q8-slab" registrations into every test that builds a runner.
use tl_kv as _;

/// This crate's fixture model `name` (its tests/fixtures/).
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// Another crate's fixture model: `krate`/tests/fixtures/`name`.
pub fn crate_fixture(krate: &str, name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(krate).join("tests/fixtures").join(name)
}

/// The tiny random Llama fixture.
pub fn tiny() -> PathBuf {
    crate_fixture("arch-llama", "tiny-llama")
}

/// SmolLM2, or None (loudly) when it is missing and TL_REQUIRE_MODEL is unset.
pub fn smollm2() -> Option<PathBuf> {
    let cache = match std::env::var_os("TL_CACHE") {
        Some(c) => PathBuf::from(c),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/tl"),
    };
    let path = cache.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var_os("TL_REQUIRE_MODEL").is_none(),
        "TL_REQUIRE_MODEL is set but {} is missing: run scripts/fetch_model.sh",
        path.display()
    );
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("\nSKIPPED: {} is missing (scripts/fetch_model.sh)\n", path.display()).as_bytes(),
    );
    None
}
