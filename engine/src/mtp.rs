//! Drafting with the model's own multi-token-prediction head (`Speculation::Mtp`): a
//! runner of the head (`ModelRunner::load_draft_head`, its own KV pool) beside the target.
//!
//! The head's position `p` holds the pair `(h_p, t_{p+1})`: the target's final hidden state
//! at `p` and the token after it; its logits there guess `t_{p+2}`. So each speculating
//! sequence keeps the target's hidden rows of its positions (every step that feeds it asks
//! the forward for them) until the head has consumed them, and the head's K/V is kept in
//! step with the target's accepted positions. A draft step, when the target has computed
//! positions `..n-1` of `n` tokens: the head catches up over its positions `c..n-1` (the
//! last gives `d1`), then each next draft feeds the previous one at the next position with
//! the head's own output state in place of the target's (`d2..dk`). Those chained
//! positions used no target state, so the head's K/V counts as valid only below `n - 1`.
//!
//! Whatever the head drafts, verification emits plain decoding's tokens (speculate.rs). A
//! sequence whose hidden rows have a gap (its prompt preloaded by P/D) drafts nothing;
//! such a sequence takes no prefix-cache hits (scheduler.rs), as an embedding does not.

use std::sync::Arc;

use tl_core::{ForwardBatch, ForwardSeq, ModelRunner};

use crate::draft::{argmax, DraftKv};
use crate::error::{kv_err, lock, EngineError};

/// A sequence's MTP drafting state: the head's K/V, and the target's hidden rows of the
/// positions the head has not consumed yet.
pub(crate) struct MtpState {
    /// The head's K/V; `computed`: leading positions whose entry used the target's state.
    kv: DraftKv,
    /// `(rows, d)` the target's final hidden states of positions `from..`.
    hidden: Vec<f32>,
    from: usize,
}

impl MtpState {
    /// Nothing kept yet; the head's K/V in `pool`.
    pub(crate) fn new(pool: tl_core::SharedPool) -> MtpState {
        MtpState { kv: DraftKv::new(pool), hidden: Vec::new(), from: 0 }
    }

    /// Keep the target's hidden rows `rows` `(m, d)` of positions `start..start + m`. Rows
    /// that continue (or overlap, after a recompute: the same bits) the kept ones join
    /// them; after a gap they replace them.
    pub(crate) fn absorb(&mut self, rows: &[f32], start: usize, d: usize) {
        let end = self.from + self.hidden.len() / d;
        if start < self.from || start > end {
            self.hidden.clear();
            self.from = start;
        } else {
            self.hidden.truncate((start - self.from) * d);
        }
        self.hidden.extend_from_slice(rows);
    }
}

/// One sequence's draft request (as draft.rs's `DraftJob`).
pub(crate) struct MtpJob<'a> {
    pub(crate) tokens: &'a [u32],
    pub(crate) state: &'a mut Option<MtpState>,
    pub(crate) k: usize,
    pub(crate) out: &'a mut Vec<u32>,
}

/// Draft up to `k` tokens for each job with the head: one batched head step per drafted
/// position. A job whose hidden rows do not reach from the head's K/V to its last fed
/// position, or whose head blocks the pool cannot give, drafts nothing.
pub(crate) fn draft_with_head(head: &mut ModelRunner, jobs: &mut [MtpJob<'_>]) -> Result<(), EngineError> {
    let (b, d) = (head.block_tokens(), head.hidden_size());
    let pool = head.pool();
    let mut active: Vec<usize> = Vec::new();
    {
        let mut g = lock(&pool)?;
        for (i, job) in jobs.iter_mut().enumerate() {
            let n = job.tokens.len();
            let st = job.state.get_or_insert_with(|| MtpState::new(Arc::clone(&pool)));
            let c = st.kv.computed.min(n - 1);
            st.kv.computed = c;
            // The catch-up needs the target's rows of positions c..n-1.
            let rows = st.hidden.len() / d;
            if n < 2 || st.from > c || st.from + rows < n - 1 {
                continue;
            }
            // Positions written: the catch-up to n - 2, then n - 1 .. n + k - 3.
            let need = (n + job.k - 2).div_ceil(b);
            if st.kv.blocks.len() < need && head.kv_layout().alloc_entries(g.as_mut(), &mut st.kv.blocks, need).is_err()
            {
                continue;
            }
            active.push(i);
        }
    }
    let mut drafts: Vec<Vec<u32>> = vec![Vec::new(); active.len()];
    // The head's own output state of each active job's last row, for its next draft.
    let mut state: Vec<Vec<f32>> = vec![Vec::new(); active.len()];
    let kmax = active.iter().map(|&i| jobs[i].k).max().unwrap_or(0);
    for j in 0..kmax {
        let live: Vec<usize> = (0..active.len()).filter(|&a| jobs[active[a]].k > j && drafts[a].len() == j).collect();
        if live.is_empty() {
            break;
        }
        let mut given = Vec::new();
        let mut ends = Vec::with_capacity(live.len()); // each sequence's last row
        let seqs = live
            .iter()
            .map(|&a| {
                let job = &jobs[active[a]];
                let st = job.state.as_ref().ok_or_else(|| kv_err("MTP state missing"))?;
                let n = job.tokens.len();
                let (tokens, start) = if j == 0 {
                    let c = st.kv.computed;
                    given.extend_from_slice(&st.hidden[(c - st.from) * d..(n - 1 - st.from) * d]);
                    (&job.tokens[c + 1..n], c)
                } else {
                    given.extend_from_slice(&state[a]);
                    (&drafts[a][j - 1..j], n - 2 + j)
                };
                ends.push(given.len() / d - 1);
                Ok(ForwardSeq { tokens, start, blocks: &st.kv.blocks, adapter: None })
            })
            .collect::<Result<Vec<_>, EngineError>>()?;
        let out = head.forward_given(&ForwardBatch { seqs }, &given).map_err(kv_err)?;
        let hidden = out.hidden.ok_or_else(|| kv_err("the MTP head returned no hidden states"))?;
        for (row, (&a, &end)) in live.iter().zip(&ends).enumerate() {
            state[a] = hidden[end * d..(end + 1) * d].to_vec();
            if let Some(id) = argmax(out.logits.row(row)) {
                drafts[a].push(id);
            }
        }
    }
    for (a, dr) in drafts.into_iter().enumerate() {
        let job = &mut jobs[active[a]];
        let n = job.tokens.len();
        if let Some(st) = job.state.as_mut() {
            // Entries from n - 1 on were given the head's own state: not the target's.
            st.kv.computed = n - 1;
            let used = (n - 1 - st.from) * d;
            st.hidden.drain(..used);
            st.from = n - 1;
        }
        *job.out = dr;
    }
    Ok(())
}
