//! Text to ids and back, as `tl_tokenizer` in config.json says.
//!
//! `"byte"`: ids 0..255 are the bytes of the UTF-8 text; ids past 255 (a larger vocab's
//! special tokens) decode to nothing.
//!
//! `"hf"`: a Hugging Face tokenizer (the `tokenizers` crate): `tokenizer.json` of the
//! model directory, or, for a GGUF model, the byte-level BPE its `tokenizer.ggml.*`
//! metadata describes ([`gguf_tokenizer_json`]). Special tokens decode to nothing, like
//! the byte tokenizer's ids past 255.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde_json::{json, Map, Value};
use thiserror::Error;

use crate::config::{ModelConfig, TokenizerKind};
use crate::gguf::Gguf;

/// A tokenizer that could not be loaded or used.
#[derive(Debug, Error)]
pub enum TokenizerError {
    /// The tokenizer kind is not available in this build or for this directory.
    #[error("tokenizer: {0}")]
    Unsupported(String),
    /// Encoding or decoding failed.
    #[error("tokenizer: {0}")]
    Failed(String),
}

/// A loaded tokenizer.
pub enum Tokenizer {
    /// Ids 0..255 are bytes.
    Byte,
    /// A Hugging Face tokenizer.
    Hf(Box<HfTokenizer>),
}

/// A Hugging Face tokenizer with a per-id byte table for streaming.
pub struct HfTokenizer {
    inner: tokenizers::Tokenizer,
    pieces: Vec<Vec<u8>>, // bytes each id decodes to; empty for special tokens
    special: HashSet<u32>,
    json: Value,
}

/// GPT-2's byte-to-character table, inverted: the byte each printable stand-in means.
fn byte_level_chars() -> HashMap<char, u8> {
    let mut printable: Vec<u32> = ('!' as u32..='~' as u32).collect();
    printable.extend('¡' as u32..='¬' as u32);
    printable.extend('®' as u32..='ÿ' as u32);
    let mut map = HashMap::with_capacity(256);
    let mut extra = 0u32;
    for b in 0u32..256 {
        let c = if printable.contains(&b) {
            b
        } else {
            extra += 1;
            255 + extra
        };
        if let Some(c) = char::from_u32(c) {
            map.insert(c, b as u8);
        }
    }
    map
}

/// Whether a tokenizer.json decoder is (or contains) the byte-level one.
fn is_byte_level(decoder: &Value) -> bool {
    match decoder.get("type").and_then(Value::as_str) {
        Some("ByteLevel") => true,
        Some("Sequence") => {
            decoder.get("decoders").and_then(Value::as_array).is_some_and(|d| d.iter().any(is_byte_level))
        }
        _ => false,
    }
}

impl HfTokenizer {
    /// Build from tokenizer.json content; `source` names the file in errors.
    pub fn from_json(json: Value, source: &Path) -> Result<HfTokenizer, TokenizerError> {
        let fail = |e: String| TokenizerError::Failed(format!("{}: {e}", source.display()));
        let mut inner =
            tokenizers::Tokenizer::from_bytes(json.to_string().as_bytes()).map_err(|e| fail(e.to_string()))?;
        // A tokenizer.json may carry the padding and truncation its exporter last used
        // (sentence-transformers' all-MiniLM-L6-v2: pad to 128, cut at 128); tl's ids are
        // the text's own, and lengths are the runner's to check, so neither is applied.
        inner.with_padding(None);
        inner.with_truncation(None).map_err(|e| fail(e.to_string()))?;
        let special: HashSet<u32> = json
            .get("added_tokens")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter(|t| t.get("special").and_then(Value::as_bool) == Some(true))
                    .filter_map(|t| t.get("id").and_then(Value::as_u64).map(|i| i as u32))
                    .collect()
            })
            .unwrap_or_default();
        let byte_level = json.get("decoder").is_some_and(is_byte_level);
        let chars = byte_level_chars();
        let n = inner.get_vocab_size(true);
        let mut pieces = Vec::with_capacity(n);
        for id in 0..n as u32 {
            let tok = match inner.id_to_token(id) {
                Some(t) if !special.contains(&id) => t,
                _ => {
                    pieces.push(Vec::new());
                    continue;
                }
            };
            let mut bytes = Vec::with_capacity(tok.len());
            if byte_level {
                // Characters outside the table (an added token's plain text) stand for
                // themselves, as in the byte-level decoder.
                for c in tok.chars() {
                    match chars.get(&c) {
                        Some(&b) => bytes.push(b),
                        None => bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                    }
                }
            } else if let Some(b) = tok
                .strip_prefix("<0x")
                .and_then(|h| h.strip_suffix('>'))
                .filter(|h| h.len() == 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                bytes.push(b); // SentencePiece byte fallback
            } else {
                bytes.extend_from_slice(tok.replace('\u{2581}', " ").as_bytes());
            }
            pieces.push(bytes);
        }
        Ok(HfTokenizer { inner, pieces, special, json })
    }

    /// Load a tokenizer.json file.
    pub fn from_file(path: &Path) -> Result<HfTokenizer, TokenizerError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| TokenizerError::Failed(format!("{}: {e}", path.display())))?;
        let json: Value = serde_json::from_str(&text)
            .map_err(|e| TokenizerError::Failed(format!("{}: bad JSON: {e}", path.display())))?;
        Self::from_json(json, path)
    }

    /// The tokenizer.json this tokenizer was built from.
    pub fn json(&self) -> &Value {
        &self.json
    }

    /// The `tokenizers` crate's tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

