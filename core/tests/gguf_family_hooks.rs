//! A GGUF family's own tokenizer conversion and default chat template
//! (`GgufArch::tokenizer_json`, `GgufArch::default_chat_template`), registered in this
//! file, and the SentencePiece options they use (`SpmOptions`): merges ranked by
//! vocabulary position, space runs respelled.

mod gguf_writer;

use gguf_writer::Meta;
use serde_json::Value;
use tl_core::gguf_vocab::{sentencepiece_tokenizer_json, sentencepiece_tokenizer_json_with, MergeRank, SpmOptions};
use tl_core::{ChatTemplate, Gguf, GgufArch, GgufRegistration, Message, TensorInfo, TensorMap, Tokenizer, WeightError};

const TEMPLATE: &str = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}";

struct Hooked;

impl GgufArch for Hooked {
    fn config_json(&self, _file: &Gguf) -> Result<Value, WeightError> {
        Ok(serde_json::json!({"tl_arch": "none", "tl_tokenizer": "hf"}))
    }
    fn tensor(&self, _file: &Gguf, name: &str, _info: &TensorInfo) -> Result<TensorMap, WeightError> {
        Ok(TensorMap { name: name.into(), rows: None })
    }
    fn tokenizer_json(&self, file: &Gguf) -> Option<Result<Value, String>> {
        Some(sentencepiece_tokenizer_json_with(
            file,
            SpmOptions { merge_rank: MergeRank::Position, respell_space_runs: true },
        ))
    }
    fn default_chat_template(&self, _file: &Gguf) -> Option<&'static str> {
        Some(TEMPLATE)
    }
}

inventory::submit!(GgufRegistration { architecture: "hooked-test", make: || Box::new(Hooked) });

/// A SentencePiece vocabulary whose scores disagree with its order: "bc" scores above
/// "ab" but comes after it. Piece 8 is a user-defined space run spelled with ASCII
/// spaces, as llama.cpp writes them, and scored -1000 as llama.cpp scores added pieces.
fn vocab_file(dir: &std::path::Path, arch: &'static str, template: Option<&'static str>) -> Gguf {
    let tokens = ["<unk>", "<s>", "a", "b", "c", "\u{2581}", "ab", "bc", "  ", "\u{2581}b"];
    let scores = [0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -20.0, -10.0, -1000.0, -5.0];
    let types = [2, 3, 1, 1, 1, 1, 1, 1, 4, 1];
    let mut meta = vec![
        ("general.architecture", Meta::Str(arch)),
        ("tokenizer.ggml.model", Meta::Str("llama")),
        ("tokenizer.ggml.tokens", Meta::Strs(tokens.iter().map(|t| t.to_string()).collect())),
        ("tokenizer.ggml.scores", Meta::F32s(scores.to_vec())),
        ("tokenizer.ggml.token_type", Meta::I32s(types.to_vec())),
        ("tokenizer.ggml.bos_token_id", Meta::U32(1)),
        ("tokenizer.ggml.add_bos_token", Meta::Bool(false)),
        ("tokenizer.ggml.add_space_prefix", Meta::Bool(false)),
    ];
    if let Some(t) = template {
        meta.push(("tokenizer.chat_template", Meta::Str(t)));
    }
    let path = dir.join(format!("{arch}.gguf"));
    gguf_writer::write(&path, &meta, &[]);
    Gguf::open(&path).unwrap()
}

fn merges(json: &Value) -> Vec<String> {
    json["model"]["merges"].as_array().unwrap().iter().map(|m| format!("{} {}", m[0], m[1])).collect()
}

#[test]
fn position_rank_orders_merges_by_the_merged_piece_and_respells_space_runs() {
    let dir = tempfile::tempdir().unwrap();
    // An architecture nobody registered: the generic conversion, by score.
    let g = vocab_file(dir.path(), "plain-test", None);
    let by_score = sentencepiece_tokenizer_json(&g).unwrap();
    let opts = SpmOptions { merge_rank: MergeRank::Position, respell_space_runs: true };
    let by_position = sentencepiece_tokenizer_json_with(&g, opts).unwrap();
    let m = |pairs: &[(&str, &str)]| pairs.iter().map(|(l, r)| format!("{l:?} {r:?}")).collect::<Vec<_>>();
    // By score: "▁b" (-5), "bc" (-10), "ab" (-20); the space run, spelled with spaces,
    // has no merge. By position: "ab" (6), "bc" (7), the respelled run "▁▁" (8), "▁b" (9).
    assert_eq!(merges(&by_score), m(&[("\u{2581}", "b"), ("b", "c"), ("a", "b")]));
    assert_eq!(merges(&by_position), m(&[("a", "b"), ("b", "c"), ("\u{2581}", "\u{2581}"), ("\u{2581}", "b")]));
    // Respelled, the run is the ordinary piece "▁▁" (merged from "▁" "▁" at its place),
    // no longer an added token matched on the raw text.
    let added: Vec<&str> =
        by_position["added_tokens"].as_array().unwrap().iter().map(|t| t["content"].as_str().unwrap()).collect();
    assert!(!added.contains(&"  "), "a respelled space run stays an added token: {added:?}");
    assert_eq!(by_position["model"]["vocab"]["\u{2581}\u{2581}"], 8);
    assert!(by_score["added_tokens"].as_array().unwrap().iter().any(|t| t["content"] == "  "));
    assert_eq!(by_score["model"]["vocab"]["  "], 8);
}

#[test]
fn the_family_hook_converts_the_vocabulary_and_supplies_the_template() {
    let dir = tempfile::tempdir().unwrap();
    let hooked = vocab_file(dir.path(), "hooked-test", None);
    let plain = vocab_file(dir.path(), "plain-test", None);
    // "abc": by position "ab" merges first, by score "bc".
    let (a, b, c, ab, bc, run) = (2, 3, 4, 6, 7, 8);
    let tok = Tokenizer::from_gguf(&hooked).unwrap();
    assert_eq!(tok.encode("abc").unwrap(), vec![ab, c]);
    // "▁▁" (piece 8) merges before "▁b" (piece 9); it decodes back to two spaces.
    assert_eq!(tok.encode("a  b").unwrap(), vec![a, run, b]);
    assert_eq!(tok.decode(&[a, run, b]).unwrap(), "a  b");
    let generic = tok_from(&plain);
    assert_eq!(generic.encode("abc").unwrap(), vec![a, bc]);
    // The default template renders for a file without one; a file's own template wins.
    let t = ChatTemplate::from_gguf(&hooked).unwrap().expect("the family's default template");
    assert_eq!(t.render(&[Message::new("user", "hi")], false).unwrap(), "[user] hi\n");
    assert!(ChatTemplate::from_gguf(&plain).unwrap().is_none(), "no template and no family default");
    let own = vocab_file(dir.path(), "hooked-test", Some("own {{ messages[0]['content'] }}"));
    let t = ChatTemplate::from_gguf(&own).unwrap().unwrap();
    assert_eq!(t.render(&[Message::new("user", "hi")], false).unwrap(), "own hi");
}

fn tok_from(g: &Gguf) -> Tokenizer {
    // "llama" vocabularies are registered by tl-arch-llama, which core's tests do not link:
    // build the generic conversion directly.
    let json = sentencepiece_tokenizer_json(g).unwrap();
    Tokenizer::Hf(Box::new(tl_core::tokenizer::HfTokenizer::from_json(json, std::path::Path::new("plain")).unwrap()))
}
