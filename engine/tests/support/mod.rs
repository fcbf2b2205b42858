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

/// A sequence's answer as the engine streams it: (token ids, logprob bits), and its usage;
/// a failed sequence panics with its error.
pub fn collect(mut rx: tl_engine::UnboundedReceiver<tl_engine::Event>) -> (Vec<(u32, u64)>, tl_engine::Usage) {
    use tl_engine::Event;
    let mut out = Vec::new();
    loop {
        match rx.blocking_recv().expect("engine hung up before Done") {
            Event::Token { token, .. } => out.push((token.id, token.logprob.to_bits())),
            Event::Done { usage, .. } => return (out, usage),
            Event::Error(e) => panic!("sequence failed: {e}"),
        }
    }
}

/// A sampled request (temperature 0.9, top 40, two logprobs) of `prompt`.
pub fn sampled(prompt: Vec<u32>, seed: u64, max_tokens: usize) -> tl_engine::Request {
    tl_engine::Request {
        prompt,
        params: tl_core::SamplingParams { temperature: 0.9, top_k: 40, ..Default::default() },
        seed,
        choice: 0,
        max_tokens,
        stop: vec![],
        logprobs: Some(2),
        grammar: None,
        logit_bias: vec![],
        speculate: None,
        adapter: None,
    }
}
