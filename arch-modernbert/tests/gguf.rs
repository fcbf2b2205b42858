//! A ModernBERT GGUF file as llama.cpp's convert_hf_to_gguf.py writes it
//! (scripts/fixtures/make_encoder_ggufs.sh) against the directory it was made from: the
//! F32 file's vectors of the same token ids are the directory's bit for bit (global and
//! sliding-window layers, both RoPE bases); its vocabulary is refused naming the key; a
//! missing tensor is refused naming the file and the tensor.

use std::path::PathBuf;

use tl_core::{EncodeInput, EngineConfig, ModelRunner};
use tl_kv as _;
use tl_testkit::encoders::{cases, u32s};
use tl_testkit::{bits, gguf_error, gguf_respelled};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn engine() -> EngineConfig {
    EngineConfig { threads: 2, ..Default::default() }
}

#[test]
fn tiny_modernbert_f32_gguf_equals_the_directory_bit_for_bit() {
    let dir = ModelRunner::load(&fixture("tiny-modernbert"), &engine()).unwrap();
    let gguf = ModelRunner::load(&fixture("gguf/tiny-modernbert.F32.gguf"), &engine()).unwrap();
    let (di, gi) = (dir.encoder_info().unwrap(), gguf.encoder_info().unwrap());
    assert_eq!((gi.vector, gi.normalized, gi.max_tokens), (di.vector, di.normalized, di.max_tokens));
    let ids: Vec<Vec<u32>> = cases(&fixture("tiny-modernbert")).iter().map(|c| u32s(&c["ids"])).collect();
    // Past the 8-token window on some inputs, so the local layers' masks matter.
    assert!(ids.iter().any(|i| i.len() > 12), "{:?}", ids.iter().map(Vec::len).collect::<Vec<_>>());
    let inputs: Vec<EncodeInput<'_>> = ids.iter().map(|i| EncodeInput::ids(i)).collect();
    let (d, g) = (dir.encode(&inputs, true).unwrap(), gguf.encode(&inputs, true).unwrap());
    for (i, (d, g)) in d.iter().zip(&g).enumerate() {
        assert_eq!(bits(d.hidden.as_ref().unwrap()), bits(g.hidden.as_ref().unwrap()), "input {i}: hidden");
        assert_eq!(bits(d.vector.as_ref().unwrap()), bits(g.vector.as_ref().unwrap()), "input {i}: vector");
    }
}

#[test]
fn its_vocabulary_is_refused_naming_the_key() {
    let err = match tl_arch_modernbert::load(&fixture("gguf/tiny-modernbert.F32.gguf"), &engine()) {
        Ok(_) => panic!("the vocabulary loaded"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("tiny-modernbert.F32.gguf") && err.contains("tokenizer.ggml.pre"), "{err}");
}

#[test]
fn a_missing_tensor_is_named() {
    let bytes = std::fs::read(fixture("gguf/tiny-modernbert.F32.gguf")).unwrap();
    let err = gguf_error(&gguf_respelled(bytes, "blk.2.attn_norm.weight", "blk.2.attn_NORM.weight"));
    assert!(err.contains("bad.gguf") && err.contains("\"blk.2.attn_norm.weight\""), "{err}");
}
