//! Speculation as a component of the step: plan drafts for the sequences that speculate,
//! then verify each drafting sequence's rows. The step calls [`Speculator::plan`] only
//! when a running sequence speculates and [`Speculator::verify`] only for a sequence
//! that drafted this step; every other sequence samples once (emit.rs). Why verification
//! emits exactly the tokens of plain decoding: speculate.rs.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tl_core::{Logits, ModelRunner, SharedPool};

use crate::draft::{draft_with_model, DraftJob};
use crate::emit::Emitter;
use crate::error::{kv_err, lock, EngineError};
use crate::mtp::{draft_with_head, MtpJob, MtpState};
use crate::request::FinishReason;
use crate::seq::Seq;
use crate::speculate::{ngram_draft, Drafter, Speculation, StepCosts, SPEC_STEP_ROWS};
use crate::stats::Shared;

/// The drafting half of the engine: the draft model, when there is one, and the limits
/// drafts live within.
pub(crate) struct Speculator {
    /// The draft model, when the engine has one.
    drafter: Option<ModelRunner>,
    /// The model's MTP head, when loaded (mtp.rs).
    head: Option<ModelRunner>,
    /// The target's pool: drafted positions take blocks from it until verified.
    pool: SharedPool,
    shared: Arc<Shared>,
    max_batch_tokens: usize,
    block_tokens: usize,
    max_ctx: Option<usize>,
    /// Entries per block-table row of the target's tables (its layer groups).
    groups: usize,
    /// The target's KV layout: which entry of a row is a page and which a state slot.
    layout: tl_core::KvLayout,
    /// Drafts join a step only while it holds fewer rows than this
    /// (`EngineOptions::spec_step_rows`).
    pub(crate) step_rows: usize,
    /// A draft model's draft ends at a token it gives less than this probability
    /// (`EngineOptions::spec_p_min`; 0: never).
    pub(crate) p_min: f32,
    /// Choose each draft's length from `costs` (`EngineOptions::spec_costs`).
    pub(crate) measured: bool,
    /// This engine's measured step and drafting costs (the step records its steps).
    pub(crate) costs: StepCosts,
}

impl Speculator {
    pub(crate) fn new(
        (drafter, head): (Option<ModelRunner>, Option<ModelRunner>),
        pool: SharedPool,
        shared: Arc<Shared>,
        max_batch_tokens: usize,
        block_tokens: usize,
        max_ctx: Option<usize>,
    ) -> Speculator {
        Speculator {
            drafter,
            head,
            pool,
            shared,
            max_batch_tokens,
            block_tokens,
            max_ctx,
            groups: 1,
            layout: tl_core::KvLayout::uniform(1),
            step_rows: SPEC_STEP_ROWS,
            p_min: 0.0,
            measured: false,
            costs: StepCosts::default(),
        }
    }

    /// The target's tables follow `layout` (its groups' pages, and state slots).
    pub(crate) fn with_layout(mut self, layout: &tl_core::KvLayout) -> Speculator {
        self.groups = layout.n_groups().max(1);
        self.layout = layout.clone();
        self
    }

