//! Drafting with a second, smaller model of the same vocabulary: its own [`ModelRunner`]
//! and KV pool inside the engine. Each drafting sequence keeps its own K/V in the draft
//! pool, in step with the tokens verification accepted; drafts are greedy (largest
//! logit, smallest id on a tie). A draft only proposes: whatever it says, the target's
//! verification emits exactly the tokens of plain decoding (speculate.rs).

use tl_core::{ForwardBatch, ForwardSeq, ModelRunner, SharedPool};

use crate::error::{kv_err, lock, EngineError};

/// A sequence's K/V in the draft model's pool. Dropping it gives its blocks back (the
/// scheduler drops it wherever it releases the sequence's target blocks).
pub(crate) struct DraftKv {
    pool: SharedPool,
    /// Block table in the draft pool, (>= computed.div_ceil(B),).
    pub(crate) blocks: Vec<u32>,
    /// Leading tokens of the sequence whose draft K/V is in `blocks`.
    pub(crate) computed: usize,
}

impl DraftKv {
    /// No blocks yet, in `pool` (a draft model's, or an MTP head's).
    pub(crate) fn new(pool: SharedPool) -> DraftKv {
        DraftKv { pool, blocks: Vec::new(), computed: 0 }
    }
}

impl Drop for DraftKv {
    fn drop(&mut self) {
        // A poisoned lock means the draft pool is unusable anyway; nothing to give back to.
        if let Ok(mut g) = self.pool.lock() {
            let _ = tl_core::release_all(g.as_mut(), self.blocks.drain(..));
        }
    }
}

/// The largest logit's id (smallest id on a tie); `None` for an empty or NaN row.
pub(crate) fn argmax(row: &[f32]) -> Option<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in row.iter().enumerate() {
        if v.is_nan() {
            return None;
        }
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    best.map(|(i, _)| i as u32)
}

/// How sure the draft model is of `id`, the row's largest logit: its softmax
/// probability `1 / sum(exp(l - l[id]))`. Logits more than 16 below the largest add less
/// than 1.2e-7 each and are skipped, so a confident row costs one compare per entry. In
/// f32, summed in id order: the same row always gives the same answer.
pub(crate) fn confidence(row: &[f32], id: u32) -> f32 {
    let top = row[id as usize];
    let mut sum = 0.0f32;
    for &l in row {
        let d = l - top;
        if d > -16.0 {
            sum += d.exp();
        }
    }
    1.0 / sum
}

/// One sequence's draft request: its tokens (prompt then output), its draft K/V (made
/// on first use), how many tokens to draft, and where they go.
pub(crate) struct DraftJob<'a> {
    pub(crate) tokens: &'a [u32],
    pub(crate) kv: &'a mut Option<DraftKv>,
    pub(crate) k: usize,
    pub(crate) out: &'a mut Vec<u32>,
}

/// Draft up to `k` tokens for each job with the draft model: one batched draft forward
/// per drafted position. The first feeds each sequence's tokens the draft pool does not
/// hold yet (at least its last); each next one feeds the previous draft token. A
/// sequence's draft ends at the first token the draft model gives less than `p_min` of
/// its probability (that token is not drafted; `p_min` 0 drafts all `k`): on a CPU a
/// draft-model forward costs a third of the target's step and every verified row costs
/// too, so an unlikely token is cheaper left to plain decoding (llama.cpp's `--draft-p-min`
/// rule). A sequence whose draft blocks the pool cannot give drafts nothing (its `out` is
/// left as it was). Returns the forwards after the first and the seconds they took: the
/// cost of one drafted position (the first also feeds what the draft model has yet to
/// see, a whole prompt for a new sequence, so it would overstate it).
pub(crate) fn draft_with_model(
    drafter: &mut ModelRunner,
    jobs: &mut [DraftJob<'_>],
    p_min: f32,
) -> Result<(usize, f64), EngineError> {
    let (b, groups) = (drafter.block_tokens(), drafter.kv_layout().n_groups());
    let dpool = drafter.pool();
    let mut active: Vec<(usize, usize)> = Vec::new();
    {
        let mut g = lock(&dpool)?;
        for (i, job) in jobs.iter_mut().enumerate() {
            let len = job.tokens.len();
            let kv = job.kv.get_or_insert_with(|| DraftKv {
                pool: std::sync::Arc::clone(&dpool),
                blocks: Vec::new(),
                computed: 0,
            });
            kv.computed = kv.computed.min(len - 1);
            // Positions fed: the catch-up up to tokens.len() - 1, then d1..d(k-1).
            let need = (len + job.k - 1).div_ceil(b) * groups;
            if kv.blocks.len() < need && drafter.kv_layout().alloc_entries(g.as_mut(), &mut kv.blocks, need).is_err() {
                continue;
            }
            active.push((i, job.k));
        }
    }
    let mut drafts: Vec<Vec<u32>> = vec![Vec::new(); active.len()];
    let kmax = active.iter().map(|&(_, k)| k).max().unwrap_or(0);
    let (mut forwards, mut secs) = (0, 0.0);
    for j in 0..kmax {
        // Sequences still drafting at position j (a missing logit row ends a draft).
        let live: Vec<usize> = (0..active.len()).filter(|&a| active[a].1 > j && drafts[a].len() == j).collect();
        if live.is_empty() {
            break;
        }
        let seqs = live
            .iter()
            .map(|&a| {
                let job = &jobs[active[a].0];
                let kv = job.kv.as_ref().ok_or_else(|| kv_err("draft K/V missing"))?;
                let (tokens, start) = if j == 0 {
                    (&job.tokens[kv.computed..], kv.computed)
                } else {
                    (&drafts[a][j - 1..j], job.tokens.len() + j - 1)
                };
                Ok(ForwardSeq { tokens, start, blocks: &kv.blocks, adapter: None })
            })
            .collect::<Result<Vec<_>, EngineError>>()?;
        let t = std::time::Instant::now();
        let logits = drafter.forward(&ForwardBatch { seqs }).map_err(kv_err)?;
        if j > 0 {
            (forwards, secs) = (forwards + 1, secs + t.elapsed().as_secs_f64());
        }
        for (row, &a) in live.iter().enumerate() {
            let job = &mut jobs[active[a].0];
            let len = job.tokens.len();
            if let Some(kv) = job.kv.as_mut() {
                kv.computed = len + j;
            }
            let row = logits.row(row);
            if let Some(id) = argmax(row).filter(|&id| p_min <= 0.0 || confidence(row, id) >= p_min) {
                drafts[a].push(id);
            }
        }
    }
    for ((i, _), d) in active.into_iter().zip(drafts) {
        *jobs[i].out = d;
    }
    Ok((forwards, secs))
}
