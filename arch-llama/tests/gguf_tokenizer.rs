//! A Llama 3 GGUF vocabulary (`tokenizer.ggml.pre = "llama-bpe"`): the pre-tokenizer this
//! crate registers is accepted by the `tokenizers` crate, splits as Llama 3's regex does
//! (digits in runs of at most three, a word with its leading space), keeps a pre-token
//! that is in the vocabulary whole (`ignore_merges`), and adds the BOS the file asks for.
//! scripts/check_gguf_vocabs.sh checks the real Llama 3 vocabulary against Hugging Face.

#[path = "../../core/tests/gguf_writer/mod.rs"]
mod gguf_writer;

use gguf_writer::{byte_char, f32_tensor, write, Meta};
use tl_core::{Gguf, Tokenizer};

// Name the plugin crate so its "llama-bpe" pre-tokenizer is registered.
use tl_arch_llama as _;

const N_SPECIAL: u32 = 2; // <|begin_of_text|>, <|end_of_text|>
const BOS: u32 = 0;

fn byte_id(b: u8) -> u32 {
    N_SPECIAL + b as u32
}

/// The merged tokens: "12", "ab", and "abc", which no merge reaches ("ab c" is absent).
const TWELVE: u32 = N_SPECIAL + 256;
const AB: u32 = N_SPECIAL + 257;
const ABC: u32 = N_SPECIAL + 258;

fn tokenizer(dir: &std::path::Path, pre: &str) -> Tokenizer {
    let mut tokens: Vec<String> = ["<|begin_of_text|>", "<|end_of_text|>"].iter().map(|s| s.to_string()).collect();
    tokens.extend((0..=255u8).map(|b| byte_char(b).to_string()));
    tokens.extend(["12", "ab", "abc"].map(String::from));
    let types: Vec<i32> = (0..tokens.len()).map(|i| if i < N_SPECIAL as usize { 3 } else { 1 }).collect();
    let path = dir.join(format!("{pre}.gguf"));
    let meta = vec![
        ("general.architecture", Meta::Str("llama")),
        ("tokenizer.ggml.model", Meta::Str("gpt2")),
        ("tokenizer.ggml.pre", Meta::String(pre.to_string())),
        ("tokenizer.ggml.tokens", Meta::Strs(tokens)),
        ("tokenizer.ggml.token_type", Meta::I32s(types)),
        ("tokenizer.ggml.merges", Meta::Strs(vec!["1 2".into(), "a b".into()])),
        ("tokenizer.ggml.bos_token_id", Meta::U32(BOS)),
        ("tokenizer.ggml.eos_token_id", Meta::U32(1)),
        ("tokenizer.ggml.add_bos_token", Meta::Bool(true)),
    ];
    write(&path, &meta, &[f32_tensor("output_norm.weight", &[1], &[1.0])]);
    Tokenizer::from_gguf(&Gguf::open(&path).expect("gguf")).expect("the llama-bpe pre-tokenizer is accepted")
}

#[test]
fn the_llama3_pre_tokenizer_groups_digits_by_three_and_keeps_vocabulary_words_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = |s: &str| s.bytes().map(byte_id).collect::<Vec<_>>();
    for pre in ["llama-bpe", "llama3", "llama-v3"] {
        let tok = tokenizer(dir.path(), pre);
        // "12121" splits as "121" + "21": "12" merges only inside the first run.
        let mut want = vec![TWELVE];
        want.extend(bytes("121"));
        assert_eq!(tok.encode("12121").unwrap(), want, "{pre}");
        // "abc" is one pre-token and a vocabulary entry: one token, though the merges stop
        // at "ab" + "c"; "abd" is not in the vocabulary, so the merges apply.
        assert_eq!(tok.encode("abc").unwrap(), vec![ABC], "{pre}");
        let mut want = vec![AB];
        want.extend(bytes("d"));
        assert_eq!(tok.encode("abd").unwrap(), want, "{pre}");
        // A word keeps its leading space (" abc" is not in the vocabulary: merges apply).
        let mut want = bytes(" ");
        want.push(AB);
        want.extend(bytes("c"));
        assert_eq!(tok.encode(" abc").unwrap(), want, "{pre}");
        // The file asks for a BOS: added with the special tokens, not without.
        assert_eq!(tok.encode_with_special("ab").unwrap(), vec![BOS, AB], "{pre}");
        assert_eq!(tok.decode(&tok.encode("Hello 2024, wörld!").unwrap()).unwrap(), "Hello 2024, wörld!");
    }
}
