//! sentence-transformers' module files as tl-arch-bert reads them (modules.json, then the
//! Pooling module's config.json): the input is modules.json's text, a NUL byte, then
//! 1_Pooling/config.json's text. Errors are fine; a panic is a finding, and a pipeline
//! that is read must pool any rows without a panic, into its declared length.
//!
//! The check lives here rather than in checks.rs, which serve's stable regression test
//! also includes (serve does not depend on tl-arch-bert).
#![no_main]
use libfuzzer_sys::fuzz_target;
use tl_arch_bert::Pipeline;

fuzz_target!(|data: &[u8]| {
    let (modules, pooling) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let Ok(dir) = tempfile::tempdir() else { return };
    let d = 4;
    if std::fs::write(dir.path().join("modules.json"), modules).is_err()
        || std::fs::create_dir_all(dir.path().join("1_Pooling")).is_err()
        || std::fs::write(dir.path().join("1_Pooling/config.json"), pooling).is_err()
    {
        return;
    }
    if let Ok(Some(p)) = Pipeline::read(dir.path(), d, true) {
        let rows: Vec<f32> = (0..3 * d).map(|i| i as f32 - 5.0).collect();
        assert_eq!(p.pool(&rows, d).len(), p.modes.len() * d);
    }
});
