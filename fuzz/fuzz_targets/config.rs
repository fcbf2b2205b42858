//! config.json parsing with its refusals (core fields, then the llama architecture's own
//! typed config).
#![no_main]
use libfuzzer_sys::fuzz_target;
use tl_arch_llama as _;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = tl_core::ModelConfig::from_json(text);
    }
});
