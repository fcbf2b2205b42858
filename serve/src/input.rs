//! An embedding input as a request gives it (a leaf: embeddings.rs parses it, encoder.rs
//! and rerank.rs read it).

/// One input: text to tokenize, or token ids as given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// Text (tokenized with the model's special tokens, as its tokenizer does).
    Text(String),
    /// Token ids.
    Tokens(Vec<u32>),
}
