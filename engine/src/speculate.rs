//! Speculative decoding that changes nothing: drafting (n-gram prompt lookup, or a draft
//! model), the adaptive rule, and the settings.
//!
//! A sequence that drafts `d1..dk` feeds `[last, d1..dk]` as one chunk; the forward gives
//! row `j` of that chunk the bits a one-token step after `d1..dj` would give it (the
//! forward is chunk- and batch-invariant), so sampling rows in order with the request's
//! own sampler, and stopping at the first sampled token that is not the draft's, emits
//! exactly the tokens plain decoding would. The scheduler's step does the verification
//! (scheduler.rs); this module only proposes.

use std::str::FromStr;
use std::sync::atomic::Ordering;

use tl_core::Logits;

use crate::request::{EngineError, FinishReason};
use crate::scheduler::{kv_err, lock, Scheduler};

/// The most tokens one sequence drafts per step.
pub const MAX_DRAFT: usize = 16;

/// Default of [`crate::EngineOptions::spec_step_rows`]: a sequence adds drafts to a step
/// only while the step holds fewer rows (tokens) than this. Drafted rows are nearly free
/// only while a step is bound by reading the weights, which on a CPU holds to ~5-8 rows
/// (past that each row adds its multiply-adds), so under load plain decoding is the faster
/// choice. Output is the same bits either way.
pub const SPEC_STEP_ROWS: usize = 8;

/// The longest suffix the n-gram lookup tries to match (then shorter ones, down to 1).
pub const NGRAM_MAX: usize = 4;

/// How a sequence drafts tokens to verify.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Speculation {
    /// Plain decoding: one token per step.
    Off,
    /// Prompt lookup over the sequence's own prompt and output: the longest suffix of
    /// length [`NGRAM_MAX`]..1 that occurred before proposes the `k` tokens that followed
    /// its latest earlier occurrence. No match, no speculation.
    Ngram {
        /// Most tokens drafted per step, `1..=MAX_DRAFT`.
        k: usize,
    },
    /// The engine's draft model (same vocabulary), greedy, `k` tokens per step.
    Draft {
        /// Most tokens drafted per step, `1..=MAX_DRAFT`.
        k: usize,
    },
}

impl Speculation {
    /// Tokens drafted per step (0 when off).
    pub fn k(self) -> usize {
        match self {
            Speculation::Off => 0,
            Speculation::Ngram { k } | Speculation::Draft { k } => k,
        }
    }

    /// Refuse a `k` outside `1..=MAX_DRAFT`.
    pub fn check(self) -> Result<(), String> {
        match self {
            Speculation::Off => Ok(()),
            _ if (1..=MAX_DRAFT).contains(&self.k()) => Ok(()),
            _ => Err(format!("k = {} is outside 1..={MAX_DRAFT}", self.k())),
        }
    }
}

impl FromStr for Speculation {
    type Err = String;

    /// `off`, `ngram`, `ngram:K`, `draft`, `draft:K` (the draft model itself is a server
    /// setting). K defaults to 4.
    fn from_str(s: &str) -> Result<Speculation, String> {
        let (kind, k) = match s.split_once(':') {
            Some((kind, k)) => {
                let k = k.parse::<usize>().map_err(|_| format!("speculate {s:?}: K must be a number"))?;
                (kind, k)
            }
            None => (s, 4),
        };
        let spec = match kind {
            "off" => Speculation::Off,
            "ngram" => Speculation::Ngram { k },
            "draft" => Speculation::Draft { k },
            _ => return Err(format!("speculate {s:?}: expected off, ngram[:K] or draft[:K]")),
        };
        spec.check().map_err(|e| format!("speculate {s:?}: {e}"))?;
        Ok(spec)
    }
}

/// Append to `out` up to `k` tokens proposed by prompt lookup over `tokens` (prompt then
/// output): for n from [`NGRAM_MAX`] down to 1, the latest earlier occurrence of the last
/// n tokens proposes the tokens that followed it. Nothing when no suffix recurs.
pub fn ngram_draft(tokens: &[u32], k: usize, out: &mut Vec<u32>) {
    let len = tokens.len();
    for n in (1..=NGRAM_MAX.min(len.saturating_sub(1))).rev() {
        let suffix = &tokens[len - n..];
        // Latest start j < len - n with tokens[j..j + n] == suffix; what follows is
        // tokens[j + n..], at least one token since j + n < len.
        let found = (0..len - n).rev().find(|&j| &tokens[j..j + n] == suffix);
        if let Some(j) = found {
            let from = j + n;
            out.extend_from_slice(&tokens[from..(from + k).min(len)]);
            return;
        }
    }
}

/// The adaptive rule, per sequence: a verify step *misses* when it accepts fewer than half
/// of its drafted tokens (a k+1-row step that yields one or two tokens costs more than it
/// saves). Two misses in a row pause drafting for `cool` plain steps; `cool` starts at 4
/// and doubles with every pause up to 64; a step that accepts at least half resets both.
/// So text where lookups keep missing soon runs at plain speed, and a copy-heavy stretch
/// is found again within at most 64 tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Adapt {
    misses: u32,
    pause: u32,
    cool: u32,
}

/// The first pause, in plain steps.
pub const COOL_START: u32 = 4;
/// The longest pause, in plain steps.
pub const COOL_MAX: u32 = 64;

impl Default for Adapt {
    fn default() -> Self {
        Adapt { misses: 0, pause: 0, cool: COOL_START }
    }
}

