//! The safetensors reader: see `checks::safetensors` (fuzz/checks.rs), shared with the stable regression test.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;
#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let path = common::as_file(data, "safetensors");
    checks::safetensors(&path);
});
