//! ModernBERT GGUF files as llama.cpp's convert_hf_to_gguf.py writes them
//! (scripts/fixtures/make_encoder_ggufs.sh) against the directories they were made from:
//! the F32 file's vectors of the same token ids are the directory's bit for bit (global
//! and sliding-window layers, both RoPE bases); the vocabulary tl rebuilds from a file of
//! ModernBERT's byte-level BPE gives Hugging Face `tokenizers`' ids of the directory's
//! tokenizer.json, and the file's vectors from text are the directory's bit for bit; a
//! missing or garbled vocabulary key and a missing tensor are refused, naming the file and
//! the key or tensor.

use std::path::PathBuf;

use serde_json::Value;
use tl_arch_modernbert::{embed, load, Texts};
use tl_core::tokenizer::HfTokenizer;
use tl_core::{EncodeInput, EngineConfig, Gguf, ModelRunner, Tokenizer};
use tl_kv as _;
use tl_testkit::encoders::{cases, u32s};
use tl_testkit::{bits, gguf_error, gguf_respelled, gguf_with_u32_meta};

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

const BPE_DIR: &str = "tiny-modernbert-bpe";
const BPE_GGUF: &str = "gguf/tiny-modernbert-bpe.F32.gguf";

/// A reference text, or pair, with the ids Hugging Face `tokenizers` gives it.
type Case<T> = (T, Vec<u32>);

/// reference.json of tiny-modernbert-bpe.
struct Cases {
    texts: Vec<Case<String>>,
    pairs: Vec<Case<(String, String)>>,
}

/// reference.json of tiny-modernbert-bpe: texts and pairs with `tokenizers`' ids.
fn bpe_cases() -> Cases {
    let (mut texts, mut pairs) = (Vec::new(), Vec::new());
    for c in cases(&fixture(BPE_DIR)) {
        let ids = u32s(&c["ids"]);
        match (&c["text"], &c["pair"]) {
            (Value::String(t), _) => texts.push((t.clone(), ids)),
            (_, Value::Array(p)) => pairs.push(((p[0].as_str().unwrap().into(), p[1].as_str().unwrap().into()), ids)),
            _ => panic!("a case without text or pair: {c}"),
        }
    }
    Cases { texts, pairs }
}

fn bpe_load(name: &str) -> (ModelRunner, Texts) {
    load(&fixture(name), &engine()).unwrap()
}

#[test]
fn tiny_modernbert_bpe_gguf_tokenizes_as_tokenizers_does() {
    let (_, dir_texts) = bpe_load(BPE_DIR);
    let (_, gguf_texts) = bpe_load(BPE_GGUF);
    assert_eq!((dir_texts.max_seq_length(), gguf_texts.max_seq_length()), (64, 64));
    let Cases { texts, pairs } = bpe_cases();
    assert!(texts.len() >= 30 && pairs.len() >= 3, "{} texts, {} pairs", texts.len(), pairs.len());
    for (t, want) in &texts {
        let (got, cut) = gguf_texts.text_cut(t).unwrap();
        assert!(!cut, "{t:?} was cut");
        assert_eq!(&got.ids, want, "{t:?}");
        assert_eq!(dir_texts.text(t).unwrap().ids, got.ids, "{t:?}: the directory");
    }
    for ((a, b), want) in &pairs {
        let got = gguf_texts.pair(a, b).unwrap();
        assert_eq!(&got.ids, want, "{a:?} / {b:?}");
        assert_eq!(dir_texts.pair(a, b).unwrap(), got, "{a:?} / {b:?}: the directory");
    }
    // Decoding too: the same text back from the same ids, special tokens dropped.
    let gguf = Tokenizer::from_gguf(&Gguf::open(&fixture(BPE_GGUF)).unwrap()).unwrap();
    let dir = Tokenizer::Hf(Box::new(HfTokenizer::from_file(&fixture(BPE_DIR).join("tokenizer.json")).unwrap()));
    for (t, ids) in &texts {
        assert_eq!(gguf.decode(ids).unwrap(), dir.decode(ids).unwrap(), "{t:?}");
        assert_eq!(gguf.encode(t).unwrap(), dir.encode(t).unwrap(), "{t:?} without special tokens");
    }
}

#[test]
fn tiny_modernbert_bpe_gguf_embeds_text_as_the_directory_bit_for_bit() {
    let (dir, dir_texts) = bpe_load(BPE_DIR);
    let (gguf, gguf_texts) = bpe_load(BPE_GGUF);
    let (di, gi) = (dir.encoder_info().unwrap(), gguf.encoder_info().unwrap());
    assert_eq!((gi.vector, gi.normalized, gi.max_tokens), (di.vector, di.normalized, di.max_tokens));
    let texts = bpe_cases().texts;
    let texts: Vec<&str> = texts.iter().map(|(t, _)| t.as_str()).collect();
    let (d, g) = (embed(&dir, &dir_texts, &texts).unwrap(), embed(&gguf, &gguf_texts, &texts).unwrap());
    for ((t, d), g) in texts.iter().zip(&d).zip(&g) {
        assert_eq!(bits(d), bits(g), "{t:?}");
    }
}

/// The error loading `bytes` with its vocabulary.
fn vocab_error(bytes: Vec<u8>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.gguf");
    std::fs::write(&path, bytes).unwrap();
    match load(&path, &engine()) {
        Ok(_) => panic!("the vocabulary loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_missing_or_garbled_vocabulary_key_is_named() {
    let tiny = || std::fs::read(fixture(BPE_GGUF)).unwrap();
    for key in ["tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.model", "tokenizer.ggml.bos_token_id"]
    {
        let respelled = format!("{}_", &key[..key.len() - 1]);
        let err = vocab_error(gguf_respelled(tiny(), key, &respelled));
        assert!(err.contains("bad.gguf") && err.contains(&format!("{key}: missing")), "{key}: {err}");
    }
    // Without a separator id the eos id is sep; without either, eos is named.
    let no_sep = gguf_respelled(tiny(), "tokenizer.ggml.seperator_token_id", "tokenizer.ggml.seperator_token_iD");
    let (_, texts) = {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sep.gguf");
        std::fs::write(&path, &no_sep).unwrap();
        load(&path, &engine()).unwrap()
    };
    assert_eq!(texts.text("x").unwrap().ids, [367, 89, 368]);
    let err = vocab_error(gguf_respelled(no_sep, "tokenizer.ggml.eos_token_id", "tokenizer.ggml.eos_token_iD"));
    assert!(err.contains("bad.gguf") && err.contains("tokenizer.ggml.eos_token_id: missing"), "{err}");
    for key in ["tokenizer.ggml.bos_token_id", "tokenizer.ggml.seperator_token_id"] {
        let err = vocab_error(gguf_with_u32_meta(tiny(), key, 9999));
        assert!(err.contains("bad.gguf") && err.contains(&format!("{key}: id 9999 is past the 373 tokens")), "{err}");
    }
}

#[test]
fn a_missing_tensor_is_named() {
    let bytes = std::fs::read(fixture("gguf/tiny-modernbert.F32.gguf")).unwrap();
    let err = gguf_error(&gguf_respelled(bytes, "blk.2.attn_norm.weight", "blk.2.attn_NORM.weight"));
    assert!(err.contains("bad.gguf") && err.contains("\"blk.2.attn_norm.weight\""), "{err}");
}
