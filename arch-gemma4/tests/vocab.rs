//! Gemma 4's own vocabulary in a GGUF file (`tokenizer.ggml.model = "gemma4"`):
//! tests/fixtures/tiny-gemma4-bpe holds a tokenizer of GemmaTokenizer's structure
//! (scripts/fixtures/make_gemma4_vocab.py) and model.gguf, written from it by llama.cpp's own
//! converter with its real `Gemma4Model.set_vocab`. The tokenizer tl rebuilds from the file
//! gives Hugging Face's ids for every reference text (special tokens written in the text,
//! byte fallback, newline and space runs, BOS added) and decodes them as Hugging Face
//! does; the file fed text gives the directory's logits and greedy run bit for bit; a file
//! without merges, with a broken merge or with ids past its tokens is refused, naming the key.

use std::path::Path;

use serde_json::Value;
use tl_arch_gemma4 as _;
use tl_core::tokenizer::HfTokenizer;
use tl_core::{Gguf, Tokenizer, Weights};
use tl_testkit::encoders::{cases, u32s};
use tl_testkit::{bits, gguf_respelled, gguf_with_u32_meta, greedy, load_path, run_in_steps};

tl_testkit::fixtures!();

const NAME: &str = "tiny-gemma4-bpe";

fn gguf_path() -> std::path::PathBuf {
    fixture(NAME).join("model.gguf")
}

fn gguf_tokenizer(path: &Path) -> Result<Tokenizer, String> {
    let g = Gguf::open(path).map_err(|e| e.to_string())?;
    Tokenizer::from_gguf(&g).map_err(|e| e.to_string())
}

fn dir_tokenizer() -> Tokenizer {
    let path = fixture(NAME).join("tokenizer.json");
    Tokenizer::Hf(Box::new(HfTokenizer::from_file(&path).expect("tokenizer.json")))
}

fn text(c: &Value, k: &str) -> String {
    c[k].as_str().unwrap_or_else(|| panic!("{k} in {c}")).to_string()
}

#[test]
fn the_gemma4_vocabulary_gives_hugging_faces_ids() {
    let gguf = gguf_tokenizer(&gguf_path()).expect("the file's tokenizer");
    let dir = dir_tokenizer();
    let cases = cases(&fixture(NAME));
    assert!(cases.len() >= 30, "{} cases", cases.len());
    let bos = gguf.token_to_id("<bos>").expect("<bos>");
    for c in &cases {
        let (t, want) = (text(c, "text"), u32s(&c["ids"]));
        // As the binaries encode a prompt: the tokenizer's special tokens (BOS) added.
        assert_eq!(gguf.encode_with_special(&t).expect("encode"), want, "{t:?}");
        assert_eq!(dir.encode_with_special(&t).expect("encode"), want, "{t:?}: the directory's tokenizer.json");
        assert_eq!(gguf.encode(&t).expect("encode"), want[1..], "{t:?} without BOS");
        assert_eq!(want[0], bos, "{t:?}");
    }
}

#[test]
fn the_gemma4_vocabulary_decodes_as_hugging_face_does() {
    let gguf = gguf_tokenizer(&gguf_path()).expect("the file's tokenizer");
    let dir = dir_tokenizer();
    // The seven chat tokens llama.cpp's converter writes USER_DEFINED are rendered from the
    // file (Hugging Face's decode of them as plain added tokens), dropped from the
    // directory (where they are special); every other text decodes the same from both.
    let mut rendered = 0;
    for c in cases(&fixture(NAME)) {
        let (t, ids) = (text(&c, "text"), u32s(&c["ids"]));
        let (hf, visible) = (text(&c, "decoded"), text(&c, "decoded_rendering_visible"));
        assert_eq!(gguf.decode(&ids).expect("decode"), visible, "{t:?}");
        assert_eq!(dir.decode(&ids).expect("decode"), hf, "{t:?}: the directory's tokenizer.json");
        rendered += usize::from(hf != visible);
    }
    assert!(rendered >= 3, "only {rendered} texts with a rendered chat token");
}

