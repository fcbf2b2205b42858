//! A Qwen3.5 GGUF's vocabulary (`tokenizer.ggml.pre = "qwen35"`, as llama.cpp's converter
//! names it) tokenizes as transformers' `Qwen3_5Tokenizer` does: a byte-level BPE trained
//! with Qwen3.5's pre-tokenizer (tests/fixtures/qwen35-vocab, written by
//! scripts/fixtures/make_qwen35_vocab.py with transformers' ids for each text). Its regex
//! keeps combining marks with their letters (Devanagari, Thai, Vietnamese), which Qwen2's
//! does not: the script checks that Qwen2's regex gives other ids on at least three of the
//! texts, so a "qwen35" registered with Qwen2's split fails here.

#[path = "../../core/tests/gguf_writer/mod.rs"]
mod gguf_writer;

use gguf_writer::{f32_tensor, write, Meta};
use serde_json::Value;
use tl_core::{Gguf, Tokenizer};

// Only this crate: the "qwen35" pre-tokenizer must come with it.
use tl_arch_qwen3_5 as _;

fn vocab() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qwen35-vocab/vocab.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("vocab.json")).expect("JSON")
}

fn gguf(dir: &std::path::Path, pre: &'static str) -> Tokenizer {
    let v = vocab();
    let strs = |k: &str| v[k].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect::<Vec<_>>();
    let tokens = strs("tokens");
    let special = strs("special");
    let types: Vec<i32> = tokens.iter().map(|t| if special.contains(t) { 3 } else { 1 }).collect();
    let path = dir.join(format!("{pre}.gguf"));
    let meta = vec![
        ("general.architecture", Meta::Str("qwen35")),
        ("tokenizer.ggml.model", Meta::Str("gpt2")),
        ("tokenizer.ggml.pre", Meta::Str(pre)),
        ("tokenizer.ggml.tokens", Meta::Strs(tokens)),
        ("tokenizer.ggml.token_type", Meta::I32s(types)),
        ("tokenizer.ggml.merges", Meta::Strs(strs("merges"))),
        ("tokenizer.ggml.eos_token_id", Meta::U32(0)),
        ("tokenizer.ggml.add_bos_token", Meta::Bool(false)),
    ];
    write(&path, &meta, &[f32_tensor("output_norm.weight", &[1], &[1.0])]);
    Tokenizer::from_gguf(&Gguf::open(&path).expect("gguf")).expect("the qwen35 pre-tokenizer is linked")
}

#[test]
fn a_qwen35_gguf_vocabulary_tokenizes_as_transformers_qwen3_5_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let tok = gguf(dir.path(), "qwen35");
    let v = vocab();
    for case in v["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = case["ids"].as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as u32).collect();
        assert_eq!(tok.encode(text).unwrap(), want, "{text:?}");
    }
}
