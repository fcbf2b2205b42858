//! Text to ids and back, as `tl_tokenizer` in config.json says.
//!
//! `"byte"`: ids 0..255 are the bytes of the UTF-8 text; ids past 255 (a larger vocab's
//! special tokens) decode to nothing.

use thiserror::Error;

use crate::config::{ModelConfig, TokenizerKind};

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
}

impl Tokenizer {
    /// The tokenizer a model directory's config names.
    pub fn load(cfg: &ModelConfig) -> Result<Tokenizer, TokenizerError> {
        match cfg.tokenizer {
            TokenizerKind::Byte => Ok(Tokenizer::Byte),
            TokenizerKind::Hf => Err(TokenizerError::Unsupported("\"hf\" tokenizers are not built in yet".into())),
        }
    }

    /// Token ids of `text` (no special tokens added).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        match self {
            Tokenizer::Byte => Ok(text.bytes().map(u32::from).collect()),
        }
    }

    /// The bytes of a run of ids (may end inside a UTF-8 character).
    fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>, TokenizerError> {
        match self {
            Tokenizer::Byte => Ok(ids.iter().filter(|&&i| i < 256).map(|&i| i as u8).collect()),
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
