//! The GGUF reader and store: header, metadata, tensor infos, the config and tokenizer
//! translated from the metadata, the chat template, and every tensor's block data.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tl_arch_llama as _;
use tl_arch_qwen2 as _;
use tl_core::{Gguf, WeightStore};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let path = common::as_file(data, "gguf");
    // The container plus the registered architecture's translation (names, config).
    let _ = tl_core::load::open_gguf(&path);
    let Ok(g) = Gguf::open(&path) else { return };
    let _ = tl_core::tokenizer::gguf_tokenizer_json(&g);
    let _ = tl_core::ChatTemplate::from_gguf(&g);
    for name in g.names() {
        let Some(info) = g.info(&name) else { continue };
        let _ = g.f32(&name, &info.shape);
        let _ = g.stored(&name, &info.shape);
    }
});
