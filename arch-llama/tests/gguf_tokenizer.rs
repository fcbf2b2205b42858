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

/// A SentencePiece vocabulary (`tokenizer.ggml.model = "llama"`: Llama 2, Mistral, ...):
/// pieces, scores and types, no merges. Built as transformers' converter builds it: a
/// prepended "▁", spaces as "▁", merges ranked by the merged piece's score, bytes no
/// piece covers as `<0xNN>`, and the BOS. scripts/check_gguf_vocabs.sh checks real
/// Llama 2 and Phi-3 vocabularies against Hugging Face.
fn spm(dir: &std::path::Path, extra: &[(&str, f32)]) -> Tokenizer {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0f32; 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    let pieces = [("▁", -1.0), ("h", -2.0), ("e", -3.0), ("l", -4.0), ("o", -5.0)];
    let merged = [("he", -10.0), ("ll", -11.0), ("llo", -12.0), ("▁he", -13.0), ("▁hello", -14.0)];
    for &(p, s) in pieces.iter().chain(&merged).chain(extra) {
        tokens.push(p.into());
        types.push(1);
        scores.push(s);
    }
    let path = dir.join(format!("spm-{}.gguf", extra.len()));
    let meta = vec![
        ("general.architecture", Meta::Str("llama")),
        ("tokenizer.ggml.model", Meta::Str("llama")),
        ("tokenizer.ggml.tokens", Meta::Strs(tokens)),
        ("tokenizer.ggml.scores", Meta::F32s(scores)),
        ("tokenizer.ggml.token_type", Meta::I32s(types)),
        ("tokenizer.ggml.bos_token_id", Meta::U32(1)),
        ("tokenizer.ggml.eos_token_id", Meta::U32(2)),
        ("tokenizer.ggml.unknown_token_id", Meta::U32(0)),
        ("tokenizer.ggml.add_bos_token", Meta::Bool(true)),
    ];
    write(&path, &meta, &[f32_tensor("output_norm.weight", &[1], &[1.0])]);
    Tokenizer::from_gguf(&Gguf::open(&path).expect("gguf")).expect("the SentencePiece vocabulary is accepted")
}

#[test]
fn a_sentencepiece_vocabulary_merges_by_score_and_falls_back_to_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let id = |tok: &Tokenizer, p: &str| tok.token_to_id(p).unwrap_or_else(|| panic!("{p:?} in the vocabulary"));
    let tok = spm(dir.path(), &[]);
    // "hello" becomes "▁hello"; the merges, best score first: h+e, l+l, ll+o, ▁+he,
    // ▁he+llo: one piece.
    assert_eq!(tok.encode("hello").unwrap(), vec![id(&tok, "▁hello")]);
    assert_eq!(tok.encode_with_special("hello").unwrap(), vec![1, id(&tok, "▁hello")]);
    // With "el" scored above "he", e+l merges first and nothing else can.
    let tok2 = spm(dir.path(), &[("el", -9.0)]);
    let want: Vec<u32> = ["▁", "h", "el", "l", "o"].iter().map(|p| id(&tok2, p)).collect();
    assert_eq!(tok2.encode("hello").unwrap(), want);
    // "é" is no piece: its UTF-8 bytes, as <0xC3> <0xA9> (so "h" stays alone); a space
    // is "▁"; "he" before a space still merges up to "▁he".
    let want: Vec<u32> = ["▁", "h", "<0xC3>", "<0xA9>", "▁", "o"].iter().map(|p| id(&tok, p)).collect();
    assert_eq!(tok.encode("hé o").unwrap(), want);
    let want: Vec<u32> = ["▁he", "▁", "o"].iter().map(|p| id(&tok, p)).collect();
    assert_eq!(tok.encode("he o").unwrap(), want);
    // Decoding joins the pieces: bytes rejoined, every "▁" a space, the prepended one too
    // (tl decodes piece by piece, as a stream shows them; transformers' `decode` of a
    // whole text strips that first space).
    assert_eq!(tok.decode(&tok.encode("hé o hello").unwrap()).unwrap(), " hé o hello");
}
