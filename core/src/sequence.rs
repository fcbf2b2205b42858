//! One sequence's blocks and tokens, for callers that run a single conversation
//! (generate, chat, perplexity): the runner grows its block table as it is fed, gives a
//! windowed group's pages back once no later query sees them (docs/kv.md), and the rest
//! go back to the pool when the sequence is dropped.

use crate::batch::ForwardBatch;
use crate::kv::SharedPool;
use crate::layout::{release_all, KvLayout, NO_BLOCK};
use crate::runner::{ModelRunner, RunnerError};

/// A sequence whose K/V live in the runner's pool.
pub struct Sequence {
    pool: SharedPool,
    block_tokens: usize,
    layout: KvLayout,
    tokens: Vec<u32>,
    // (rows, G) block table: position j of group k in blocks[(j / block_tokens) * G + k]
    blocks: Vec<u32>,
    /// The LoRA adapter and scale every step of this sequence runs under.
    adapter: Option<(std::sync::Arc<crate::adapter::Adapter>, f32)>,
}

impl Sequence {
    /// The sequence with every later step run under `adapter` at `scale` (its K/V so far,
    /// if any, must have been computed under the same: a fresh sequence is the usual case).
    pub fn with_adapter(mut self, adapter: std::sync::Arc<crate::adapter::Adapter>, scale: f32) -> Sequence {
        self.adapter = Some((adapter, scale));
        self
    }

    /// Tokens whose K/V are in the cache.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// The block table, `(rows, G)` ([`crate::ForwardSeq::blocks`]; given-back entries
    /// are [`NO_BLOCK`]).
    pub fn blocks(&self) -> &[u32] {
        &self.blocks
    }

    /// Forget every token from `len` on (their blocks past `len` go back to the pool),
    /// so the next feed overwrites them; returns the length kept. That is `len`, or 0
    /// when a query at `len` would need a windowed page already given back (the K/V of
    /// those positions is gone: everything is fed again), or when a hybrid model's cut is
    /// not at a block boundary with its state snapshot there.
    pub fn truncate(&mut self, len: usize) -> Result<usize, RunnerError> {
        if len >= self.tokens.len() {
            return Ok(self.tokens.len());
        }
        let n = self.layout.n_groups();
        let b = self.block_tokens;
        let rows = len.div_ceil(b);
        let gone =
            (0..n).any(|k| (self.layout.first_live_row(k, len, b)..rows).any(|r| self.blocks[r * n + k] == NO_BLOCK));
        // A recurrent state is kept only at block boundaries (kv.md): a cut inside a row
        // has no state to resume from.
        let mid_row = self.layout.state_column().is_some() && !len.is_multiple_of(b);
        let len = if gone || mid_row { 0 } else { len };
        self.tokens.truncate(len);
        let keep = len.div_ceil(b);
        let mut pool = self.pool.lock().map_err(|_| RunnerError::Other("KV pool lock poisoned".into()))?;
        release_all(pool.as_mut(), self.blocks.drain(keep * n..))?;
        if keep > 0 {
            for &id in &self.blocks[(keep - 1) * n..] {
                if id != NO_BLOCK {
                    pool.set_fill(id, (len - (keep - 1) * b) as u32)?;
                }
            }
        }
        Ok(len)
    }
}

impl Sequence {
    /// Every token's K/V as one KV envelope (docs/formats/kv-block.md), in block-table
    /// order: what [`ModelRunner::resume`] takes back (`chat --session`). Refused once a
    /// windowed page was given back: that K/V is gone, a resume could not rebuild it.
    /// A hybrid model's table has holes in its state column (rows without a snapshot):
    /// they travel as holes (envelope version 3); the last row's slot, the state a resume
    /// runs on from, must be there.
    pub fn export(&self) -> Result<Vec<u8>, RunnerError> {
        if let Some(i) = (0..self.blocks.len()).find(|&i| self.blocks[i] == NO_BLOCK && !self.may_be_empty(i)) {
            return Err(RunnerError::Other(format!(
                "the sequence gave KV entry {i} back (a windowed page); its KV is not all there"
            )));
        }
        let pool = self.pool.lock().map_err(|_| RunnerError::Other("KV pool lock poisoned".into()))?;
        Ok(pool.export(&self.blocks)?)
    }
}

