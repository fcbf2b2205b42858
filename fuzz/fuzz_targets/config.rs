//! config.json parsing: see `checks::config` (fuzz/checks.rs), shared with the stable regression test.
#![no_main]
use libfuzzer_sys::fuzz_target;
// Every family (families/src/lib.rs says why naming the crate is needed).
use tl_families as _;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    checks::config(data);
});
