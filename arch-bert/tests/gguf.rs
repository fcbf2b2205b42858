//! BERT GGUF files as llama.cpp's convert_hf_to_gguf.py writes them
//! (scripts/fixtures/make_encoder_ggufs.sh) against the directories they were made from:
//! the F32 file gives the directory's vectors bit for bit and its tokenizer the
//! directory's tokenizer.json ids; the F16 file stays within a stated tolerance; a
//! cross-encoder file and damaged files are refused with errors naming the file and the
//! tensor or key. The real all-MiniLM-L6-v2 F32 GGUF (scripts/bench_embeddings.sh makes
//! it) is checked the same way when it is on disk.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tl_arch_bert::{embed, load, Texts, Tokens};
use tl_core::{EncodeInput, EngineConfig, ModelRunner};
use tl_kv as _;
use tl_testkit::{gguf_error, gguf_respelled, gguf_with_u32_meta};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn engine() -> EngineConfig {
    EngineConfig { threads: 2, ..Default::default() }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn vectors(runner: &ModelRunner, toks: &[Tokens]) -> Vec<Vec<f32>> {
    let inputs: Vec<EncodeInput<'_>> = toks.iter().map(Tokens::input).collect();
    runner.encode(&inputs, false).unwrap().into_iter().map(|e| e.vector.unwrap()).collect()
}

/// Texts that exercise the WordPiece rewrite (none with tiny-bert's "find", id 143, past its
/// 143 embedding rows): continuation pieces, accents (stripped by
/// the lowercasing normaliser), punctuation, unknown characters, CJK and emoji.
const EXTRA: [&str; 6] = [
    "The WATER was hot, and they said: first the word!",
    "Café naïve ÉCOLE résumé",
    "零 一 二 — σ ψ ω 😀 ok?",
    "walking talked sounds quickly thing's",
    "  spaces\tand\nnewlines  ",
    "[CLS] a [SEP] b [MASK]",
];

fn reference_texts() -> (Vec<String>, Vec<(String, String)>) {
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("tiny-bert/reference.json")).unwrap()).unwrap();
    let (mut texts, mut pairs) = (Vec::new(), Vec::new());
    for c in json["cases"].as_array().unwrap() {
        if let Some(t) = c["text"].as_str() {
            texts.push(t.to_string());
        } else {
            let p = c["pair"].as_array().unwrap();
            pairs.push((p[0].as_str().unwrap().to_string(), p[1].as_str().unwrap().to_string()));
        }
    }
    texts.extend(EXTRA.iter().map(|s| s.to_string()));
    (texts, pairs)
}

#[test]
fn tiny_bert_gguf_tokenizes_as_tokenizer_json() {
    let (_, dir_texts) = load(&fixture("tiny-bert"), &engine()).unwrap();
    let (_, gguf_texts) = load(&fixture("gguf/tiny-bert.F32.gguf"), &engine()).unwrap();
    // The file has no sentence_bert_config.json: it cuts at its context length.
    assert_eq!((dir_texts.max_seq_length(), gguf_texts.max_seq_length()), (24, 40));
    let (texts, pairs) = reference_texts();
    let mut checked = 0;
    for t in &texts {
        let (want, cut) = dir_texts.text_cut(t).unwrap();
        if !cut {
            assert_eq!(gguf_texts.text(t).unwrap(), want, "{t:?}");
            checked += 1;
        }
    }
    for (a, b) in &pairs {
        assert_eq!(gguf_texts.pair(a, b).unwrap(), dir_texts.pair(a, b).unwrap(), "{a:?} / {b:?}");
    }
    assert!(checked >= 14 && !pairs.is_empty(), "{checked} texts");
}

