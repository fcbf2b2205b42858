//! The byte bigram (model-dir.md, "The byte bigram"): `tl_arch: "bigram"`, one tensor, a
//! `[V, V]` table of next-token logits whose row is the current token. The logits of a
//! sequence are the row of its last token; the model keeps no K/V.
//!
//! Registered as `"bigram"`; link it with `use tl_arch_bigram as _;`.
#![deny(missing_docs)]

use std::any::Any;
use std::sync::Arc;

use tl_core::{
    ArchRegistration, Architecture, BuildCtx, ConfigError, ForwardBatch, ForwardCtx, ForwardOutput, KvGeometry, Logits,
    Model, ModelConfig, ModelError, WeightError,
};

/// The bigram architecture.
pub struct BigramArch;

/// A loaded bigram: the logits table.
pub struct Bigram {
    vocab: usize,
    table: Vec<f32>, // (vocab, vocab): row = current token, column = next token
}

impl Bigram {
    /// The next-token logits after `token`.
    pub fn row(&self, token: u32) -> &[f32] {
        let t = token as usize;
        &self.table[t * self.vocab..(t + 1) * self.vocab]
    }
}

impl Architecture for BigramArch {
    fn parse_config(&self, _config: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError> {
        // Everything the bigram needs (vocab_size, tokenizer) is a common field.
        Ok(Arc::new(()))
    }

    fn kv_geometry(&self, _config: &ModelConfig, block_tokens: u32) -> Result<KvGeometry, ConfigError> {
        // The bigram keeps no K/V, but a scheduler books positions in blocks for every
        // model alike; the smallest geometry keeps that uniform at a few bytes a block.
        Ok(KvGeometry { n_layers: 1, n_kv_heads: 1, head_dim: 1, block_tokens })
    }

    fn build(&self, ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
        let names = ctx.weights.names();
        let [name] = names.as_slice() else {
            return Err(WeightError::Format {
                path: ctx.weights.path().to_path_buf(),
                reason: format!("a bigram checkpoint holds exactly one tensor, found {}: {names:?}", names.len()),
            }
            .into());
        };
        let vocab = ctx.config.vocab_size;
        let table = ctx.weights.f32(name, &[vocab, vocab])?;
        Ok(Box::new(Bigram { vocab, table }))
    }
}

impl Model for Bigram {
    fn hidden_size(&self) -> usize {
        self.vocab
    }

    fn weight_bytes(&self) -> Option<usize> {
        Some(std::mem::size_of_val(self.table.as_slice()))
    }

    fn forward(&self, batch: &ForwardBatch, ctx: &mut ForwardCtx<'_>) -> Result<ForwardOutput, ModelError> {
        // The token rows whose logits are asked (each sequence's last, every one, or
        // tails); a token's prediction is its own row of the table: (rows, vocab).
        let ids: Vec<u32> = batch.seqs.iter().flat_map(|s| s.tokens.iter().copied()).collect();
        let mut last = Vec::with_capacity(batch.seqs.len());
        let mut end = 0;
        for s in &batch.seqs {
            if s.tokens.is_empty() {
                return Err(ModelError::BadBatch("empty sequence".into()));
            }
            end += s.tokens.len();
            last.push(end - 1);
        }
        let rows = ctx.logit_rows(&last);
        let mut data = Vec::with_capacity(rows.len() * self.vocab); // (rows, vocab)
        for &r in &rows {
            data.extend_from_slice(self.row(ids[r]));
        }
        // The bigram's "hidden state" of a token is its row of the table.
        let hidden = ctx.want_hidden.then(|| {
            let mut h = Vec::with_capacity(batch.n_tokens() * self.vocab); // (tokens, vocab)
            for s in &batch.seqs {
                for &t in s.tokens {
                    h.extend_from_slice(self.row(t));
                }
            }
            h
        });
        Ok(ForwardOutput { logits: Logits { vocab: self.vocab, data }, hidden })
    }
}

inventory::submit! {
    ArchRegistration { name: "bigram", make: || Box::new(BigramArch) }
}
