//! From text to a BERT's outputs, as sentence-transformers does it: the directory's
//! tokenizer.json (its WordPiece, normaliser and `[CLS] ... [SEP]` template), inputs cut
//! to `max_seq_length` (sentence_bert_config.json, else `max_position_embeddings`) with
//! the special tokens kept, pairs cut longest-first, then [`ModelRunner::encode`].
//!
//! Nothing here is BERT's own: any encoder family with a tokenizer.json and
//! sentence-transformers' files can use it (it should move beside the encoder contract
//! when a second family arrives).

use std::path::Path;

use serde_json::Value;
use thiserror::Error;
use tl_core::runner::open_weights;
use tl_core::tokenizer::HfTokenizer;
use tl_core::{ConfigError, EncodeInput, EngineConfig, ModelConfig, ModelRunner, RunnerError, TokenizerError};
use tokenizers::{TruncationDirection, TruncationParams, TruncationStrategy};

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
        let dir = config.dir.as_deref().ok_or(ConfigError::Missing { field: "dir", hint: " (a model directory)" })?;
        let max_pos = config.max_position_embeddings.unwrap_or(512);
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
        let mut tok = hf.inner().clone();
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
        let e = self.tok.encode(text, true).map_err(|e| TokenizerError::Failed(e.to_string()))?;
        Ok(Tokens { ids: e.get_ids().to_vec(), type_ids: e.get_type_ids().to_vec() })
    }

    /// A pair's tokens (a cross-encoder's query and document), cut longest-first.
    pub fn pair(&self, a: &str, b: &str) -> Result<Tokens, TextError> {
        let e = self.tok.encode((a, b), true).map_err(|e| TokenizerError::Failed(e.to_string()))?;
        Ok(Tokens { ids: e.get_ids().to_vec(), type_ids: e.get_type_ids().to_vec() })
    }
}

/// Load an encoder directory: config.json (a Hugging Face directory names no
/// `tl_tokenizer`; its tokenizer.json is meant, so `"hf"` is filled in), its weights, and
/// its [`Texts`].
pub fn load(dir: &Path, engine: &EngineConfig) -> Result<(ModelRunner, Texts), TextError> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|error| ConfigError::Io { path, error })?;
    let mut json: Value = serde_json::from_str(&text).map_err(|e| ConfigError::Json(e.to_string()))?;
    if let Some(obj) = json.as_object_mut() {
        if !obj.contains_key("tl_tokenizer") && dir.join("tokenizer.json").is_file() {
            obj.insert("tl_tokenizer".into(), Value::from("hf"));
        }
    }
    let config = ModelConfig::from_value(json, Some(dir))?;
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