    /// Draft for the planned sequences that speculate and whose last token is fed this
    /// step, oldest first, while the step's token budget has room (drafts only use what
    /// planning left, so they never delay a prompt's admission). Each draft gets the
    /// blocks its positions need, or is cut to the blocks the sequence has when the pool
    /// is short (a draft never preempts). Sets `draft` and `feed`; true if any drafted.
    pub(crate) fn plan(&mut self, running: &mut [Seq], planned: &[usize]) -> Result<bool, EngineError> {
        let used: usize = planned.iter().map(|&i| running[i].take).sum();
        let mut budget = self.max_batch_tokens.saturating_sub(used);
        let mut rows = used; // rows in the step so far, drafts included
        let b = self.block_tokens;
        // Who drafts how many: n-gram drafts now, draft-model ones in one batched pass.
        let mut chosen = Vec::new();
        let mut by_model = Vec::new();
        let mut by_head = Vec::new();
        for &i in planned {
            let s = &mut running[i];
            let fed_last = s.computed + s.take == s.tokens.len();
            // The head drafts from the target's state before the last token: a decode step.
            let decode = s.take == 1 && fed_last;
            // Never draft past what the sequence may still emit: at most `left` tokens
            // after this step's first, and positions below the context.
            let left = s.req.max_tokens.saturating_sub(s.generated() + 1);
            let ctx_left = self.max_ctx.map_or(usize::MAX, |m| m.saturating_sub(s.tokens.len()));
            let Some(d) = s.tail.drafting_mut() else { continue };
            d.draft.clear();
            if budget == 0 || rows >= self.step_rows || !fed_last {
                continue;
            }
            let k = d.spec.k().min(budget).min(left).min(ctx_left);
            if k == 0 || d.accept.retired || !d.adapt.may_draft() {
                continue;
            }
            // The length that gives the most tokens per second by the measured costs. A
            // probe (the first draft, the first after a pause) drafts `k` to measure again,
            // unless not even drafts that are always accepted would pay enough (`pays`).
            let k = if self.measured {
                let which = match d.spec {
                    Speculation::Draft { .. } => Some(Drafter::Model),
                    Speculation::Mtp { .. } => Some(Drafter::Head),
                    _ => None,
                };
                let hopeless = self.costs.pays(rows, k, which) == Some(false);
                let best = if hopeless {
                    Some(0)
                } else if d.accept.probe {
                    None
                } else {
                    self.costs.best_k(rows, k, d.accept.rate(), which)
                };
                let model = which == Some(Drafter::Model);
                match best {
                    Some(0) if model && (hopeless || d.accept.settled()) => {
                        d.accept.retired = true;
                        continue;
                    }
                    // Too few verified drafts to judge: one token keeps the evidence coming.
                    Some(0) if model => 1,
                    Some(0) => {
                        d.adapt.rest();
                        d.accept.probe = true;
                        continue;
                    }
                    Some(best) => best,
                    None => k,
                }
            } else {
                k
            };
            match d.spec {
                Speculation::Ngram { .. } => {
                    ngram_draft(&s.tokens, k, &mut d.draft);
                    if d.draft.is_empty() {
                        continue;
                    }
                    budget -= d.draft.len();
                    rows += d.draft.len();
                }
                Speculation::Draft { .. } => {
                    by_model.push((i, k));
                    budget -= k;
                    rows += k;
                }
                Speculation::Mtp { .. } if decode => {
                    by_head.push((i, k));
                    budget -= k;
                    rows += k;
                }
                Speculation::Mtp { .. } => continue,
                Speculation::Off => continue,
            }
            chosen.push(i);
        }
        if let (Some(drafter), false) = (self.drafter.as_mut(), by_model.is_empty()) {
            // One job per drafting sequence, each borrowing its own sequence's parts.
            let mut jobs: Vec<DraftJob<'_>> = Vec::with_capacity(by_model.len());
            let mut want = by_model.iter().peekable();
            for (i, s) in running.iter_mut().enumerate() {
                let Some(&&(_, k)) = want.peek().filter(|&&&(j, _)| j == i) else { continue };
                want.next();
                let Some(d) = s.tail.drafting_mut() else { continue };
                jobs.push(DraftJob { tokens: &s.tokens, kv: &mut d.kv, k, out: &mut d.draft });
            }
            let (forwards, secs) = draft_with_model(drafter, &mut jobs, self.p_min)?;
            self.costs.drafted(Drafter::Model, forwards, secs);
        }
        if let (Some(head), false) = (self.head.as_mut(), by_head.is_empty()) {
            let mut jobs: Vec<MtpJob<'_>> = Vec::with_capacity(by_head.len());
            let mut want = by_head.iter().peekable();
            for (i, s) in running.iter_mut().enumerate() {
                let Some(&&(_, k)) = want.peek().filter(|&&&(j, _)| j == i) else { continue };
                want.next();
                let Some(d) = s.tail.drafting_mut() else { continue };
                jobs.push(MtpJob { tokens: &s.tokens, state: &mut d.mtp, k, out: &mut d.draft });
            }
            let t = Instant::now();
            draft_with_head(head, &mut jobs)?;
            let forwards = by_head.iter().map(|&(_, k)| k).max().unwrap_or(0);
            self.costs.drafted(Drafter::Head, forwards, t.elapsed().as_secs_f64());
        }
        let mut g = lock(&self.pool)?;
        let mut any = false;
        for i in chosen {
            let s = &mut running[i];
            let Some(d) = s.tail.drafting_mut() else { continue };
            if d.draft.is_empty() {
                // The draft model ran and was not sure of even one token: its forward was
                // paid for nothing, a miss for the adaptive rule (two in a row pause it).
                if matches!(d.spec, Speculation::Draft { .. }) {
                    d.adapt.verified(0, 1);
                    d.accept.verified(0, 1);
                }
                continue;
            }
            d.spec_blocks = s.blocks.len();
            let need = (s.tokens.len() + d.draft.len()).div_ceil(b) * self.groups;
            if s.blocks.len() < need && self.layout.alloc_entries(g.as_mut(), &mut s.blocks, need).is_err() {
                d.draft.truncate(s.blocks.len() / self.groups * b - s.tokens.len());
            }
            // A hybrid's verify step keeps the state after each position it may roll back
            // to; no spare slots to be had, no draft this step (a draft never preempts).
            if self.layout.state_column().is_some() && !d.draft.is_empty() {
                match g.alloc_slots(d.draft.len()) {
                    Ok(s) => d.spares = s,
                    Err(_) => d.draft.clear(),
                }
            }
            if d.draft.is_empty() {
                continue;
            }
            d.feed.clear();
            d.feed.extend_from_slice(&s.tokens[s.computed..]);
            d.feed.extend_from_slice(&d.draft);
            any = true;
        }
        Ok(any)
    }

