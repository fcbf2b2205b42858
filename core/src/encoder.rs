//! The encoder contract (docs/spec/encoders.md): a model that reads a whole input at once
//! with bidirectional attention and keeps nothing between calls (no KV pages, no
//! sampling), answering with per-token hidden states, a pooled vector and/or a
//! classifier's scores.
//!
//! An architecture says it is one with [`crate::Architecture::is_encoder`]; the model it
//! builds returns itself from `Model::encoder` (crate::arch, beside the `Encoder` trait).
//! The runner then keeps no KV pool to speak of and answers
//! [`crate::ModelRunner::encode`], checking every input first, so an encoder sees only ids
//! below the vocabulary, type ids below its type count, and inputs of `1..=max_tokens`
//! tokens.

/// One input of an encode call: its token ids (special tokens included, already cut to
/// the model's length) and, for models with token types, each token's type (a
/// cross-encoder's pair: 0 for the query's tokens, 1 for the document's).
#[derive(Clone, Copy, Debug)]
pub struct EncodeInput<'a> {
    /// Token ids.
    pub ids: &'a [u32],
    /// One type id per token, or `None` for all zeros.
    pub type_ids: Option<&'a [u32]>,
}

impl<'a> EncodeInput<'a> {
    /// An input of `ids`, every token of type 0.
    pub fn ids(ids: &'a [u32]) -> Self {
        EncodeInput { ids, type_ids: None }
    }
}

/// What an encoder returns for one input.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Encoded {
    /// With `want_hidden`: the last hidden states, `(T, hidden_size)` row-major.
    pub hidden: Option<Vec<f32>>,
    /// The pooled vector (after the model's own pooling and normalisation), when the
    /// model declares one ([`EncoderInfo::vector`]).
    pub vector: Option<Vec<f32>>,
    /// The classifier's outputs after its activation, when the model has a head
    /// ([`EncoderInfo::scores`]).
    pub scores: Option<Vec<f32>>,
}

/// What an encoder declares about its inputs and outputs (fixed at build).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncoderInfo {
    /// Width of the hidden rows.
    pub hidden_size: usize,
    /// The longest input it runs, in tokens; longer inputs are refused, never cut.
    pub max_tokens: usize,
    /// How many token types it reads (type ids are checked to be below this); 0: the model
    /// has no token types and type ids are not read (a tokenizer's pair types are ignored,
    /// not refused).
    pub type_vocab: usize,
    /// Length of the pooled vector, when the model pools.
    pub vector: Option<usize>,
    /// Whether the pooled vector is L2-normalised.
    pub normalized: bool,
    /// Number of classifier outputs, when the model has a classification head.
    pub scores: Option<usize>,
}

/// Why an input cannot be encoded: `None` when it can. The rules every encoder relies on.
pub fn check_input(input: &EncodeInput<'_>, info: &EncoderInfo, vocab: usize) -> Option<String> {
    let n = input.ids.len();
    if n == 0 {
        return Some("no tokens".into());
    }
    if n > info.max_tokens {
        return Some(format!("{n} tokens, the model reads at most {}", info.max_tokens));
    }
    if let Some(&t) = input.ids.iter().find(|&&t| t as usize >= vocab) {
        return Some(format!("token id {t} >= vocab_size {vocab}"));
    }
    if let Some(types) = input.type_ids {
        if types.len() != n {
            return Some(format!("{} type ids for {n} tokens", types.len()));
        }
        // A model of no token types (0) reads none: a tokenizer's pair types are ignored.
        let limit = info.type_vocab;
        if let Some(&t) = types.iter().find(|&&t| limit > 0 && t as usize >= limit) {
            return Some(format!("token type {t} >= the model's {limit} types"));
        }
    }
    None
}
