//! MODEL references and the hub file pick: see `checks::model_ref` (fuzz/checks.rs).
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    checks::model_ref(data);
});
