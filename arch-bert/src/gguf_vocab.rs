//! WordPiece vocabularies in GGUF files (`tokenizer.ggml.model = "bert"`), rebuilt as the
//! tokenizer.json a BERT directory has, so a GGUF encoder gives the directory's token ids.
//!
//! llama.cpp's converter (`BertModel.set_vocab`) rewrites every piece for its own
//! tokenizer: a control token (`[CLS]`, `[PAD]`, ...) is kept as it is, a continuation
//! piece loses its `##` (`##ing` → `ing`), and every other piece gains a `▁` word-start
//! prefix (`the` → `▁the`). That is undone here, exactly: a control token stays, a piece
//! starting with `▁` loses it, any other piece gets `##` back. The converter fills holes in
//! the ids with `[PAD{id}]` (type unused), which become unreachable `[PAD{id}]` pieces (the
//! pre-tokenizer splits `[` off). What the file does not record is BERT's default:
//! `BertNormalizer` (clean text, Chinese characters split, accents stripped when
//! lowercasing), lowercasing from `tokenizer.ggml.normalizer.lowercase` (absent: true,
//! what llama.cpp's WordPiece tokenizer does), 100 characters at most per word, and the
//! `[CLS] $A [SEP]` / `[CLS] $A [SEP] $B:1 [SEP]:1` template with the file's
//! `bos_token_id` (cls) and `seperator_token_id` (sep, else `eos_token_id`)
//! ([`crate::gguf::cls_sep_template`]).

use serde_json::{json, Map, Value};
use tl_core::Gguf;

use crate::gguf::{cls_sep_template, special_token};

/// llama.cpp's token types: 3 control (special), 4 user-defined.
const CONTROL: i64 = 3;
const USER_DEFINED: i64 = 4;

/// The piece the directory's vocabulary had, from the converter's rewrite of it.
fn original(piece: &str, ty: i64) -> String {
    if ty == CONTROL {
        piece.to_string()
    } else if let Some(word) = piece.strip_prefix('\u{2581}') {
        word.to_string()
    } else {
        format!("##{piece}")
    }
}

/// The tokenizer.json of a GGUF file's WordPiece vocabulary (`tokenizer.ggml.model =
/// "bert"`); `Err` names the metadata key that is missing or wrong.
pub fn wordpiece_tokenizer_json(g: &Gguf) -> Result<Value, String> {
    let tokens_key = "tokenizer.ggml.tokens";
    let tokens = g.strings(tokens_key).map_err(|e| e.to_string())?.ok_or(format!("metadata {tokens_key}: missing"))?;
    let types_key = "tokenizer.ggml.token_type";
    let types = g.ints(types_key).map_err(|e| e.to_string())?.ok_or(format!("metadata {types_key}: missing"))?;
    if types.len() != tokens.len() {
        return Err(format!("metadata {types_key}: {} entries for {} tokens", types.len(), tokens.len()));
    }
    let pieces: Vec<String> = tokens.iter().zip(&types).map(|(t, &ty)| original(t, ty)).collect();
    let mut vocab = Map::with_capacity(pieces.len());
    let mut added = Vec::new();
    for (id, (piece, &ty)) in pieces.iter().zip(&types).enumerate() {
        if vocab.insert(piece.clone(), json!(id)).is_some() {
            return Err(format!(
                "metadata {tokens_key}: token {id} ({:?}) is {piece:?} again once rewritten",
                tokens[id]
            ));
        }
        if ty == CONTROL || ty == USER_DEFINED {
            added.push(json!({
                "id": id, "content": piece, "single_word": false, "lstrip": false, "rstrip": false,
                "normalized": ty == USER_DEFINED, "special": ty == CONTROL,
            }));
        }
    }
    let post_processor = cls_sep_template(g, &pieces)?;
    let unk_key = "tokenizer.ggml.unknown_token_id";
    let (_, unk) = special_token(g, unk_key, &pieces)?.ok_or_else(|| format!("metadata {unk_key}: missing"))?;
    let lowercase = match g.value("tokenizer.ggml.normalizer.lowercase") {
        None => true,
        Some(v) => {
            v.to_bool().map_err(|_| "metadata tokenizer.ggml.normalizer.lowercase: expected a bool".to_string())?
        }
    };
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {
            "type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
            "strip_accents": null, "lowercase": lowercase,
        },
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": post_processor,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {
            "type": "WordPiece", "unk_token": unk, "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100, "vocab": vocab,
        },
    }))
}

inventory::submit!(tl_core::GgufVocab { model: "bert", tokenizer_json: wordpiece_tokenizer_json });
