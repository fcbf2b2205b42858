//! From text to an encoder's outputs, as sentence-transformers does it: the directory's
//! tokenizer.json (a WordPiece vocabulary, its normaliser and `[CLS] ... [SEP]` template, say),
//! inputs cut to `max_seq_length` (sentence_bert_config.json, else
//! `max_position_embeddings`) with the special tokens kept, pairs cut longest-first, then
//! [`ModelRunner::encode`]. Nothing here is a family's own: every encoder with a
//! tokenizer.json and sentence-transformers' files uses it (the encoder families' tests,
//! serve's /v1/embeddings, /v1/rerank and /v1/score, `tl embed`).

use std::path::Path;

use serde_json::Value;
use thiserror::Error;
use tokenizers::{TruncationDirection, TruncationParams, TruncationStrategy};

use crate::config::{ConfigError, ModelConfig};
use crate::encoder::EncodeInput;
use crate::engine::EngineConfig;
use crate::runner::{open_weights, ModelRunner, RunnerError};
use crate::tokenizer::{HfTokenizer, Tokenizer, TokenizerError};

/// Why text could not be encoded.
#[derive(Debug, Error)]
pub enum TextError {
    /// A config or sentence-transformers file refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The tokenizer refused.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// The runner or the model refused.
    #[error(transparent)]
    Runner(#[from] RunnerError),
    /// An empty text (sentence-transformers would embed `[CLS] [SEP]`; tl asks for text).
    #[error("text {index} is empty")]
    Empty {
        /// Its index in the call.
        index: usize,
    },
    /// The model gives no output of the kind asked.
    #[error("the model has no {0} (see its EncoderInfo)")]
    NoOutput(&'static str),
}

/// One input's token ids and type ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tokens {
    /// Ids, special tokens included.
    pub ids: Vec<u32>,
    /// Type ids (0, and 1 for a pair's second text).
    pub type_ids: Vec<u32>,
}

impl Tokens {
    /// The runner's view of it.
    pub fn input(&self) -> EncodeInput<'_> {
        EncodeInput { ids: &self.ids, type_ids: Some(&self.type_ids) }
    }
}

/// The tokenizer of an encoder directory, cutting as sentence-transformers does.
pub struct Texts {
    tok: tokenizers::Tokenizer,
    max: usize,
}

impl Texts {
    /// The tokenizer of `config`'s directory, cutting at its `max_seq_length`.
    pub fn load(config: &ModelConfig) -> Result<Texts, TextError> {
        let max_pos = config.max_position_embeddings.unwrap_or(512);
        // A GGUF file carries its own vocabulary and no sentence-transformers files: its
        // tokenizer (never a tokenizer.json that happens to lie beside it), cut at its
        // context length.
        if config.gguf.is_some() {
            return match Tokenizer::load(config)? {
                Tokenizer::Hf(hf) => Texts::cutting(hf.inner().clone(), max_pos),
                Tokenizer::Byte => Err(TokenizerError::Unsupported("an encoder needs a vocabulary".into()).into()),
            };
        }
        let dir = config.dir.as_deref().ok_or(ConfigError::Missing { field: "dir", hint: " (a model directory)" })?;
        let st = dir.join("sentence_bert_config.json");
        let max = if st.is_file() {
            let text = std::fs::read_to_string(&st).map_err(|error| ConfigError::Io { path: st.clone(), error })?;
            let v: Value =
                serde_json::from_str(&text).map_err(|e| ConfigError::Json(format!("{}: {e}", st.display())))?;
            match v.get("max_seq_length") {
                None | Some(Value::Null) => max_pos,
                Some(m) => match m.as_u64() {
                    Some(n) if n >= 2 && n as usize <= max_pos => n as usize,
                    _ => {
                        return Err(ConfigError::invalid(
                            format!("{}: max_seq_length", st.display()),
                            m,
                            format!("expected 2..={max_pos} (max_position_embeddings)"),
                        )
                        .into())
                    }
                },
            }
        } else {
            max_pos
        };
        let hf = HfTokenizer::from_file(&dir.join("tokenizer.json"))?;
        Texts::cutting(hf.inner().clone(), max)
    }

