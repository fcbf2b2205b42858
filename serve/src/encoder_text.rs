//! An encoder model's text side (a leaf below encoder.rs and state.rs): its tokenizer,
//! cutting as sentence-transformers does, and a request's inputs and pairs as the
//! engine's encode requests, an over-long text refused unless the request says
//! `truncate`.

use tl_core::encoder_text::{Texts, Tokens};
use tl_core::EncoderInfo;
use tl_engine::EncodeRequest;

use crate::error::ApiError;
use crate::input::Input;

/// An encoder's text side, loaded with the model.
pub(crate) struct EncoderText {
    /// The tokenizer, cutting at the model's `max_seq_length`.
    pub(crate) texts: Texts,
    /// What the model declares.
    pub(crate) info: EncoderInfo,
}

/// A tokenizer failure as a 400 on `param`.
fn tok_err(param: &str) -> impl Fn(tl_core::encoder_text::TextError) -> ApiError + '_ {
    move |e| ApiError::bad(param, e.to_string())
}

impl EncoderText {
    fn checked(
        &self,
        (t, cut): (Tokens, bool),
        truncate: bool,
        param: &str,
        index: usize,
    ) -> Result<EncodeRequest, ApiError> {
        if cut && !truncate {
            return Err(ApiError::bad(
                param,
                format!(
                    "{param}[{index}] is longer than the model's {} tokens (max_seq_length); send \"truncate\": true to cut it as sentence-transformers does",
                    self.texts.max_seq_length()
                ),
            ));
        }
        Ok(EncodeRequest { ids: t.ids, type_ids: Some(t.type_ids) })
    }

    /// Input `index` (`param[index]`) as the encoder's input: text tokenized with the
    /// model's special tokens, token ids as given (the engine checks them).
    pub(crate) fn input(
        &self,
        x: &Input,
        truncate: bool,
        param: &str,
        index: usize,
    ) -> Result<EncodeRequest, ApiError> {
        match x {
            Input::Text(s) => self.checked(self.texts.text_cut(s).map_err(tok_err(param))?, truncate, param, index),
            Input::Tokens(t) => Ok(EncodeRequest { ids: t.clone(), type_ids: None }),
        }
    }

    /// The pair `(a, b)` (a query and a document) as one input, `b` of token type 1.
    pub(crate) fn pair(
        &self,
        a: &str,
        b: &str,
        truncate: bool,
        param: &str,
        index: usize,
    ) -> Result<EncodeRequest, ApiError> {
        self.checked(self.texts.pair_cut(a, b).map_err(tok_err(param))?, truncate, param, index)
    }

    /// Whether the model scores pairs itself (a cross-encoder with one output).
    pub(crate) fn scores_pairs(&self) -> bool {
        self.info.scores == Some(1)
    }
}
