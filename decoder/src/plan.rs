//! The step plan: where each token of a step sits (its sequence, its absolute position),
//! checked against the KV pool before anything is written.

use tl_core::{ForwardBatch, KvSlabs, ModelError};

/// What a model expects of a step: its KV geometry (layers, KV heads, head size) and its
/// vocabulary (token ids must be below it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepShape {
    /// Transformer layers (KV slabs per block).
    pub n_layers: usize,
    /// KV heads H_kv.
    pub n_kv_heads: usize,
    /// Head size D.
    pub head_dim: usize,
    /// Vocabulary size V.
    pub vocab_size: usize,
}

/// Where each token of the step sits. The N tokens are laid out in batch order: sequence
/// 0's tokens, then sequence 1's, ...; every per-token buffer of a forward is `(N, ...)`
/// in that order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// `(N,)` the sequence of each token.
    pub seq_of: Vec<usize>,
    /// `(N,)` absolute position of each token.
    pub pos: Vec<usize>,
    /// `(S,)` index in the step of each sequence's last token.
    pub last: Vec<usize>,
    /// `(S,)` blocks each sequence reads: `ceil((start + n) / B)`.
    pub n_blocks: Vec<usize>,
}

fn bad(msg: String) -> ModelError {
    ModelError::BadBatch(msg)
}

impl Plan {
    /// The runner checks batches in full (context length, block references); this repeats
    /// only what the forward needs to index safely, and runs before any slab is touched,
    /// so a bad batch reaching the model directly is an `Err`, never a panic or half a
    /// write.
    pub fn new(batch: &ForwardBatch, shape: StepShape, kv: &dyn KvSlabs) -> Result<Plan, ModelError> {
        let g = kv.geometry();
        let want = (shape.n_layers, shape.n_kv_heads, shape.head_dim);
        if (g.n_layers as usize, g.n_kv_heads as usize, g.head_dim as usize) != want || g.block_tokens == 0 {
            return Err(ModelError::Other(format!(
                "KV pool geometry {g:?} does not fit the model (layers, kv heads, head dim) = {want:?}"
            )));
        }
        let b = g.block_tokens as usize;
        if batch.seqs.is_empty() {
            return Err(bad("no sequences".into()));
        }
        let mut plan = Plan { seq_of: Vec::new(), pos: Vec::new(), last: Vec::new(), n_blocks: Vec::new() };
        for (i, s) in batch.seqs.iter().enumerate() {
            if s.tokens.is_empty() {
                return Err(bad(format!("sequence {i} has no tokens")));
            }
            if let Some(&t) = s.tokens.iter().find(|&&t| t as usize >= shape.vocab_size) {
                return Err(bad(format!("sequence {i}: token id {t} >= vocab_size {}", shape.vocab_size)));
            }
            let end =
                s.start.checked_add(s.tokens.len()).ok_or_else(|| bad(format!("sequence {i}: start overflows")))?;
            let needed = end.div_ceil(b);
            if s.blocks.len() < needed {
                return Err(bad(format!("sequence {i}: {} blocks cannot hold position {}", s.blocks.len(), end - 1)));
            }
            for &id in &s.blocks[..needed] {
                kv.check_slab(id, 0)?; // an id the pool cannot serve is an Err here, before any write
            }
            plan.seq_of.extend(std::iter::repeat_n(i, s.tokens.len()));
            plan.pos.extend(s.start..end);
            plan.last.push(plan.pos.len() - 1);
            plan.n_blocks.push(needed);
        }
        Ok(plan)
    }

    /// Tokens in the step, N.
    pub fn n_tokens(&self) -> usize {
        self.pos.len()
    }
}