#[test]
fn tiny_bert_f32_gguf_equals_the_directory_bit_for_bit() {
    let (dir, dir_texts) = load(&fixture("tiny-bert"), &engine()).unwrap();
    let (gguf, gguf_texts) = load(&fixture("gguf/tiny-bert.F32.gguf"), &engine()).unwrap();
    let (di, gi) = (dir.encoder_info().unwrap(), gguf.encoder_info().unwrap());
    assert_eq!((gi.vector, gi.normalized, gi.max_tokens, gi.type_vocab), (Some(36), true, 40, 2));
    assert_eq!((di.vector, di.normalized), (gi.vector, gi.normalized));
    let (texts, pairs) = reference_texts();
    // The same ids (a pair's type ids too) through both: the same bits.
    let mut toks: Vec<Tokens> = texts.iter().map(|t| dir_texts.text(t).unwrap()).collect();
    toks.extend(pairs.iter().map(|(a, b)| dir_texts.pair(a, b).unwrap()));
    for (i, (d, g)) in vectors(&dir, &toks).iter().zip(vectors(&gguf, &toks)).enumerate() {
        assert_eq!(bits(d), bits(&g), "input {i}");
    }
    // And from text, each through its own tokenizer (texts the directory does not cut).
    let short: Vec<&str> = texts.iter().map(String::as_str).filter(|t| !dir_texts.text_cut(t).unwrap().1).collect();
    let (d, g) = (embed(&dir, &dir_texts, &short).unwrap(), embed(&gguf, &gguf_texts, &short).unwrap());
    assert_eq!(d.iter().map(|v| bits(v)).collect::<Vec<_>>(), g.iter().map(|v| bits(v)).collect::<Vec<_>>());
}

#[test]
fn tiny_bert_f16_gguf_is_within_tolerance_of_the_directory() {
    let (dir, texts) = load(&fixture("tiny-bert"), &engine()).unwrap();
    let (gguf, _) = load(&fixture("gguf/tiny-bert.F16.gguf"), &engine()).unwrap();
    let (all, _) = reference_texts();
    let toks: Vec<Tokens> = all.iter().map(|t| texts.text(t).unwrap()).collect();
    tl_testkit::encoders::check_f16_vectors(&vectors(&dir, &toks), &vectors(&gguf, &toks), "tiny-bert F16 GGUF");
}

#[test]
fn a_gguf_cross_encoder_is_refused_naming_its_classifier() {
    let err = tl_testkit::load_error(&fixture("gguf/tiny-bert-ce.F32.gguf"));
    assert!(err.contains("tiny-bert-ce.F32.gguf") && err.contains("cls.output.weight"), "{err}");
    assert!(err.contains("pooler"), "{err}");
}

fn tiny() -> Vec<u8> {
    std::fs::read(fixture("gguf/tiny-bert.F32.gguf")).unwrap()
}

/// Where `tensor`'s dimensions sit in the header: (offset of the first u64, count).
fn dims_at(bytes: &[u8], tensor: &str) -> usize {
    let mut k = (tensor.len() as u64).to_le_bytes().to_vec();
    k.extend_from_slice(tensor.as_bytes());
    let at = bytes.windows(k.len()).position(|w| w == k).expect(tensor) + k.len();
    assert_eq!(bytes[at..at + 4], 2u32.to_le_bytes(), "{tensor} is 2-D");
    at + 4
}

#[test]
fn a_missing_tensor_is_named() {
    let err = gguf_error(&gguf_respelled(tiny(), "blk.1.attn_q.weight", "blk.1.attn_Q.weight"));
    assert!(err.contains("bad.gguf") && err.contains("\"blk.1.attn_q.weight\""), "{err}");
}

#[test]
fn a_wrong_shape_is_named() {
    // ffn_up stored [52, 36] (ggml's order: 36 columns by 52 rows) is respelled [36, 52]:
    // the same bytes, the shape of a transposed matrix.
    let mut bytes = tiny();
    let at = dims_at(&bytes, "blk.0.ffn_up.weight");
    let (a, b) = (bytes[at..at + 8].to_vec(), bytes[at + 8..at + 16].to_vec());
    bytes[at..at + 8].copy_from_slice(&b);
    bytes[at + 8..at + 16].copy_from_slice(&a);
    let err = gguf_error(&bytes);
    let named = err.contains("encoder.layer.0.intermediate.dense.weight") && err.contains("blk.0.ffn_up.weight");
    assert!(err.contains("bad.gguf") && named && err.contains("shape [36, 52], expected [52, 36]"), "{err}");
}

