//! One forward step: a batch of sequences, each a run of new tokens at absolute positions.

/// One sequence's part of a step.
#[derive(Clone, Copy, Debug)]
pub struct ForwardSeq<'a> {
    /// The new tokens.
    pub tokens: &'a [u32],
    /// Absolute position of `tokens[0]` (how many tokens the cache already holds).
    pub start: usize,
    /// The sequence's block table, `(rows, G)` for a layout of G layer groups
    /// ([`crate::KvLayout`]; G = 1 without windows): position `j` of group `k` lives in
    /// `blocks[(j / B) * G + k]`, slot `j % B`. A windowed group's entry no query of the
    /// step sees may be [`crate::NO_BLOCK`] (given back).
    pub blocks: &'a [u32],
    /// The sequence's LoRA adapter and scale, or `None` for the base model's arithmetic
    /// (docs/spec/numbers.md, "Adapters"). Rows with different adapters share a step; each
    /// row's numbers are the same as alone.
    pub adapter: Option<crate::adapter::Applied<'a>>,
}

/// The sequences of one step, in batch order.
#[derive(Clone, Debug, Default)]
pub struct ForwardBatch<'a> {
    /// Sequences; each gets one row of logits.
    pub seqs: Vec<ForwardSeq<'a>>,
}

impl<'a> ForwardBatch<'a> {
    /// A batch of one sequence.
    pub fn single(tokens: &'a [u32], start: usize, blocks: &'a [u32]) -> Self {
        ForwardBatch { seqs: vec![ForwardSeq { tokens, start, blocks, adapter: None }] }
    }

    /// Tokens in the step (N).
    pub fn n_tokens(&self) -> usize {
        self.seqs.iter().map(|s| s.tokens.len()).sum()
    }
}

/// Logits of each sequence's last token, row-major `(rows, vocab)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Logits {
    /// Vocabulary size (row length).
    pub vocab: usize,
    /// `(rows, vocab)`.
    pub data: Vec<f32>,
}

impl Logits {
    /// Rows (one per sequence of the batch).
    pub fn rows(&self) -> usize {
        self.data.len().checked_div(self.vocab).unwrap_or(0)
    }

    /// Row `i`; panics past `rows()` like slice indexing.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.vocab..(i + 1) * self.vocab]
    }
}
