//! The safetensors reader: open, then read every tensor the header lists at its own
//! shape (widened to f32, and as stored bytes). Errors are fine; panics, hangs and
//! allocations the file size does not justify are not.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tl_core::{SafeTensors, WeightStore};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let path = common::as_file(data, "safetensors");
    if let Ok(st) = SafeTensors::open(&path) {
        for name in st.names() {
            let Some(info) = st.info(&name) else { continue };
            let _ = st.f32(&name, &info.shape);
            let _ = st.stored(&name, &info.shape);
            let _ = st.raw(&name, info.dtype.clone(), &info.shape);
            let _ = st.f32(&name, &[1, 2, 3]);
        }
        let _ = st.metadata("format");
    }
});
