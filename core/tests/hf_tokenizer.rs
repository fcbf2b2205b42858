//! The byte-level BPE built from a GGUF's `tokenizer.ggml.*` metadata, and tokenizer.json.
//! Expected ids are worked out by hand from the tiny vocabulary below.

mod gguf_writer;

use gguf_writer::{byte_char, f32_tensor, write, Meta};
use tl_core::tokenizer::{gguf_tokenizer_json, HfTokenizer};
use tl_core::{Gguf, Tokenizer};

/// Specials 0..3, then the 256 byte characters (id 3 + byte), then the merges' results.
const MERGES: [(&str, &str); 9] =
    [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("2", "0"), ("Ġ", "w"), ("o", "r"), ("Ġw", "or"), ("l", "d")];
const HELLO: u32 = 262;
const TWENTY: u32 = 263;

fn byte_id(b: u8) -> u32 {
    3 + b as u32
}

fn vocab() -> (Vec<String>, Vec<i32>, Vec<String>) {
    let mut tokens: Vec<String> =
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"].iter().map(|s| s.to_string()).collect();
    tokens.extend((0..=255u8).map(|b| byte_char(b).to_string()));
    tokens.extend(MERGES.iter().map(|(a, b)| format!("{a}{b}")));
    tokens.push("Ġworld".into()); // "Ġwor" + "ld"
    let mut merges: Vec<String> = MERGES.iter().map(|(a, b)| format!("{a} {b}")).collect();
    merges.push("Ġwor ld".into());
    let types = (0..tokens.len()).map(|i| if i < 3 { 3 } else { 1 }).collect();
    (tokens, types, merges)
}

fn gguf(dir: &std::path::Path, pre: &'static str, model: &'static str, add_bos: bool) -> Gguf {
    let (tokens, types, merges) = vocab();
    let path = dir.join(format!("tok-{pre}-{model}-{add_bos}.gguf"));
    let meta = vec![
        ("general.architecture", Meta::Str("llama")),
        ("llama.attention.head_count", Meta::U32(1)),
        ("tokenizer.ggml.model", Meta::Str(model)),
        ("tokenizer.ggml.pre", Meta::Str(pre)),
        ("tokenizer.ggml.tokens", Meta::Strs(tokens)),
        ("tokenizer.ggml.token_type", Meta::I32s(types)),
        ("tokenizer.ggml.merges", Meta::Strs(merges)),
        ("tokenizer.ggml.bos_token_id", Meta::U32(1)),
        ("tokenizer.ggml.eos_token_id", Meta::U32(2)),
        ("tokenizer.ggml.add_bos_token", Meta::Bool(add_bos)),
    ];
    write(&path, &meta, &[f32_tensor("output_norm.weight", &[1], &[1.0])]);
    Gguf::open(&path).unwrap()
}

fn bytes(s: &str) -> Vec<u32> {
    s.bytes().map(byte_id).collect()
}

#[test]
fn gguf_bpe_merges_and_isolates_digits() {
    let dir = tempfile::tempdir().unwrap();
    let tok = Tokenizer::from_gguf(&gguf(dir.path(), "smollm", "gpt2", false)).unwrap();
    assert_eq!(tok.encode("hello world").unwrap(), vec![HELLO, 268]);
    // "smollm" isolates every digit before BPE: the merge "2 0" never applies.
    assert_eq!(tok.encode("2024").unwrap(), bytes("2024"));
    assert_eq!(tok.encode("x2024").unwrap(), bytes("x2024"));
    // Plain GPT-2 pre-tokenization keeps digits together, so "2 0" merges.
    let gpt2 = Tokenizer::from_gguf(&gguf(dir.path(), "gpt2", "gpt2", false)).unwrap();
    assert_eq!(gpt2.encode("2024").unwrap(), vec![TWENTY, byte_id(b'2'), byte_id(b'4')]);
    // Special tokens written in the text are recognised; no BOS is added.
    let chat = "<|im_start|>user\nhello<|im_end|>";
    let mut want = vec![1];
    want.extend(bytes("user\n"));
    want.extend([HELLO, 2]);
    assert_eq!(tok.encode(chat).unwrap(), want);
    assert_eq!(tok.encode_with_special(chat).unwrap(), want);
    assert_eq!(tok.token_to_id("<|im_end|>"), Some(2));
    assert!(tok.is_special(2) && !tok.is_special(HELLO));
    // Non-ASCII text goes through the byte alphabet and back.
    assert_eq!(tok.encode("é").unwrap(), vec![byte_id(0xC3), byte_id(0xA9)]);
    assert_eq!(tok.decode(&tok.encode("héllo wörld 2024").unwrap()).unwrap(), "héllo wörld 2024");
    // Special tokens decode to nothing.
    assert_eq!(tok.decode(&want).unwrap(), "user\nhello");

    // With add_bos_token, encoding with special tokens prepends BOS (and only then).
    let bos = Tokenizer::from_gguf(&gguf(dir.path(), "smollm", "gpt2", true)).unwrap();
    assert_eq!(bos.encode_with_special("hello").unwrap(), vec![1, HELLO]);
    assert_eq!(bos.encode("hello").unwrap(), vec![HELLO]);
}

