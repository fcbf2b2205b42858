//! One sequence's blocks and tokens, for callers that run a single conversation
//! (generate, chat, perplexity): the runner grows its block table as it is fed, and the
//! blocks go back to the pool when the sequence is dropped.

use crate::batch::ForwardBatch;
use crate::kv::SharedPool;
use crate::runner::{ModelRunner, RunnerError};

/// A sequence whose K/V live in the runner's pool.
pub struct Sequence {
    pool: SharedPool,
    block_tokens: usize,
    tokens: Vec<u32>,
    blocks: Vec<u32>, // block table: position j in blocks[j / block_tokens]
}

impl Sequence {
    /// Tokens whose K/V are in the cache.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// The block table.
    pub fn blocks(&self) -> &[u32] {
        &self.blocks
    }

    /// Forget every token from `len` on (their blocks past `len` go back to the pool),
    /// so the next feed overwrites them.
    pub fn truncate(&mut self, len: usize) -> Result<(), RunnerError> {
        if len >= self.tokens.len() {
            return Ok(());
        }
        self.tokens.truncate(len);
        let keep = len.div_ceil(self.block_tokens);
        let mut pool = self.pool.lock().map_err(|_| RunnerError::Other("KV pool lock poisoned".into()))?;
        for id in self.blocks.drain(keep..) {
            pool.release(id)?;
        }
        if let Some(&last) = self.blocks.last() {
            pool.set_fill(last, (len - (keep - 1) * self.block_tokens) as u32)?;
        }
        Ok(())
    }
}

impl Drop for Sequence {
    fn drop(&mut self) {
        if let Ok(mut pool) = self.pool.lock() {
            for &id in &self.blocks {
                // A failed release here would mean the table was corrupted elsewhere;
                // nothing better to do in a destructor than leave the block.
                let _ = pool.release(id);
            }
        }
    }
}

impl ModelRunner {
    /// A new, empty sequence on this runner's pool.
    pub fn sequence(&self) -> Sequence {
        Sequence { pool: self.pool(), block_tokens: self.block_tokens(), tokens: Vec::new(), blocks: Vec::new() }
    }

    /// Append `tokens` to `seq`, running them in steps of at most `prefill_chunk`
    /// tokens, and return the logits after the last one.
    pub fn feed(&mut self, seq: &mut Sequence, tokens: &[u32]) -> Result<Vec<f32>, RunnerError> {
        if tokens.is_empty() {
            return Err(RunnerError::BadBatch("feed: no tokens".into()));
        }
        let chunk = self.engine().prefill_chunk.max(1);
        let mut last = Vec::new();
        for piece in tokens.chunks(chunk) {
            let start = seq.tokens.len();
            let need = (start + piece.len()).div_ceil(seq.block_tokens);
            if need > seq.blocks.len() {
                let pool = self.pool();
                let more = pool
                    .lock()
                    .map_err(|_| RunnerError::Other("KV pool lock poisoned".into()))?
                    .alloc(need - seq.blocks.len())?;
                seq.blocks.extend(more);
            }
            last = self.forward(&ForwardBatch::single(piece, start, &seq.blocks))?.data;
            seq.tokens.extend_from_slice(piece);
        }
        Ok(last)
    }
}