#[test]
fn the_gemma4_gguf_fed_text_equals_the_directory_bit_for_bit() {
    let mut st = load_path(&fixture(NAME), 0, Weights::Native);
    let mut g = load_path(&gguf_path(), 0, Weights::Native);
    assert_eq!(g.config().json()["tl_tokenizer"], "hf", "the file's vocabulary");
    // Each runner's own tokenizer, as the binaries load it.
    let st_tok = Tokenizer::load(st.config()).expect("the directory's tokenizer");
    let g_tok = Tokenizer::load(g.config()).expect("the file's tokenizer");
    let mut longest = 0;
    for c in cases(&fixture(NAME)) {
        let t = text(&c, "text");
        let ids = g_tok.encode_with_special(&t).expect("encode");
        assert_eq!(st_tok.encode_with_special(&t).expect("encode"), ids, "{t:?}");
        longest = longest.max(ids.len());
        let (a, b) = (run_in_steps(&mut g, &ids, &[]), run_in_steps(&mut st, &ids, &[]));
        assert_eq!(bits(&a), bits(&b), "{t:?}: last logits");
        assert_eq!(greedy(&mut g, &ids, 4), greedy(&mut st, &ids, 4), "{t:?}: greedy run");
    }
    // Past the 8-token sliding window, so the local layers' masks matter.
    assert!(longest > 16, "{longest}");
}

/// The error reading the vocabulary of `bytes` as a GGUF file.
fn vocab_error(bytes: Vec<u8>) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.gguf");
    std::fs::write(&path, bytes).expect("write");
    match gguf_tokenizer(&path) {
        Ok(_) => panic!("the vocabulary was read"),
        Err(e) => e,
    }
}

#[test]
fn a_gemma4_vocabulary_without_merges_or_with_bad_ids_is_refused_naming_the_key() {
    let file = || std::fs::read(gguf_path()).expect("read");
    for key in ["tokenizer.ggml.merges", "tokenizer.ggml.tokens", "tokenizer.ggml.bos_token_id"] {
        let respelled = format!("{}_", &key[..key.len() - 1]);
        let err = vocab_error(gguf_respelled(file(), key, &respelled));
        assert!(err.contains("bad.gguf") && err.contains(&format!("{key}: missing")), "{key}: {err}");
    }
    // A merge that is not a pair: the first, "▁ ▁" (stored length-prefixed), without its space.
    let mut bytes = file();
    let first: Vec<u8> = [&7u64.to_le_bytes()[..], "\u{2581} \u{2581}".as_bytes()].concat();
    let at = bytes.windows(first.len()).position(|w| w == first).expect("the first merge") + 8;
    bytes[at + 3] = b'x';
    let err = vocab_error(bytes);
    assert!(err.contains("bad.gguf") && err.contains("tokenizer.ggml.merges: \"▁x▁\" is not a pair"), "{err}");
    for key in ["tokenizer.ggml.bos_token_id", "tokenizer.ggml.unknown_token_id"] {
        let err = vocab_error(gguf_with_u32_meta(file(), key, 9999));
        assert!(err.contains("bad.gguf") && err.contains(&format!("{key}: id 9999 is past the 512 tokens")), "{err}");
    }
}

#[test]
fn a_gemma4_file_always_adds_bos_and_falls_back_to_unk_by_name() {
    // llama.cpp adds BOS to a Gemma 4 prompt even where the file says not to.
    let off = std::fs::read(gguf_path()).expect("read");
    let key = "tokenizer.ggml.add_bos_token";
    let mut k = (key.len() as u64).to_le_bytes().to_vec();
    k.extend_from_slice(key.as_bytes());
    let at = off.windows(k.len()).position(|w| w == k).expect(key) + k.len();
    assert_eq!(off[at..at + 5], [7, 0, 0, 0, 1], "{key}: a bool (GGUF type 7), true");
    let mut off = off;
    off[at + 4] = 0;
    // Without unknown_token_id, `<unk>` is found by name; the ids do not move.
    let unnamed = gguf_respelled(off, "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.unknown_token_iD");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("edited.gguf");
    std::fs::write(&path, unnamed).expect("write");
    let edited = gguf_tokenizer(&path).expect("the edited file's tokenizer");
    let Tokenizer::Hf(hf) = &edited else { panic!("not a tokenizer.json") };
    assert_eq!(hf.json()["model"]["unk_token"], "<unk>");
    for c in cases(&fixture(NAME)) {
        let t = text(&c, "text");
        assert_eq!(edited.encode_with_special(&t).expect("encode"), u32s(&c["ids"]), "{t:?}");
    }
}