impl Sequence {
    /// Whether table entry `i` may be [`NO_BLOCK`] in a whole sequence: a state-column
    /// entry of a row before the last (a row without a snapshot).
    fn may_be_empty(&self, i: usize) -> bool {
        let n = self.layout.n_groups();
        Some(i % n) == self.layout.state_column() && i / n + 1 < self.blocks.len() / n
    }
}

impl Drop for Sequence {
    fn drop(&mut self) {
        if let Ok(mut pool) = self.pool.lock() {
            // A failed release here would mean the table was corrupted elsewhere;
            // nothing better to do in a destructor than leave the block.
            let _ = release_all(pool.as_mut(), self.blocks.drain(..));
        }
    }
}

impl ModelRunner {
    /// A new, empty sequence on this runner's pool.
    pub fn sequence(&self) -> Sequence {
        Sequence {
            pool: self.pool(),
            block_tokens: self.block_tokens(),
            layout: self.kv_layout().clone(),
            tokens: Vec::new(),
            blocks: Vec::new(),
            adapter: None,
        }
    }

    /// A sequence holding `tokens` whose K/V come from `envelope`, a
    /// [`Sequence::export`] of a sequence of those tokens on this model and KV backend.
    /// The pool's import checks the envelope (element type, geometry, length, checksum);
    /// then the pages must be exactly the table of `tokens.len()` positions, each as full
    /// as those positions fill it. On any error no block stays taken. The tokens must be
    /// the exported sequence's: the envelope carries no token ids, so the caller keeps
    /// them beside it (and checks them).
    pub fn resume(&self, tokens: Vec<u32>, envelope: &[u8]) -> Result<Sequence, RunnerError> {
        let mut seq = self.sequence();
        seq.blocks =
            self.pool().lock().map_err(|_| RunnerError::Other("KV pool lock poisoned".into()))?.import(envelope)?;
        // From here a failure drops `seq`, which gives the imported blocks back.
        let (b, n, len) = (self.block_tokens().max(1), self.kv_layout().n_groups(), tokens.len());
        if seq.blocks.len() != self.table_len(len) {
            return Err(RunnerError::Other(format!(
                "the saved KV holds {} pages; {len} tokens need {}",
                seq.blocks.len(),
                self.table_len(len)
            )));
        }
        {
            let pool = self.pool();
            let pool = pool.lock().map_err(|_| RunnerError::Other("KV pool lock poisoned".into()))?;
            for (i, &id) in seq.blocks.iter().enumerate() {
                if id == NO_BLOCK {
                    if seq.may_be_empty(i) {
                        continue;
                    }
                    return Err(RunnerError::Other(format!("saved KV entry {i} is empty; {len} tokens need it")));
                }
                let want = (len - (i / n) * b).min(b) as u32;
                let fill = pool.fill(id)?;
                if fill != want {
                    return Err(RunnerError::Other(format!("saved KV page {i} holds {fill} positions, not {want}")));
                }
            }
        }
        seq.tokens = tokens;
        Ok(seq)
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
            let need = self.table_len(start + piece.len());
            let pool = self.pool();
            let lock = || pool.lock().map_err(|_| RunnerError::Other("KV pool lock poisoned".into()));
            seq.layout.alloc_entries(lock()?.as_mut(), &mut seq.blocks, need)?;
            let adapter = seq.adapter.as_ref().map(|(a, s)| crate::adapter::Applied { adapter: a, scale: *s });
            let one = crate::batch::ForwardSeq { tokens: piece, start, blocks: &seq.blocks, adapter };
            last = self.forward(&ForwardBatch { seqs: vec![one] })?.data;
            seq.tokens.extend_from_slice(piece);
            let next = seq.tokens.len();
            seq.layout.release_out_of_window(lock()?.as_mut(), &mut seq.blocks, next, seq.block_tokens)?;
        }
        Ok(last)
    }
}
