//! A Qwen3 GGUF's vocabulary is Qwen2's (`tokenizer.ggml.pre = "qwen2"`, NFC): it loads
//! with only this crate linked (it links tl-arch-qwen2's registration), and splits and
//! composes as Qwen2's tokenizer.json does.

#[path = "../../core/tests/gguf_writer/mod.rs"]
mod gguf_writer;

use gguf_writer::{byte_char, f32_tensor, write, Meta};
use tl_core::{Gguf, Tokenizer};

// Only the Qwen3 crate: the "qwen2" pre-tokenizer must come with it.
use tl_arch_qwen3 as _;

const N_SPECIAL: u32 = 3;

fn byte_id(b: u8) -> u32 {
    N_SPECIAL + b as u32
}

#[test]
fn a_qwen3_gguf_vocabulary_tokenizes_as_qwen2s() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut tokens: Vec<String> =
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"].iter().map(|s| s.to_string()).collect();
    tokens.extend((0..=255u8).map(|b| byte_char(b).to_string()));
    tokens.push("20".to_string());
    let types: Vec<i32> = (0..tokens.len()).map(|i| if i < N_SPECIAL as usize { 3 } else { 1 }).collect();
    let path = dir.path().join("qwen3-tok.gguf");
    let meta = vec![
        ("general.architecture", Meta::Str("qwen3")),
        ("tokenizer.ggml.model", Meta::Str("gpt2")),
        ("tokenizer.ggml.pre", Meta::Str("qwen2")),
        ("tokenizer.ggml.tokens", Meta::Strs(tokens)),
        ("tokenizer.ggml.token_type", Meta::I32s(types)),
        ("tokenizer.ggml.merges", Meta::Strs(vec!["2 0".into()])),
        ("tokenizer.ggml.eos_token_id", Meta::U32(2)),
        ("tokenizer.ggml.add_bos_token", Meta::Bool(false)),
    ];
    write(&path, &meta, &[f32_tensor("output_norm.weight", &[1], &[1.0])]);
    let tok = Tokenizer::from_gguf(&Gguf::open(&path).expect("gguf")).expect("the qwen2 pre-tokenizer is linked");
    let bytes = |s: &str| s.bytes().map(byte_id).collect::<Vec<_>>();
    // Qwen2's split isolates every digit: the merge "2 0" applies only to a pre-token "20"
    // that never forms. (Without the registered pre-tokenizer the load above fails.)
    assert_eq!(tok.encode("2024").unwrap(), bytes("2024"));
    // NFC: a decomposed "é" tokenizes as the precomposed one.
    assert_eq!(tok.encode("cafe\u{301}").unwrap(), bytes("caf\u{e9}"));
    let chat = "<|im_start|>user\nhi<|im_end|>";
    let ids = tok.encode(chat).unwrap();
    assert_eq!((ids[0], *ids.last().unwrap()), (1, 2));
}