#[test]
fn a_missing_vocabulary_key_is_named() {
    for (key, respelled) in [
        ("tokenizer.ggml.tokens", "tokenizer.ggml.tokenZ"),
        ("tokenizer.ggml.token_type", "tokenizer.ggml.token_typ_"),
        ("tokenizer.ggml.unknown_token_id", "tokenizer.ggml.unknown_token_iD"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.gguf");
        std::fs::write(&path, gguf_respelled(tiny(), key, respelled)).unwrap();
        let err = match load(&path, &engine()) {
            Ok(_) => panic!("{key}: loaded"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("bad.gguf") && err.contains(&format!("{key}: missing")), "{key}: {err}");
    }
}

#[test]
fn pooling_types_are_read_and_rank_is_refused() {
    let pooled = |p: u32| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.gguf");
        std::fs::write(&path, gguf_with_u32_meta(tiny(), "bert.pooling_type", p)).unwrap();
        let r = ModelRunner::load(&path, &engine()).map(|r| r.encoder_info().unwrap().vector);
        r.map_err(|e| e.to_string())
    };
    assert_eq!(pooled(0).unwrap(), None, "none: no vector");
    for p in [1, 2, 3] {
        assert_eq!(pooled(p).unwrap(), Some(36), "pooling {p}");
    }
    for p in [4, 9] {
        let err = pooled(p).unwrap_err();
        assert!(err.contains("p.gguf") && err.contains("bert.pooling_type"), "{p}: {err}");
    }
    // cls pools the first row: the same bits as the directory's own cls reference after
    // normalising, checked through the first text.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cls.gguf");
    std::fs::write(&path, gguf_with_u32_meta(tiny(), "bert.pooling_type", 2)).unwrap();
    let (runner, texts) = load(&path, &engine()).unwrap();
    let v = embed(&runner, &texts, &["the water was hot"]).unwrap().remove(0);
    let h = runner.encode(&[texts.text("the water was hot").unwrap().input()], true).unwrap().remove(0);
    let first = &h.hidden.unwrap()[..36];
    let norm = first.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt().max(1e-12);
    let want: Vec<f32> = first.iter().map(|&x| (x as f64 / norm) as f32).collect();
    assert_eq!(bits(&v), bits(&want));
}

// ---- the real all-MiniLM-L6-v2 ----

/// The F32 GGUF scripts/bench_embeddings.sh makes, when on disk (else None, loudly).
fn minilm_gguf() -> Option<PathBuf> {
    let cache = std::env::var_os("TL_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/tl")))?;
    let path = std::env::var_os("TL_MINILM_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache.join("minilm-bench/all-MiniLM-L6-v2.F32.gguf"));
    if path.is_file() {
        return Some(path);
    }
    eprintln!("\nSKIPPED: no {} (scripts/bench_embeddings.sh makes it)\n", path.display());
    None
}

fn minilm_dir() -> Option<PathBuf> {
    let cfg = tl_hub::HubConfig { progress: false, ..tl_hub::HubConfig::from_env() };
    match tl_hub::pull(&cfg, "all-minilm:l6-v2") {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("\nSKIPPED: all-minilm:l6-v2 could not be pulled ({e})\n");
            None
        }
    }
}

#[test]
fn all_minilm_l6_v2_f32_gguf_equals_its_directory() {
    let (Some(gguf_path), Some(dir_path)) = (minilm_gguf(), minilm_dir()) else { return };
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("minilm/sentences.json")).unwrap()).unwrap();
    let sentences: Vec<&str> = json["sentences"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let (dir, dir_texts) = load(&dir_path, &engine()).unwrap();
    let (gguf, gguf_texts): (ModelRunner, Texts) = load(&gguf_path, &engine()).unwrap();
    assert_eq!((dir_texts.max_seq_length(), gguf_texts.max_seq_length()), (256, 512));
    // Every sentence's ids: equal, or (past 256 tokens) the directory's cut of the file's.
    let mut short = Vec::new();
    for (i, s) in sentences.iter().enumerate() {
        let (want, cut) = dir_texts.text_cut(s).unwrap();
        let got = gguf_texts.text(s).unwrap();
        if cut {
            assert_eq!(got.ids[..255], want.ids[..255], "sentence {i}");
        } else {
            assert_eq!(got, want, "sentence {i} ({s:?}) tokenizes differently");
            short.push(*s);
        }
    }
    for t in EXTRA {
        assert_eq!(gguf_texts.text(t).unwrap(), dir_texts.text(t).unwrap(), "{t:?}");
    }
    assert!(short.len() > 250, "{} sentences under 256 tokens", short.len());
    let mut n = 0;
    for chunk in short.chunks(32) {
        let (d, g) = (embed(&dir, &dir_texts, chunk).unwrap(), embed(&gguf, &gguf_texts, chunk).unwrap());
        for (j, (d, g)) in d.iter().zip(&g).enumerate() {
            assert_eq!(bits(d), bits(g), "sentence {:?}", chunk[j]);
            n += 1;
        }
    }
    eprintln!("all-MiniLM-L6-v2 F32 GGUF: {n} sentences, the directory's bits");
}
