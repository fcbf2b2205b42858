//! A Qwen2 GGUF vocabulary (`tokenizer.ggml.pre = "qwen2"`): the pre-tokenizer this crate
//! registers is accepted by the `tokenizers` crate and splits as Qwen2's regex does
//! (single digits, a word with its leading space, punctuation runs).

#[path = "../../core/tests/gguf_writer/mod.rs"]
mod gguf_writer;

use gguf_writer::{byte_char, f32_tensor, write, Meta};
use tl_core::{Gguf, Tokenizer};

// Name the plugin crate so its "qwen2" pre-tokenizer is registered.
use tl_arch_qwen2 as _;

const N_SPECIAL: u32 = 3;

fn byte_id(b: u8) -> u32 {
    N_SPECIAL + b as u32
}

/// Ids of the two merged tokens: "20" and "he".
const TWENTY: u32 = N_SPECIAL + 256;
const HE: u32 = N_SPECIAL + 257;

fn tokenizer(dir: &std::path::Path) -> Tokenizer {
    let mut tokens: Vec<String> =
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"].iter().map(|s| s.to_string()).collect();
    tokens.extend((0..=255u8).map(|b| byte_char(b).to_string()));
    tokens.extend(["20".to_string(), "he".to_string()]);
    let types: Vec<i32> = (0..tokens.len()).map(|i| if i < N_SPECIAL as usize { 3 } else { 1 }).collect();
    let path = dir.join("qwen2-tok.gguf");
    let meta = vec![
        ("general.architecture", Meta::Str("qwen2")),
        ("tokenizer.ggml.model", Meta::Str("gpt2")),
        ("tokenizer.ggml.pre", Meta::Str("qwen2")),
        ("tokenizer.ggml.tokens", Meta::Strs(tokens)),
        ("tokenizer.ggml.token_type", Meta::I32s(types)),
        ("tokenizer.ggml.merges", Meta::Strs(vec!["2 0".into(), "h e".into()])),
        ("tokenizer.ggml.eos_token_id", Meta::U32(2)),
        ("tokenizer.ggml.add_bos_token", Meta::Bool(false)),
    ];
    write(&path, &meta, &[f32_tensor("output_norm.weight", &[1], &[1.0])]);
    Tokenizer::from_gguf(&Gguf::open(&path).expect("gguf")).expect("the qwen2 pre-tokenizer is accepted")
}

#[test]
fn the_qwen2_pre_tokenizer_isolates_digits_and_keeps_words_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tok = tokenizer(dir.path());
    let bytes = |s: &str| s.bytes().map(byte_id).collect::<Vec<_>>();
    // Qwen2 splits every digit on its own: the merge "2 0" never applies.
    assert_eq!(tok.encode("2024").unwrap(), bytes("2024"));
    // A word keeps its leading space; "h e" merges inside it.
    let mut want = bytes(" ");
    want.extend([HE]);
    want.extend(bytes("llo"));
    assert_eq!(tok.encode(" hello").unwrap(), want);
    assert_ne!(TWENTY, HE);
    // Special tokens in the text are recognised, and text round-trips.
    let chat = "<|im_start|>user\nhello 42!<|im_end|>";
    let ids = tok.encode(chat).unwrap();
    assert_eq!((ids[0], *ids.last().unwrap()), (1, 2));
    assert_eq!(tok.decode(&tok.encode("héllo wörld 2024").unwrap()).unwrap(), "héllo wörld 2024");
}

/// Qwen2's tokenizer.json normalizes with NFC, which GGUF metadata does not say: the
/// registered normalizer restores it. "e" + U+0301 (combining acute) composes to U+00E9
/// (Unicode's canonical composition), so both spellings give the bytes of "é".
#[test]
fn the_qwen2_vocabulary_composes_its_input_as_hugging_face_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tok = tokenizer(dir.path());
    let bytes = |s: &str| s.bytes().map(byte_id).collect::<Vec<_>>();
    assert_eq!(tok.encode("cafe\u{301}").unwrap(), bytes("caf\u{e9}"));
    assert_eq!(tok.encode("caf\u{e9}").unwrap(), bytes("caf\u{e9}"));
    // Compatibility forms are not NFC's business: the ligature "ﬁ" stays itself.
    assert_eq!(tok.encode("\u{fb01}").unwrap(), bytes("\u{fb01}"));
}
