//! LoRA adapters (PEFT directories, GGUF adapter files): see `checks::lora_adapter`
//! (fuzz/checks.rs), shared with the stable regression test.
#![no_main]
use libfuzzer_sys::fuzz_target;
// Every family (families/src/lib.rs says why naming the crate is needed).
use tl_families as _;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    let dir = if std::path::Path::new("/dev/shm").is_dir() { std::path::PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let dir = dir.join(format!("tl-fuzz-lora-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    checks::lora_adapter(&dir, data);
});