#[test]
fn stream_decoder_never_splits_a_character() {
    let dir = tempfile::tempdir().unwrap();
    let tok = Tokenizer::from_gguf(&gguf(dir.path(), "smollm", "gpt2", false)).unwrap();
    let mut s = tok.stream();
    assert_eq!(s.push(HELLO).unwrap(), "hello");
    assert_eq!(s.push(byte_id(0xE2)).unwrap(), ""); // "€" is E2 82 AC
    assert_eq!(s.push(byte_id(0x82)).unwrap(), "");
    assert_eq!(s.push(2).unwrap(), ""); // a special token in between adds nothing
    assert_eq!(s.push(byte_id(0xAC)).unwrap(), "€");
    assert_eq!(s.push(byte_id(0xC3)).unwrap(), "");
    assert_eq!(s.finish(), "\u{FFFD}");
    assert!(s.push(100_000).is_err());
}

#[test]
fn tokenizer_json_from_gguf_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let g = gguf(dir.path(), "smollm", "gpt2", false);
    let json = gguf_tokenizer_json(&g).unwrap();
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    let from_file = Tokenizer::Hf(Box::new(HfTokenizer::from_file(&path).unwrap()));
    let from_gguf = Tokenizer::from_gguf(&g).unwrap();
    for text in ["hello world", "2024 and 1999", "<|im_start|>user\nhé<|im_end|>\n", "  spaces\n\n tabs\t"] {
        assert_eq!(from_file.encode(text).unwrap(), from_gguf.encode(text).unwrap(), "{text:?}");
    }
    assert_eq!(from_file.encode("2024").unwrap(), bytes("2024"));
}

#[test]
fn gguf_tokenizer_refuses_what_it_cannot_build() {
    let dir = tempfile::tempdir().unwrap();
    let e = Tokenizer::from_gguf(&gguf(dir.path(), "weird", "gpt2", false)).err().unwrap().to_string();
    assert!(e.contains("tokenizer.ggml.pre") && e.contains("weird") && e.contains(".gguf"), "{e}");
    let e = Tokenizer::from_gguf(&gguf(dir.path(), "smollm", "llama", false)).err().unwrap().to_string();
    assert!(e.contains("tokenizer.ggml.model") && e.contains("llama"), "{e}");
    let e = HfTokenizer::from_file(&dir.path().join("missing.json")).err().unwrap().to_string();
    assert!(e.contains("missing.json"), "{e}");
}

#[test]
fn tokenizer_json_padding_and_truncation_are_not_applied() {
    // A WordPiece tokenizer.json as sentence-transformers saves it: the exporter's
    // padding (to a fixed 8) and truncation (at 4) left in the file.
    let json = serde_json::json!({
        "version": "1.0",
        "truncation": {"direction": "Right", "max_length": 4, "strategy": "LongestFirst", "stride": 0},
        "padding": {"strategy": {"Fixed": 8}, "direction": "Right", "pad_to_multiple_of": null,
                    "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"},
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null,
        "decoder": null,
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100,
                  "vocab": {"[PAD]": 0, "[UNK]": 1, "a": 2, "b": 3, "c": 4}}
    });
    let tok = Tokenizer::Hf(Box::new(HfTokenizer::from_json(json, std::path::Path::new("tokenizer.json")).unwrap()));
    // Six words: neither cut to 4 nor padded to 8.
    assert_eq!(tok.encode("a b c a b c").unwrap(), vec![2, 3, 4, 2, 3, 4]);
    assert_eq!(tok.encode_with_special("a").unwrap(), vec![2]);
}
