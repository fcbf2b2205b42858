//! The request parsing of `/v1/embeddings` and `/v1/rerank` (and rerank's ranking): see
//! `checks::embed_request` (fuzz/checks.rs), shared with the stable regression test.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    checks::embed_request(data);
});
