//! SentencePiece vocabularies in GGUF files, as the tokenizer.json Hugging Face writes for
//! them, and the BOS rule every GGUF vocabulary shares.
//!
//! A SentencePiece BPE vocabulary (`tokenizer.ggml.model` of the families that use one;
//! their crates register [`sentencepiece_tokenizer_json`] for it) stores pieces, scores
//! and token types, but no merges. transformers' converter (`SpmConverter`, legacy
//! mode) turns such a model into a byte-fallback BPE: "▁" for spaces (and one prepended),
//! merges derived from the vocabulary, `<0xNN>` pieces for bytes no piece covers. This
//! module builds the same: every split of a piece into two pieces that are both in the
//! vocabulary is a merge, ranked by the whole piece's score, highest first (ties: the
//! longer left part first, then the longer right part, then vocabulary order, as
//! transformers' `generate_merges` sorts them). A family whose vocabulary needs more
//! (merges in vocabulary order, space runs respelled) registers a tokenizer through
//! its GGUF translation ([`crate::GgufArch::tokenizer_json`]) built with
//! [`sentencepiece_tokenizer_json_with`] and its [`SpmOptions`].

use serde_json::{json, Map, Value};

use crate::gguf::Gguf;
use crate::weights::WeightError;

/// The pre-tokenizer most byte-level vocabularies' tokenizer.json has: split by `pattern`
/// (each match its own piece), then GPT-2's byte-to-character mapping.
pub fn regex_byte_level(pattern: &str, trim_offsets: bool) -> Value {
    json!({
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": trim_offsets, "use_regex": false},
        ],
    })
}

/// Longest piece whose splits become merges.
const MAX_MERGED_PIECE_BYTES: usize = 256;

/// The `TemplateProcessing` that adds the BOS token, when the file asks for one
/// (`tokenizer.ggml.add_bos_token`, else `add_bos_default`); `None` when it does not.
/// `Err` names the key (without the "metadata " the callers put before it).
pub fn bos_post_processor(g: &Gguf, tokens: &[&str], add_bos_default: bool) -> Result<Option<Value>, String> {
    let add_bos = match g.value("tokenizer.ggml.add_bos_token") {
        Some(v) => v.to_bool().unwrap_or(false),
        None => add_bos_default,
    };
    if !add_bos {
        return Ok(None);
    }
    if g.value("tokenizer.ggml.bos_token_id").is_none() {
        return Err("tokenizer.ggml.add_bos_token: true, but no bos_token_id".into());
    }
    bos_template(g, tokens).map(Some)
}

/// The `TemplateProcessing` that adds the file's BOS token (`tokenizer.ggml.bos_token_id`),
/// whatever `tokenizer.ggml.add_bos_token` says: for a family whose runtime always adds
/// it. `Err` names the key (without the "metadata " the callers put before it).
pub fn bos_template(g: &Gguf, tokens: &[&str]) -> Result<Value, String> {
    let key = "tokenizer.ggml.bos_token_id";
    let id = g.uint(key).map_err(|e| e.to_string())?.ok_or(format!("{key}: missing"))?;
    let tok = tokens.get(id as usize).ok_or_else(|| format!("{key}: id {id} is past the {} tokens", tokens.len()))?;
    Ok(json!({
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": tok, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": tok, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": tok, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {*tok: {"id": tok, "ids": [id], "tokens": [tok]}},
    }))
}

fn floats(g: &Gguf, key: &str) -> Result<Option<Vec<f32>>, WeightError> {
    let Some(v) = g.value(key) else { return Ok(None) };
    let candle_core::quantized::gguf_file::Value::Array(items) = v else {
        return Err(g.meta_err(key, "expected an array of numbers"));
    };
    items
        .iter()
        .map(|v| v.to_f32().map_err(|_| g.meta_err(key, "expected an array of f32")))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// How the merges of a SentencePiece vocabulary are ranked (it stores none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeRank {
    /// By the merged piece's score, highest first (transformers' `SpmConverter`).
    Score,
    /// By the merged piece's place in the vocabulary, first first: for vocabularies whose
    /// scores do not follow the merge order (transformers ranks some families' this way,
    /// where the added pieces share one placeholder score).
    Position,
}

/// What a family's SentencePiece vocabulary needs beyond the common conversion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpmOptions {
    /// How the merges are ranked.
    pub merge_rank: MergeRank,
    /// Spell a piece made only of whitespace with at least one ASCII space as that many
    /// "▁" (llama.cpp's converter wrote the user-defined space runs with real spaces; the
    /// model's own tokenizer looks them up as "▁" runs). Such a piece is then an ordinary
    /// piece of the BPE, no longer an added token.
    pub respell_space_runs: bool,
}

/// The options of [`sentencepiece_tokenizer_json`]: score order, pieces as stored.
pub const SPM_DEFAULT: SpmOptions = SpmOptions { merge_rank: MergeRank::Score, respell_space_runs: false };

/// Whitespace as Python's `str.isspace` sees it (Rust's set plus the four separators
/// U+001C..U+001F), which transformers' respelling rule uses.
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// The tokenizer.json of a SentencePiece BPE vocabulary (see the module docs).
pub fn sentencepiece_tokenizer_json(g: &Gguf) -> Result<Value, String> {
    sentencepiece_tokenizer_json_with(g, SPM_DEFAULT)
}

