//! Embedding sequences: a prompt prefilled through the same steps as generation, with
//! the final normed hidden state of its positions pooled into one vector.
//!
//! An embedding sequence is an ordinary sequence (seq.rs) with a [`Pooler`]: the
//! scheduler plans and batches it like any prompt (chunked, beside decoding sequences),
//! asks the forward for hidden rows in the steps it is part of, hands each step's rows to
//! [`Pooler::absorb`], and once the whole prompt is fed sends one [`Embedding`] and frees
//! the sequence's KV. It never samples.
//!
//! Determinism: each hidden row has the same bits in any batch or chunking (the forward's
//! promise), and the pooler combines rows in position order only, in f64 (a mean's sum,
//! the norm), rounding to f32 once at the end. So a text's embedding is the same bits
//! alone, among others, or beside a running generation.

use crate::error::EngineError;

/// How a sequence's hidden rows become one vector (sentence-transformers' pooling modes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pooling {
    /// The last token's row (decoder embedding models such as Qwen3-Embedding).
    #[default]
    Last,
    /// The mean of every token's row.
    Mean,
    /// The first token's row.
    Cls,
}

impl Pooling {
    /// The name `--pooling` and sentence-transformers use (`last`, `mean`, `cls`).
    pub fn as_str(self) -> &'static str {
        match self {
            Pooling::Last => "last",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
        }
    }
}

impl std::str::FromStr for Pooling {
    type Err = String;

    fn from_str(s: &str) -> Result<Pooling, String> {
        match s {
            "last" | "lasttoken" | "last_token" => Ok(Pooling::Last),
            "mean" | "mean_tokens" => Ok(Pooling::Mean),
            "cls" | "cls_token" => Ok(Pooling::Cls),
            _ => Err(format!("unknown pooling {s:?}: use last, mean or cls")),
        }
    }
}

/// One text to embed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbedRequest {
    /// Its token ids (never empty).
    pub prompt: Vec<u32>,
    /// How the rows are pooled.
    pub pooling: Pooling,
    /// L2-normalise the pooled vector.
    pub normalize: bool,
    /// Keep only the first `dimensions` values (before normalising, as Matryoshka models
    /// are trained); `None` keeps all `hidden_size`. Must be in `1..=hidden_size`.
    pub dimensions: Option<usize>,
}

/// A finished embedding.
#[derive(Clone, Debug, PartialEq)]
pub struct Embedding {
    /// The pooled (and, when asked, truncated and normalised) vector.
    pub vector: Vec<f32>,
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
}

/// What an embedding's receiver gets: one result.
pub type EmbedResult = Result<Embedding, EngineError>;

/// One embedding sequence's pooling state: what its hidden rows added up to so far.
#[derive(Clone, Debug)]
pub(crate) struct Pooler {
    pooling: Pooling,
    normalize: bool,
    dimensions: Option<usize>,
    /// Tokens of the prompt.
    len: usize,
    /// Last/CLS: the row (as f64); mean: the running sum, added in position order.
    acc: Vec<f64>,
    /// Positions absorbed so far (they arrive in order, from 0).
    seen: usize,
}

impl Pooler {
    pub(crate) fn new(req: &EmbedRequest) -> Pooler {
        Pooler {
            pooling: req.pooling,
            normalize: req.normalize,
            dimensions: req.dimensions,
            len: req.prompt.len(),
            acc: Vec::new(),
            seen: 0,
        }
    }

    /// Forget every row: the sequence's KV was released and its prompt is fed again
    /// from position 0 (a preemption).
    pub(crate) fn reset(&mut self) {
        self.acc.clear();
        self.seen = 0;
    }

    /// Take the hidden rows `(n, d)` of positions `start..start + n`. Rows must come in
    /// position order with no gap (the scheduler feeds an embedding sequence's prompt
    /// from 0: it takes no prefix-cache hits).
    pub(crate) fn absorb(&mut self, rows: &[f32], start: usize, d: usize) -> Result<(), EngineError> {
        if d == 0 || !rows.len().is_multiple_of(d) || start != self.seen {
            return Err(EngineError::Internal(format!(
                "embedding: {} hidden values of width {d} at position {start}, expected position {}",
                rows.len(),
                self.seen
            )));
        }
        let n = rows.len() / d;
        match self.pooling {
            Pooling::Mean => {
                if self.acc.is_empty() {
                    self.acc = vec![0.0; d];
                }
                for row in rows.chunks_exact(d) {
                    for (a, &x) in self.acc.iter_mut().zip(row) {
                        *a += f64::from(x);
                    }
                }
            }
            Pooling::Cls if start == 0 && n > 0 => self.acc = rows[..d].iter().map(|&x| f64::from(x)).collect(),
            Pooling::Last if start + n == self.len && n > 0 => {
                self.acc = rows[(n - 1) * d..].iter().map(|&x| f64::from(x)).collect();
            }
            _ => {}
        }
        self.seen += n;
        Ok(())
    }

    /// The embedding, once every position was absorbed.
    pub(crate) fn finish(&self) -> Result<Embedding, EngineError> {
        if self.seen != self.len || self.acc.is_empty() {
            return Err(EngineError::Internal(format!("embedding: {} of {} positions pooled", self.seen, self.len)));
        }
        let mut v = self.acc.clone();
        if self.pooling == Pooling::Mean {
            let n = self.len as f64;
            v.iter_mut().for_each(|x| *x /= n);
        }
        if let Some(k) = self.dimensions {
            v.truncate(k);
        }
        if self.normalize {
            let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
            if norm > 0.0 {
                v.iter_mut().for_each(|x| *x /= norm);
            }
        }
        Ok(Embedding { vector: v.into_iter().map(|x| x as f32).collect(), prompt_tokens: self.len })
    }
}