    /// `tok` without padding, cutting at `max` tokens longest-first.
    fn cutting(mut tok: tokenizers::Tokenizer, max: usize) -> Result<Texts, TextError> {
        tok.with_padding(None);
        let trunc = TruncationParams {
            max_length: max,
            strategy: TruncationStrategy::LongestFirst,
            direction: TruncationDirection::Right,
            stride: 0,
        };
        tok.with_truncation(Some(trunc)).map_err(|e| TokenizerError::Failed(e.to_string()))?;
        Ok(Texts { tok, max })
    }

    /// The longest input, special tokens included.
    pub fn max_seq_length(&self) -> usize {
        self.max
    }

    /// One text's tokens, cut to `max_seq_length`.
    pub fn text(&self, text: &str) -> Result<Tokens, TextError> {
        Ok(self.text_cut(text)?.0)
    }

    /// A pair's tokens (a cross-encoder's query and document), cut longest-first.
    pub fn pair(&self, a: &str, b: &str) -> Result<Tokens, TextError> {
        Ok(self.pair_cut(a, b)?.0)
    }

    /// [`Texts::text`], and whether it was cut (a server refuses a cut it was not asked
    /// for).
    pub fn text_cut(&self, text: &str) -> Result<(Tokens, bool), TextError> {
        self.encode(tokenizers::EncodeInput::Single(text.into()))
    }

    /// [`Texts::pair`], and whether it was cut.
    pub fn pair_cut(&self, a: &str, b: &str) -> Result<(Tokens, bool), TextError> {
        self.encode(tokenizers::EncodeInput::Dual(a.into(), b.into()))
    }

    fn encode(&self, input: tokenizers::EncodeInput<'_>) -> Result<(Tokens, bool), TextError> {
        let e = self.tok.encode(input, true).map_err(|e| TokenizerError::Failed(e.to_string()))?;
        // Truncation keeps what it cut off as the overflowing parts.
        let cut = !e.get_overflowing().is_empty();
        Ok((Tokens { ids: e.get_ids().to_vec(), type_ids: e.get_type_ids().to_vec() }, cut))
    }
}

/// Load an encoder directory: config.json, its weights, and its [`Texts`].
pub fn load(dir: &Path, engine: &EngineConfig) -> Result<(ModelRunner, Texts), TextError> {
    let config = ModelConfig::load(dir)?;
    let texts = Texts::load(&config)?;
    let weights = open_weights(dir)?;
    let runner = ModelRunner::from_parts(config, weights.as_ref(), engine)?;
    Ok((runner, texts))
}

fn tokens(texts: &Texts, items: &[&str]) -> Result<Vec<Tokens>, TextError> {
    items
        .iter()
        .enumerate()
        .map(|(index, t)| if t.is_empty() { Err(TextError::Empty { index }) } else { texts.text(t) })
        .collect()
}

/// The model's vectors of `items` (sentence-transformers' `encode`: pooled, normalised
/// when the model's modules say so), one per text, each the same bits in any batch.
pub fn embed(runner: &ModelRunner, texts: &Texts, items: &[&str]) -> Result<Vec<Vec<f32>>, TextError> {
    let toks = tokens(texts, items)?;
    let inputs: Vec<EncodeInput<'_>> = toks.iter().map(Tokens::input).collect();
    runner.encode(&inputs, false)?.into_iter().map(|e| e.vector.ok_or(TextError::NoOutput("pooled vector"))).collect()
}

/// A cross-encoder's scores of `(query, document)` pairs (sentence-transformers'
/// `CrossEncoder.predict`: the classifier's outputs after its activation), one per pair.
pub fn score(runner: &ModelRunner, texts: &Texts, pairs: &[(&str, &str)]) -> Result<Vec<Vec<f32>>, TextError> {
    let mut toks = Vec::with_capacity(pairs.len());
    for (index, (a, b)) in pairs.iter().enumerate() {
        if a.is_empty() || b.is_empty() {
            return Err(TextError::Empty { index });
        }
        toks.push(texts.pair(a, b)?);
    }
    let inputs: Vec<EncodeInput<'_>> = toks.iter().map(Tokens::input).collect();
    runner.encode(&inputs, false)?.into_iter().map(|e| e.scores.ok_or(TextError::NoOutput("classifier"))).collect()
}
