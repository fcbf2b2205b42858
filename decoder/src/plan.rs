//! The step plan: where each token of a step sits (its sequence, its absolute position),
//! checked against the KV pool before anything is written.

use tl_core::{ForwardBatch, KvLayout, KvSlabs, ModelError, NO_BLOCK};

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
    /// `(S,)` block-table rows each sequence reads: `ceil((start + n) / B)`.
    pub n_blocks: Vec<usize>,
    /// Pages per block-table row (the layout's groups), G.
    pub groups: usize,
    /// Positions per block, B.
    pub block_tokens: usize,
    /// `(n_layers,)` each layer's (group, slab index in its page).
    pub slots: Vec<(usize, u32)>,
}

fn bad(msg: String) -> ModelError {
    ModelError::BadBatch(msg)
}

impl Plan {
    /// The runner checks batches in full (context length, block references); this repeats
    /// only what the forward needs to index safely, and runs before any slab is touched,
    /// so a bad batch reaching the model directly is an `Err`, never a panic or half a
    /// write.
    pub fn new(
        batch: &ForwardBatch,
        shape: StepShape,
        kv: &dyn KvSlabs,
        layout: &KvLayout,
    ) -> Result<Plan, ModelError> {
        let g = kv.geometry();
        let want = (shape.n_layers, shape.n_kv_heads, shape.head_dim);
        let page = (layout.n_layers(), g.n_kv_heads as usize, g.head_dim as usize);
        let state = layout.state_column();
        if page != want || g.n_layers != layout.group_layers() || g.block_tokens == 0 {
            return Err(ModelError::Other(format!(
                "KV pool geometry {g:?} ({} groups of {} layers) does not fit the model (layers, kv heads, head dim) \
                 = {want:?}",
                layout.n_groups(),
                layout.group_layers()
            )));
        }
        let n = layout.n_groups();
        let b = g.block_tokens as usize;
        if batch.seqs.is_empty() {
            return Err(bad("no sequences".into()));
        }
        let slots = (0..shape.n_layers as u32).filter_map(|l| layout.slot(l)).collect();
        let mut plan = Plan {
            seq_of: Vec::new(),
            pos: Vec::new(),
            last: Vec::new(),
            n_blocks: Vec::new(),
            groups: n,
            block_tokens: b,
            slots,
        };
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
            if s.blocks.len() < needed * n {
                return Err(bad(format!("sequence {i}: {} blocks cannot hold position {}", s.blocks.len(), end - 1)));
            }
            for (e, &id) in s.blocks[..needed * n].iter().enumerate() {
                // A windowed group's page given back is one the step's first query (and so
                // every later one) no longer sees; any other id the pool cannot serve is
                // an Err here, before any write.
                if id == NO_BLOCK && e / n < layout.first_live_row(e % n, s.start, b) {
                    continue;
                }
                // A state column keeps a snapshot only where the scheduler allocated one:
                // the step reads the row before it and runs in its last row's slot.
                if id == NO_BLOCK && Some(e % n) == state && e / n >= s.start / b && e / n + 1 != needed {
                    continue;
                }
                if Some(e % n) == state {
                    kv.state(id, 0)?; // a state slot the pool serves
                } else {
                    kv.check_slab(id, 0)?;
                }
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

    /// Layer `layer`'s (group, slab index in its page); an error past the last layer.
    pub fn slot(&self, layer: u32) -> Result<(usize, u32), ModelError> {
        self.slots
            .get(layer as usize)
            .copied()
            .ok_or_else(|| ModelError::Other(format!("layer {layer} is not in the KV layout")))
    }
}
