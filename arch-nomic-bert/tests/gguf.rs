//! nomic-bert GGUF files as llama.cpp's convert_hf_to_gguf.py writes them
//! (scripts/fixtures/make_encoder_ggufs.sh) against the directory they were made from:
//! the F32 file gives the directory's vectors bit for bit and its tokenizer the
//! directory's tokenizer.json ids; the F16 file stays within a stated tolerance; a
//! missing tensor is refused naming the file and the tensor.

use std::path::PathBuf;

use tl_arch_nomic_bert::embed;
use tl_core::{EncodeInput, ModelRunner};
use tl_kv as _;
use tl_testkit::encoders::{cases, load_encoder};
use tl_testkit::{bits, gguf_error, gguf_respelled};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

const EXTRA: [&str; 4] =
    ["The WATER was hot, and they said: first!", "Café naïve ÉCOLE", "零 一 二 — σ ψ 😀 ok?", "walking talked sounds"];

/// The reference texts (not pairs) the directory does not cut, and [`EXTRA`].
fn texts(dir_texts: &tl_core::encoder_text::Texts) -> Vec<String> {
    let mut out: Vec<String> = cases(&fixture("tiny-nomic-bert"))
        .iter()
        .filter_map(|c| c.get("text").and_then(|t| t.as_str()).map(str::to_string))
        .collect();
    out.extend(EXTRA.iter().map(|s| s.to_string()));
    out.retain(|t| !dir_texts.text_cut(t).unwrap().1);
    out
}

fn vectors(runner: &ModelRunner, toks: &[tl_core::encoder_text::Tokens]) -> Vec<Vec<f32>> {
    let inputs: Vec<EncodeInput<'_>> = toks.iter().map(|t| t.input()).collect();
    runner.encode(&inputs, false).unwrap().into_iter().map(|e| e.vector.unwrap()).collect()
}

#[test]
fn tiny_nomic_bert_f32_gguf_equals_the_directory_bit_for_bit() {
    let (dir, dir_texts) = load_encoder(&fixture("tiny-nomic-bert"), 2);
    let (gguf, gguf_texts) = load_encoder(&fixture("gguf/tiny-nomic-bert.F32.gguf"), 2);
    let gi = gguf.encoder_info().unwrap();
    // The converter writes nomic-embed-text's trained 2048 positions as the context.
    assert_eq!((gi.vector, gi.normalized, gi.max_tokens, gi.type_vocab), (Some(36), true, 2048, 2));
    let all = texts(&dir_texts);
    assert!(all.len() >= 8, "{} texts", all.len());
    for t in &all {
        assert_eq!(gguf_texts.text(t).unwrap(), dir_texts.text(t).unwrap(), "{t:?}");
    }
    let strs: Vec<&str> = all.iter().map(String::as_str).collect();
    let (d, g) = (embed(&dir, &dir_texts, &strs).unwrap(), embed(&gguf, &gguf_texts, &strs).unwrap());
    for (i, (d, g)) in d.iter().zip(&g).enumerate() {
        assert_eq!(bits(d), bits(g), "text {i} ({:?})", all[i]);
    }
}

#[test]
fn tiny_nomic_bert_f16_gguf_is_within_tolerance_of_the_directory() {
    let (dir, texts_) = load_encoder(&fixture("tiny-nomic-bert"), 2);
    let (gguf, _) = load_encoder(&fixture("gguf/tiny-nomic-bert.F16.gguf"), 2);
    let toks: Vec<_> = texts(&texts_).iter().map(|t| texts_.text(t).unwrap()).collect();
    tl_testkit::encoders::check_f16_vectors(&vectors(&dir, &toks), &vectors(&gguf, &toks), "tiny-nomic-bert F16 GGUF");
}

#[test]
fn a_missing_tensor_is_named() {
    let bytes = std::fs::read(fixture("gguf/tiny-nomic-bert.F32.gguf")).unwrap();
    let err = gguf_error(&gguf_respelled(bytes, "blk.1.ffn_gate.weight", "blk.1.ffn_GATE.weight"));
    assert!(err.contains("bad.gguf") && err.contains("\"blk.1.ffn_gate.weight\""), "{err}");
}
