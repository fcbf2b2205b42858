//! `response_format` JSON schemas into llguidance: see `checks::json_schema` (fuzz/checks.rs), shared with the stable regression test.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    checks::json_schema(data);
});
