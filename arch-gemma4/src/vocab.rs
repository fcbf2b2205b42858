//! Gemma 4's vocabulary in GGUF files (`tokenizer.ggml.model = "gemma4"`, as llama.cpp's
//! converter writes it: conversion/gemma.py's `Gemma4Model.set_vocab`), rebuilt as the
//! tokenizer.json transformers' `GemmaTokenizer` uses (models/gemma/tokenization_gemma.py).
//!
//! Gemma 4's tokenizer is a BPE over raw UTF-8 with SentencePiece's spelling of spaces and
//! bytes: the normalizer writes every space as "▁" (no prefix space), the merges run over
//! the whole text (the pre-tokenizer splits at spaces, of which none are left), a
//! character no piece covers becomes its `<0xXX>` byte pieces (`byte_fallback`), and the
//! decoder undoes both. The file stores what varies: the pieces (`tokenizer.ggml.tokens`),
//! the merges in rank order (`tokenizer.ggml.merges`), llama.cpp's token types (control
//! tokens special, user-defined ones plain added tokens), `<unk>`'s id and the BOS id.
//!
//! Two choices follow llama.cpp rather than the checkpoint's own tokenizer:
//! - BOS is always added, whatever `tokenizer.ggml.add_bos_token` says (llama-vocab.cpp
//!   overrides a `false` there for Gemma 4: files were written so while the model needs it;
//!   `GemmaTokenizer` adds it too).
//! - The seven chat tokens the converter writes USER_DEFINED (`<|channel>`, `<channel|>`,
//!   `<|tool_call>`, `<tool_call|>`, `<|tool_response>`, `<tool_response|>`, `<|"|>`) stay
//!   plain added tokens: matched whole in text as before, but decoded to their text (the
//!   converter marks them so that a chat parser sees them), where the checkpoint's
//!   tokenizer.json, whose special tokens they are, drops them.
//!
//! llama.cpp itself also splits the text at newline runs before merging; Hugging Face does
//! not, and tl follows Hugging Face (tests/fixtures/README.md says where the two differ).

use serde_json::{json, Value};
use tl_core::tokenizer::{gguf_bpe_parts, GgufBpeParts};
use tl_core::{Gguf, GgufVocab, WeightError};

inventory::submit!(GgufVocab { model: "gemma4", tokenizer_json });

/// The tokenizer.json of a `"gemma4"` vocabulary (see the module docs). `Err` names the
/// metadata key (the caller adds the file's name).
fn tokenizer_json(g: &Gguf) -> Result<Value, String> {
    let GgufBpeParts { tokens, vocab, added, merges } = gguf_bpe_parts(g)?;
    let e = |e: WeightError| e.to_string();
    let unk_key = "tokenizer.ggml.unknown_token_id";
    let unk = match g.uint(unk_key).map_err(e)? {
        Some(id) => Some(
            *tokens
                .get(id as usize)
                .ok_or_else(|| format!("metadata {unk_key}: id {id} is past the {} tokens", tokens.len()))?,
        ),
        // GemmaTokenizer's own unknown token, when the file does not name one.
        None => tokens.iter().copied().find(|&t| t == "<unk>"),
    };
    let bos = tl_core::gguf_vocab::bos_template(g, &tokens).map_err(|why| format!("metadata {why}"))?;
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": false},
        "post_processor": bos,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
        ]},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": unk, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
            "vocab": vocab, "merges": merges,
        },
    }))
}