    /// Keep the target's hidden rows `rows` of positions `start..` for `s`'s MTP head (a
    /// sequence that drafts otherwise keeps none).
    pub(crate) fn keep_hidden(&self, s: &mut Seq, rows: &[f32], start: usize) {
        let (Some(head), Some(d)) = (self.head.as_ref(), s.tail.drafting_mut()) else { return };
        if !matches!(d.spec, Speculation::Mtp { .. }) {
            return;
        }
        d.mtp.get_or_insert_with(|| MtpState::new(head.pool())).absorb(rows, start, head.hidden_size());
    }

    /// Sample `s`'s rows from `first` on, in order, exactly as plain steps would (its own
    /// sampler, penalties over the tokens emitted so far, grammar advanced per token, one
    /// PCG32 stream), emitting each sampled token; continue while the sampled token is
    /// the draft's (its K/V, written by this step, is then the sequence's own). Rejected
    /// positions touch nothing: `computed` stops at the accepted length and the blocks
    /// taken for the draft beyond it go back. `Some` when the sequence is done.
    pub(crate) fn verify(
        &self,
        s: &mut Seq,
        em: &mut Emitter,
        logits: &Logits,
        first: usize,
    ) -> Result<Option<FinishReason>, EngineError> {
        let draft = s.tail.drafting_mut().map(|d| std::mem::take(&mut d.draft)).unwrap_or_default();
        let mut accepted = 0;
        let result = loop {
            match s.sample(em, logits.row(first + accepted)) {
                Ok(None) => {
                    if accepted < draft.len() && s.tokens.last() == Some(&draft[accepted]) {
                        s.computed += 1;
                        accepted += 1;
                        continue;
                    }
                    break Ok(None);
                }
                other => break other,
            }
        };
        let Some(d) = s.tail.drafting_mut().filter(|_| !draft.is_empty()) else { return result };
        self.shared.draft_proposed.fetch_add(draft.len(), Ordering::Relaxed);
        self.shared.draft_accepted.fetch_add(accepted, Ordering::Relaxed);
        d.adapt.verified(accepted, draft.len());
        d.accept.verified(accepted, draft.len());
        if let Some(kv) = d.kv.as_mut() {
            // The draft model's K/V holds the draft's tokens: only accepted ones stay valid.
            kv.computed = kv.computed.min(s.computed);
        }
        let keep = d.spec_blocks.max(s.computed.div_ceil(self.block_tokens) * self.groups).min(s.blocks.len());
        let mut g = lock(&self.pool)?;
        let mut spares = std::mem::take(&mut d.spares);
        if let (Some(col), Some(j)) = (self.layout.state_column(), (accepted < draft.len()).then_some(accepted)) {
            // Rolled back: the state after the last accepted position is spare `j`'s; it
            // becomes the slot of that position's row (whatever that row held, a slot or
            // a hole, has the rejected drafts in it or nothing).
            let (b, e) = (self.block_tokens, (s.computed - 1) / self.block_tokens * self.groups + col);
            // Its fill: the row's positions through the accepted one (a prefix cache
            // registers the row's slot once the row is full).
            g.set_fill(spares[j], ((s.computed - 1) % b + 1) as u32).map_err(kv_err)?;
            let old = std::mem::replace(&mut s.blocks[e], spares[j]);
            spares[j] = old;
        }
        tl_core::release_all(g.as_mut(), spares).map_err(kv_err)?;
        tl_core::release_all(g.as_mut(), s.blocks.drain(keep..)).map_err(kv_err)?;
        d.draft = draft;
        d.draft.clear();
        result
    }
}
