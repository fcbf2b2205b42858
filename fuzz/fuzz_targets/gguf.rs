//! The GGUF reader and store: see `checks::gguf` (fuzz/checks.rs), shared with the stable regression test.
#![no_main]
use libfuzzer_sys::fuzz_target;
// Every family (families/src/lib.rs says why naming the crate is needed).
use tl_families as _;

#[path = "../checks.rs"]
mod checks;
#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let path = common::as_file(data, "gguf");
    checks::gguf(&path);
});