impl Tokenizer {
    /// The tokenizer a model's config names: the byte tokenizer, the GGUF file's own
    /// tokenizer when the config came from one, else `<dir>/tokenizer.json`.
    pub fn load(cfg: &ModelConfig) -> Result<Tokenizer, TokenizerError> {
        match cfg.tokenizer {
            TokenizerKind::Byte => Ok(Tokenizer::Byte),
            TokenizerKind::Hf => {
                if let Some(file) = &cfg.gguf {
                    let g = Gguf::open(file).map_err(|e| TokenizerError::Failed(e.to_string()))?;
                    return Tokenizer::from_gguf(&g);
                }
                let dir = cfg.dir.as_deref().ok_or_else(|| {
                    TokenizerError::Unsupported("\"hf\" tokenizer: the config has no model directory".into())
                })?;
                let path = dir.join("tokenizer.json");
                Ok(Tokenizer::Hf(Box::new(HfTokenizer::from_file(&path)?)))
            }
        }
    }

    /// The tokenizer a GGUF file's metadata describes.
    pub fn from_gguf(g: &Gguf) -> Result<Tokenizer, TokenizerError> {
        let json = gguf_tokenizer_json(g)?;
        Ok(Tokenizer::Hf(Box::new(HfTokenizer::from_json(json, crate::weights::WeightStore::path(g))?)))
    }

    /// Token ids of `text`, with no special tokens added (special tokens written in the
    /// text, such as a chat template's `<|im_start|>`, are still recognised).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        match self {
            Tokenizer::Byte => Ok(text.bytes().map(u32::from).collect()),
            Tokenizer::Hf(t) => t
                .inner
                .encode(text, false)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| TokenizerError::Failed(e.to_string())),
        }
    }

    /// Token ids of `text` with the tokenizer's special tokens added (a BOS, where its
    /// post-processor adds one); the byte tokenizer adds none.
    pub fn encode_with_special(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        match self {
            Tokenizer::Byte => self.encode(text),
            Tokenizer::Hf(t) => t
                .inner
                .encode(text, true)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| TokenizerError::Failed(e.to_string())),
        }
    }

    /// The id of a token's text (`"<|im_end|>"`, say), if the vocabulary has it.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        match self {
            Tokenizer::Byte => None,
            Tokenizer::Hf(t) => t.inner.token_to_id(token),
        }
    }

    /// True for the ids of special tokens (those that decode to nothing).
    pub fn is_special(&self, id: u32) -> bool {
        match self {
            Tokenizer::Byte => id >= 256,
            Tokenizer::Hf(t) => t.special.contains(&id),
        }
    }

    /// The bytes of a run of ids (may end inside a UTF-8 character): what a server needs
    /// to stream text itself and to report a token's `bytes` (OpenAI logprobs).
    pub fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>, TokenizerError> {
        match self {
            Tokenizer::Byte => Ok(ids.iter().filter(|&&i| i < 256).map(|&i| i as u8).collect()),
            Tokenizer::Hf(t) => {
                let mut out = Vec::new();
                for &id in ids {
                    let piece = t.pieces.get(id as usize).ok_or_else(|| {
                        TokenizerError::Failed(format!("id {id} is past the vocabulary ({} ids)", t.pieces.len()))
                    })?;
                    out.extend_from_slice(piece);
                }
                Ok(out)
            }
        }
    }

    /// The text of a run of ids (invalid UTF-8 replaced by U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids)?).into_owned())
    }

    /// A decoder for streaming output that never emits half a UTF-8 character.
    pub fn stream(&self) -> StreamDecoder<'_> {
        StreamDecoder { tok: self, pending: Vec::new() }
    }
}

