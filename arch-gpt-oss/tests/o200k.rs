//! gpt-oss GGUF vocabularies (`tokenizer.ggml.pre = "gpt-4o"`, o200k's pattern) tokenize as
//! tiktoken, gpt-oss's own tokenizer library, does: tests/fixtures/o200k-vocab holds a small
//! vocabulary trained by tiktoken under that pattern and tiktoken's ids for a set of texts
//! (scripts/fixtures/make_o200k_vocab.py): case runs, contractions in either case, digit
//! triples, punctuation with trailing slashes and newlines, whitespace runs, accents and
//! other scripts.

// Name the plugin crate so its registrations (the "gpt-4o" pre-tokenizer) are linked.
use tl_arch_gpt_oss as _;

use serde_json::Value;
use tl_core::{Gguf, Tokenizer};

#[test]
fn o200k_vocabularies_tokenize_as_tiktoken() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/o200k-vocab");
    let g = Gguf::open(&dir.join("vocab.gguf")).expect("open");
    let tok = Tokenizer::from_gguf(&g).expect("the gpt-4o pre-tokenizer is registered");
    let cases: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("cases.json")).unwrap()).unwrap();
    let cases = cases["cases"].as_array().expect("cases");
    assert!(cases.len() >= 15);
    for c in cases {
        let text = c["text"].as_str().unwrap();
        let want: Vec<u32> = c["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        assert_eq!(tok.encode(text).expect("encode"), want, "{text:?}");
        assert_eq!(tok.decode(&want).expect("decode"), text, "{text:?} round trip");
    }
}