/// [`sentencepiece_tokenizer_json`] with a family's [`SpmOptions`].
pub fn sentencepiece_tokenizer_json_with(g: &Gguf, opts: SpmOptions) -> Result<Value, String> {
    let e = |e: WeightError| e.to_string();
    let stored = g.strings("tokenizer.ggml.tokens").map_err(e)?.ok_or("metadata tokenizer.ggml.tokens: missing")?;
    let respelled: Vec<String> = stored
        .iter()
        .map(|&t| {
            let run = opts.respell_space_runs && t.contains(' ') && t.chars().all(py_space);
            if run {
                "\u{2581}".repeat(t.chars().count())
            } else {
                t.to_string()
            }
        })
        .collect();
    let tokens: Vec<&str> = respelled.iter().map(String::as_str).collect();
    let scores = floats(g, "tokenizer.ggml.scores").map_err(e)?.ok_or("metadata tokenizer.ggml.scores: missing")?;
    let types = g.ints("tokenizer.ggml.token_type").map_err(e)?.unwrap_or_default();
    if scores.len() != tokens.len() || (!types.is_empty() && types.len() != tokens.len()) {
        return Err(format!("metadata: {} tokens, {} scores, {} token types", tokens.len(), scores.len(), types.len()));
    }
    let mut ids = std::collections::HashMap::with_capacity(tokens.len());
    let mut vocab = Map::with_capacity(tokens.len());
    let mut added = Vec::new();
    for (id, &tok) in tokens.iter().enumerate() {
        if ids.insert(tok, id).is_some() {
            return Err(format!("metadata tokenizer.ggml.tokens: token {tok:?} appears twice"));
        }
        vocab.insert(tok.to_string(), json!(id));
        // llama.cpp's token types: 2 = unknown and 3 = control (special), 4 = user-defined.
        let ty = types.get(id).copied().unwrap_or(1);
        // A respelled space run is an ordinary piece now (transformers adds a user-defined
        // piece only under its stored spelling, which the vocabulary no longer has).
        if matches!(ty, 2..=4) && tok == stored[id] {
            added.push(json!({
                "id": id, "content": tok, "single_word": false, "lstrip": false, "rstrip": false,
                "normalized": false, "special": ty != 4,
            }));
        }
    }
    // Every split of every piece into two pieces of the vocabulary, ranked as
    // transformers ranks them: by score (highest first), then the longer left and right
    // parts, then vocabulary order (id of the piece, then of its parts).
    let mut merges: Vec<(f32, usize, usize, usize, usize, usize)> = Vec::new(); // (score, len l, len r, piece, id l, id r)
    for (id, &piece) in tokens.iter().enumerate() {
        // Splitting costs the square of a piece's length: a hostile file's megabyte-long
        // "piece" gets no merges (real pieces are a few dozen bytes at most).
        if piece.len() > MAX_MERGED_PIECE_BYTES {
            continue;
        }
        for (cut, _) in piece.char_indices().skip(1) {
            if let (Some(&l), Some(&r)) = (ids.get(&piece[..cut]), ids.get(&piece[cut..])) {
                let (nl, nr) = (piece[..cut].chars().count(), piece[cut..].chars().count());
                let rank = match opts.merge_rank {
                    MergeRank::Score => scores[id],
                    // Earlier pieces first; ids stay far below 2^24, so exact in f32.
                    MergeRank::Position => -(id as f32),
                };
                merges.push((rank, nl, nr, id, l, r));
            }
        }
    }
    merges.sort_by(|a, b| {
        (b.0.total_cmp(&a.0)).then((b.1, b.2).cmp(&(a.1, a.2))).then((a.3, a.4, a.5).cmp(&(b.3, b.4, b.5)))
    });
    let pairs: Vec<Value> = merges.iter().map(|m| json!([tokens[m.4], tokens[m.5]])).collect();
    let unk = match g.uint("tokenizer.ggml.unknown_token_id").map_err(e)? {
        Some(id) => Some(*tokens.get(id as usize).ok_or_else(|| format!("unknown_token_id {id} is past the tokens"))?),
        None => tokens.iter().position(|&t| t == "<unk>").map(|i| tokens[i]),
    };
    let prefix = g.value("tokenizer.ggml.add_space_prefix").is_none_or(|v| v.to_bool().unwrap_or(true));
    let mut normalizers = Vec::new();
    if prefix {
        normalizers.push(json!({"type": "Prepend", "prepend": "\u{2581}"}));
    }
    normalizers.push(json!({"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"}));
    let mut decoders = vec![
        json!({"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "}),
        json!({"type": "ByteFallback"}),
        json!({"type": "Fuse"}),
    ];
    if prefix {
        decoders.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
    }
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": null,
        "post_processor": bos_post_processor(g, &tokens, true)?,
        "decoder": {"type": "Sequence", "decoders": decoders},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": unk, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
            "vocab": vocab, "merges": pairs,
        },
    }))
}