/// Turns ids into text as they come, holding back an incomplete UTF-8 sequence until the
/// ids that complete it arrive.
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    pending: Vec<u8>, // bytes not yet emitted: at most one incomplete character
}

impl StreamDecoder<'_> {
    /// Feed one id; returns the text that is now complete (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        self.pending.extend(self.tok.decode_bytes(&[id])?);
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            // error_len() None: the tail is an incomplete character; wait for more.
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            // A byte that can never become valid: emit it (lossily) now.
            Err(_) => self.pending.len(),
        };
        let out: Vec<u8> = self.pending.drain(..valid).collect();
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// Whatever is still held back (an unfinished character), lossily.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

/// The pre-tokenizer llama.cpp applies for a `tokenizer.ggml.pre` value, in tokenizer.json
/// form. The "smollm" family first isolates every `\p{N}` character (llama-vocab.cpp's
/// first regex), which HF's `Digits { individual_digits: true }` does, then GPT-2's regex.
fn pre_tokenizer(pre: &str) -> Option<Value> {
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    match pre {
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva-7b" => Some(json!({
            "type": "Sequence",
            "pretokenizers": [{"type": "Digits", "individual_digits": true}, byte_level],
        })),
        "default" | "gpt-2" | "gpt2" | "mpt" | "olmo" | "jais" => Some(byte_level),
        _ => None,
    }
}

/// `why` in the GGUF file at `path`: prefixed with the path unless it already starts with
/// it (a [`WeightError`](crate::weights::WeightError) from the file names it).
fn in_file(path: &str, why: String) -> String {
    if why.starts_with(path) {
        why
    } else {
        format!("{path}: {why}")
    }
}

/// A tokenizer.json for a GGUF file's vocabulary: the family's own conversion when its
/// GGUF translation has one ([`crate::GgufArch::tokenizer_json`]), else by
/// `tokenizer.ggml.model`: core's byte-level BPE for `"gpt2"` ([`gguf_byte_level_bpe_json`]),
/// a registered model's conversion ([`crate::GgufVocab`]) for the others.
pub fn gguf_tokenizer_json(g: &Gguf) -> Result<Value, TokenizerError> {
    let path = crate::weights::WeightStore::path(g).display().to_string();
    let named = |why: String| TokenizerError::Unsupported(in_file(&path, why));
    // The family's own conversion first, when its GGUF translation has one.
    if let Some(json) = crate::registry::gguf_arch_of(g).and_then(|a| a.tokenizer_json(g)) {
        return json.map_err(named);
    }
    match g.string("tokenizer.ggml.model").map_err(|e| TokenizerError::Failed(e.to_string()))? {
        Some("gpt2") => gguf_byte_level_bpe_json(g).map_err(named),
        // Another vocabulary model, translated by the crate that registered it.
        Some(m) => match crate::registry::gguf_vocab(m) {
            Ok(r) => (r.tokenizer_json)(g).map_err(named),
            Err(_) => Err(named(format!(
                "metadata tokenizer.ggml.model: {m:?} is not supported (known: \"gpt2\" (byte-level BPE) and those registered: {:?})",
                crate::registry::gguf_vocab_names().unwrap_or_default()
            ))),
        },
        None => Err(named("metadata tokenizer.ggml.model: missing".into())),
    }
}