impl Adapt {
    /// Whether this step may draft; a paused sequence counts one plain step down.
    pub fn may_draft(&mut self) -> bool {
        if self.pause > 0 {
            self.pause -= 1;
            return false;
        }
        true
    }

    /// After a verify step that drafted `drafted` tokens and accepted `accepted` of them.
    pub fn verified(&mut self, accepted: usize, drafted: usize) {
        if accepted * 2 >= drafted.max(1) {
            *self = Adapt::default();
            return;
        }
        self.misses += 1;
        if self.misses >= 2 {
            self.misses = 0;
            self.pause = self.cool;
            self.cool = (self.cool * 2).min(COOL_MAX);
        }
    }
}

impl Scheduler {
    /// Draft for the planned sequences that speculate and whose last token is fed this
    /// step, oldest first, while the step's token budget has room (drafts only use what
    /// planning left, so they never delay a prompt's admission). Each draft gets the
    /// blocks its positions need, or is cut to the blocks the sequence has when the pool
    /// is short (a draft never preempts). Sets `draft` and `feed`; true if any drafted.
    pub(crate) fn plan_drafts(&mut self, planned: &[usize]) -> Result<bool, EngineError> {
        let used: usize = planned.iter().map(|&i| self.running[i].take).sum();
        let mut budget = self.lim.max_batch_tokens.saturating_sub(used);
        let mut rows = used; // rows in the step so far, drafts included
        let b = self.lim.block_tokens;
        let max_ctx = self.lim.max_ctx;
        // Who drafts how many: n-gram drafts now, draft-model ones in one batched pass.
        let mut chosen = Vec::new();
        let mut by_model = Vec::new();
        for &i in planned {
            let s = &mut self.running[i];
            s.draft.clear();
            if budget == 0
                || rows >= self.lim.spec_step_rows
                || s.spec.k() == 0
                || s.computed + s.take != s.tokens.len()
            {
                continue;
            }
            // Never draft past what the sequence may still emit: at most `left` tokens
            // after this step's first, and positions below the context.
            let left = s.req.max_tokens.saturating_sub(s.generated() + 1);
            let ctx_left = max_ctx.map_or(usize::MAX, |m| m.saturating_sub(s.tokens.len()));
            let k = s.spec.k().min(budget).min(left).min(ctx_left);
            if k == 0 || !s.adapt.may_draft() {
                continue;
            }
            match s.spec {
                Speculation::Ngram { .. } => {
                    ngram_draft(&s.tokens, k, &mut s.draft);
                    if s.draft.is_empty() {
                        continue;
                    }
                    budget -= s.draft.len();
                    rows += s.draft.len();
                }
                Speculation::Draft { .. } => {
                    by_model.push((i, k));
                    budget -= k;
                    rows += k;
                }
                Speculation::Off => continue,
            }
            chosen.push(i);
        }
        if !by_model.is_empty() {
            self.draft_with_model(&by_model)?;
        }
        let pool = std::sync::Arc::clone(&self.pool);
        let mut g = lock(&pool)?;
        let mut any = false;
        for i in chosen {
            let s = &mut self.running[i];
            if s.draft.is_empty() {
                continue;
            }
            s.spec_blocks = s.blocks.len();
            let need = (s.tokens.len() + s.draft.len()).div_ceil(b);
            if s.blocks.len() < need {
                match g.alloc(need - s.blocks.len()) {
                    Ok(ids) => s.blocks.extend(ids),
                    Err(_) => s.draft.truncate(s.blocks.len() * b - s.tokens.len()),
                }
            }
            if s.draft.is_empty() {
                continue;
            }
            s.feed.clear();
            s.feed.extend_from_slice(&s.tokens[s.computed..]);
            s.feed.extend_from_slice(&s.draft);
            any = true;
        }
        Ok(any)
    }

    /// Sample `running[i]`'s rows from `first` on, in order, exactly as plain steps would
    /// (its own sampler, penalties over the tokens emitted so far, grammar advanced per
    /// token, one PCG32 stream), emitting each sampled token; continue while the sampled
    /// token is the draft's (its K/V, written by this step, is then the sequence's own).
    /// Rejected positions touch nothing: `computed` stops at the accepted length and the
    /// blocks taken for the draft beyond it go back. `Some` when the sequence is done.
    pub(crate) fn verify(
        &mut self,
        i: usize,
        logits: &Logits,
        first: usize,
    ) -> Result<Option<FinishReason>, EngineError> {
        let draft = std::mem::take(&mut self.running[i].draft);
        let mut accepted = 0;
        let result = loop {
            match self.sample(i, logits.row(first + accepted)) {
                Ok(None) => {
                    let s = &mut self.running[i];
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
        if draft.is_empty() {
            return result;
        }
        self.shared.draft_proposed.fetch_add(draft.len(), Ordering::Relaxed);
        self.shared.draft_accepted.fetch_add(accepted, Ordering::Relaxed);
        let b = self.lim.block_tokens;
        let s = &mut self.running[i];
        s.adapt.verified(accepted, draft.len());
        if let Some(kv) = s.draft_kv.as_mut() {
            // The draft model's K/V holds the draft's tokens: only accepted ones stay valid.
            kv.computed = kv.computed.min(s.computed);
        }
        let keep = s.spec_blocks.max(s.computed.div_ceil(b)).min(s.blocks.len());
        let mut g = lock(&self.pool)?;
        for id in s.blocks.drain(keep..) {
            g.release(id).map_err(kv_err)?;
        }
        s.draft = draft;
        s.draft.clear();
        result
    }
}