/// The tokenizer.json of a byte-level BPE vocabulary in a GGUF file
/// (`tokenizer.ggml.model = "gpt2"`; the model key is not checked here): tokens, merges,
/// token types (control tokens become special added tokens, user-defined ones plain added
/// tokens), the pre-tokenizer (and normalizer) `tokenizer.ggml.pre` names, and the BOS
/// template when the file asks for one. No family's conversion runs: a family's
/// [`crate::GgufArch::tokenizer_json`] calls this and changes what its vocabulary needs
/// (a post-processor, an added token's flags). `Err` names the metadata key (the caller
/// adds the file's name).
pub fn gguf_byte_level_bpe_json(g: &Gguf) -> Result<Value, String> {
    let err = |e: crate::weights::WeightError| e.to_string();
    let bad = |key: &str, why: String| format!("metadata {key}: {why}");
    let pre_name = g.string("tokenizer.ggml.pre").map_err(err)?.unwrap_or("default");
    // Core's own table first; a registration serves the names core does not know.
    let core_pre = pre_tokenizer(pre_name);
    let registered = if core_pre.is_none() { crate::registry::gguf_pre_tokenizer(pre_name).ok() } else { None };
    let normalizer = registered.and_then(|r| r.normalizer).map_or(Value::Null, |f| f());
    let ignore_merges = registered.is_some_and(|r| r.ignore_merges);
    let pre = core_pre.or(registered.map(|r| (r.pre_tokenizer)())).ok_or_else(|| {
        bad(
            "tokenizer.ggml.pre",
            format!("{pre_name:?} is not supported (known: smollm, starcoder, refact, command-r, codeshell, exaone, minerva-7b, default, gpt2, mpt, olmo, jais, and those registered: {:?})", crate::registry::gguf_pre_tokenizer_names().unwrap_or_default()),
        )
    })?;
    let GgufBpeParts { tokens, vocab, added, merges } = gguf_bpe_parts(g)?;
    let post = crate::gguf_vocab::bos_post_processor(g, &tokens, false)
        .map_err(|why| format!("metadata {why}"))?
        .unwrap_or_else(
            || json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true}),
        );
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": pre,
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": ignore_merges,
            "vocab": vocab, "merges": merges,
        },
    }))
}

/// What every BPE vocabulary in a GGUF file stores, in tokenizer.json form.
pub struct GgufBpeParts<'a> {
    /// `tokenizer.ggml.tokens`, by id.
    pub tokens: Vec<&'a str>,
    /// The BPE model's `vocab`: each token to its id.
    pub vocab: Map<String, Value>,
    /// The `added_tokens`: llama.cpp's control tokens (type 3) as special tokens,
    /// user-defined ones (type 4) as plain (normalized) added tokens.
    pub added: Vec<Value>,
    /// The BPE model's `merges`, in the file's order (its rank), as pairs.
    pub merges: Vec<Value>,
}

/// The tokens, token types and merges of a BPE vocabulary in a GGUF file, whatever its
/// `tokenizer.ggml.model` (the byte-level one here, a family's own in its crate). `Err`
/// names the metadata key: `tokenizer.ggml.tokens` or `tokenizer.ggml.merges` missing, a
/// token listed twice, a token type count other than the token count, a merge that is
/// not a pair.
pub fn gguf_bpe_parts(g: &Gguf) -> Result<GgufBpeParts<'_>, String> {
    let err = |e: crate::weights::WeightError| e.to_string();
    let bad = |key: &str, why: String| format!("metadata {key}: {why}");
    let tokens = g
        .strings("tokenizer.ggml.tokens")
        .map_err(err)?
        .ok_or_else(|| bad("tokenizer.ggml.tokens", "missing".into()))?;
    let types = g.ints("tokenizer.ggml.token_type").map_err(err)?.unwrap_or_default();
    if !types.is_empty() && types.len() != tokens.len() {
        return Err(bad("tokenizer.ggml.token_type", format!("{} entries for {} tokens", types.len(), tokens.len())));
    }
    let stored = g
        .strings("tokenizer.ggml.merges")
        .map_err(err)?
        .ok_or_else(|| bad("tokenizer.ggml.merges", "missing".into()))?;
    let mut vocab = Map::with_capacity(tokens.len());
    let mut added = Vec::new();
    for (id, &tok) in tokens.iter().enumerate() {
        if vocab.insert(tok.to_string(), json!(id)).is_some() {
            return Err(bad("tokenizer.ggml.tokens", format!("token {tok:?} appears twice")));
        }
        // llama.cpp's token types: 3 = control (special), 4 = user-defined (plain added).
        let ty = types.get(id).copied().unwrap_or(1);
        if ty == 3 || ty == 4 {
            added.push(json!({
                "id": id, "content": tok, "single_word": false, "lstrip": false, "rstrip": false,
                "normalized": ty == 4, "special": ty == 3,
            }));
        }
    }
    let mut merges = Vec::with_capacity(stored.len());
    for m in &stored {
        // llama.cpp splits at the first space after the first character.
        let cut = m.char_indices().skip(1).find(|&(_, c)| c == ' ').map(|(i, _)| i);
        let Some(cut) = cut else { return Err(bad("tokenizer.ggml.merges", format!("{m:?} is not a pair"))) };
        merges.push(json!([&m[..cut], &m[cut + 1..]]));
    }
    Ok(GgufBpeParts { tokens, vocab, added, merges })
}
