//! The step loop's state: waiting and running sequences, their blocks, and one step.
//!
//! Every rule here leans on one property of the forward: a sequence's logits depend
//! only on its own tokens, bit for bit, whatever else is in the step and however its
//! prefill was chunked. So the scheduler is free to batch, chunk, share cached prefix
//! blocks and preempt (recomputing later) without changing any answer, provided each
//! sequence samples with its own generator and only when its last token was fed.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use llguidance::Matcher;
use tl_core::{
    ForwardBatch, ForwardSeq, KvBackend, ModelRunner, PrefixCache, SampleError, SchedPolicy, SharedPool, Tokenizer,
};
use tl_sampling::{Constraint, Pcg32, SpecSampler};
use tokio::sync::mpsc::UnboundedSender;

use crate::draft::DraftKv;
use crate::prefix::{self, PartialIndex};
use crate::request::{EngineError, Event, FinishReason, Request, TokenInfo, Usage};
use crate::speculate::{Adapt, Speculation};
use crate::text::TextOut;
use crate::{Observer, Shared, StepFigures};

/// One sequence, from submit to finish.
pub(crate) struct Seq {
    /// Submit order: the largest is the newest, the first to be preempted.
    pub(crate) order: u64,
    pub(crate) req: Request,
    /// Prompt then output, (n_prompt + generated,).
    pub(crate) tokens: Vec<u32>,
    pub(crate) n_prompt: usize,
    /// Leading tokens whose K/V are in `blocks`.
    pub(crate) computed: usize,
    /// Block table: position j lives in blocks[j / B], (>= computed.div_ceil(B),).
    pub(crate) blocks: Vec<u32>,
    /// Leading blocks registered in the prefix index.
    registered: usize,
    /// Chained block hash of each full block of `tokens`, (<= tokens.len() / B,). A pure
    /// function of the tokens, so it survives preemption.
    chain: Vec<u64>,
    rng: Pcg32,
    /// The grammar's state over this sequence's output (constrained requests only).
    matcher: Option<Matcher>,
    pub(crate) tx: UnboundedSender<Event>,
    text: TextOut,
    cached_tokens: Option<usize>,
    /// Of a P/D preload's positions, those this pool's prefix cache held: the only ones
    /// that are prefix-cache hits (the rest came over the network).
    preload_local: usize,
    /// Still counted in the bounded submit queue (not yet admitted once).
    pub(crate) counted: bool,
    preempted: bool,
    /// Times preempted so far.
    n_preempted: u32,
    /// Tokens planned for the current step.
    pub(crate) take: usize,
    arrived: Instant,
    last_token: Option<Instant>,
    ttft: Option<Duration>,
    /// P/D prefill: keep the blocks under this lease at finish (pd.rs).
    pub(crate) hold: Option<crate::pd::Hold>,
    /// How this sequence drafts (the request's setting, else the engine's).
    pub(crate) spec: Speculation,
    /// Tokens drafted for the current step, fed after its `take` tokens, (<= MAX_DRAFT,).
    pub(crate) draft: Vec<u32>,
    /// The current step's chunk when it drafts: `take` tokens then `draft`.
    pub(crate) feed: Vec<u32>,
    /// Blocks held before the current step's drafts took more (those go back after).
    pub(crate) spec_blocks: usize,
    pub(crate) adapt: Adapt,
    /// Its K/V in the draft model's pool (draft-model speculation only).
    pub(crate) draft_kv: Option<DraftKv>,
}

impl Seq {
    pub(crate) fn new(
        order: u64,
        req: Request,
        spec: Speculation,
        matcher: Option<Matcher>,
        tx: UnboundedSender<Event>,
    ) -> Seq {
        let rng = tl_sampling::choice_stream(req.seed, req.choice);
        Seq {
            order,
            tokens: req.prompt.clone(),
            n_prompt: req.prompt.len(),
            req,
            computed: 0,
            blocks: Vec::new(),
            registered: 0,
            chain: Vec::new(),
            rng,
            matcher,
            tx,
            text: TextOut::default(),
            cached_tokens: None,
            preload_local: 0,
            counted: true,
            preempted: false,
            n_preempted: 0,
            take: 0,
            arrived: Instant::now(),
            last_token: None,
            ttft: None,
            hold: None,
            spec,
            draft: Vec::new(),
            feed: Vec::new(),
            spec_blocks: 0,
            adapt: Adapt::default(),
            draft_kv: None,
        }
    }

    /// P/D decode: start from `blocks`, which hold this prompt's first `computed`
    /// positions (ref 1 each, owned by the sequence from now on; pd.rs), the first
    /// `local` of them found in this pool's prefix cache.
    pub(crate) fn preload(&mut self, blocks: Vec<u32>, computed: usize, local: usize) {
        self.blocks = blocks;
        self.computed = computed;
        self.preload_local = local;
    }

    pub(crate) fn generated(&self) -> usize {
        self.tokens.len() - self.n_prompt
    }

    /// Extend `chain` to the first `n` full blocks.
    fn chain_upto(&mut self, n: usize, b: usize) {
        while self.chain.len() < n {
            let k = self.chain.len();
            let parent = self.chain.last().copied();
            self.chain.push(tl_kv::block_hash(parent, &self.tokens[k * b..(k + 1) * b]));
        }
    }
}

/// Settings the scheduler reads once.
pub(crate) struct Limits {
    pub(crate) max_batch_tokens: usize,
    pub(crate) max_seqs: usize,
    pub(crate) prefill_chunk: usize,
    pub(crate) block_tokens: usize,
    pub(crate) n_blocks: usize,
    pub(crate) max_ctx: Option<usize>,
    pub(crate) prefix: bool,
    /// Reuse cached prefixes below block granularity (prefix.rs). On unless the
    /// environment says `TL_PREFIX_REUSE=blocks` (whole blocks only, as before: a knob for
    /// before/after benchmarks; answers are the same either way).
    pub(crate) partial: bool,
    pub(crate) policy: SchedPolicy,
    /// Drafts join a step only while it holds fewer rows than this
    /// ([`crate::EngineOptions::spec_step_rows`]).
    pub(crate) spec_step_rows: usize,
}

impl Limits {
    pub(crate) fn of(runner: &ModelRunner, n_blocks: usize) -> Limits {
        let e = runner.engine();
        Limits {
            max_batch_tokens: e.max_batch_tokens.max(1),
            max_seqs: e.max_seqs.max(1),
            prefill_chunk: e.prefill_chunk.max(1),
            block_tokens: runner.block_tokens().max(1),
            n_blocks,
            max_ctx: runner.config().max_position_embeddings,
            prefix: e.prefix_cache == PrefixCache::On,
            partial: std::env::var("TL_PREFIX_REUSE").map_or(true, |v| v != "blocks"),
            policy: e.policy,
            spec_step_rows: crate::speculate::SPEC_STEP_ROWS,
        }
    }
}

pub(crate) struct Scheduler {
    pub(crate) runner: ModelRunner,
    /// The draft model, when the engine has one.
    pub(crate) drafter: Option<ModelRunner>,
    pub(crate) pool: SharedPool,
    tok: Arc<Tokenizer>,
    sampler: SpecSampler,
    eos: Vec<u32>,
    pub(crate) lim: Limits,
    pub(crate) waiting: VecDeque<Seq>,
    /// Sorted by `order`, oldest first.
    pub(crate) running: Vec<Seq>,
    pub(crate) shared: Arc<Shared>,
    observer: Option<Arc<dyn Observer>>,
    /// Registered blocks by id, for reuse below block granularity.
    partial: PartialIndex,
}

type Pool<'a> = MutexGuard<'a, Box<dyn KvBackend>>;

pub(crate) fn lock(pool: &SharedPool) -> Result<Pool<'_>, EngineError> {
    pool.lock().map_err(|_| EngineError::Internal("KV pool lock poisoned".into()))
}

pub(crate) fn kv_err(e: impl std::fmt::Display) -> EngineError {
    EngineError::Internal(e.to_string())
}

/// Give every block of `s` back; its K/V must be recomputed (registered full blocks stay
/// findable in the prefix cache, so the recompute usually hits them).
fn release_blocks(pool: &mut dyn KvBackend, s: &mut Seq) -> Result<(), EngineError> {
    for id in s.blocks.drain(..) {
        pool.release(id).map_err(kv_err)?;
    }
    s.computed = 0;
    s.registered = 0;
    s.draft_kv = None; // its draft-pool blocks go back with it
    Ok(())
}

impl Scheduler {
    pub(crate) fn new(
        runner: ModelRunner,
        drafter: Option<ModelRunner>,
        tok: Arc<Tokenizer>,
        shared: Arc<Shared>,
        observer: Option<Arc<dyn Observer>>,
        n_blocks: usize,
    ) -> Scheduler {
        let lim = Limits::of(&runner, n_blocks);
        Scheduler {
            pool: runner.pool(),
            eos: runner.config().eos_token_ids.clone(),
            runner,
            drafter,
            tok,
            sampler: SpecSampler::new(),
            lim,
            waiting: VecDeque::new(),
            running: Vec::new(),
            shared,
            observer,
            partial: PartialIndex::new(n_blocks),
        }
    }

    pub(crate) fn idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    fn uncount(&self, s: &mut Seq) {
        if s.counted {
            s.counted = false;
            self.shared.queued.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Drop `s` with an error event, its blocks released.
    fn drop_seq(&mut self, mut s: Seq, err: EngineError) -> Result<(), EngineError> {
        self.uncount(&mut s);
        let _ = s.tx.send(Event::Error(err));
        release_blocks(lock(&self.pool)?.as_mut(), &mut s)
    }

    /// Drop every sequence whose receiver is gone (the client left); their blocks go back.
    pub(crate) fn reap_cancelled(&mut self) -> Result<(), EngineError> {
        let pool = Arc::clone(&self.pool);
        let mut g = lock(&pool)?;
        let mut gone = 0;
        for list in [0, 1] {
            let mut keep = |s: &mut Seq| -> Result<bool, EngineError> {
                if s.tx.is_closed() {
                    release_blocks(g.as_mut(), s)?;
                    gone += 1;
                    return Ok(false);
                }
                Ok(true)
            };
            if list == 0 {
                let mut kept = VecDeque::with_capacity(self.waiting.len());
                for mut s in self.waiting.drain(..) {
                    if keep(&mut s)? {
                        kept.push_back(s);
                    } else if s.counted {
                        self.shared.queued.fetch_sub(1, Ordering::SeqCst);
                    }
                }
                self.waiting = kept;
            } else {
                let mut kept = Vec::with_capacity(self.running.len());
                for mut s in self.running.drain(..) {
                    if keep(&mut s)? {
                        kept.push(s);
                    }
                }
                self.running = kept;
            }
        }
        self.shared.cancelled.fetch_add(gone, Ordering::Relaxed);
        Ok(())
    }

    /// Drop every waiting sequence (and, with `running`, every running one) with `err`.
    pub(crate) fn cancel_all(&mut self, running: bool, err: EngineError) -> Result<(), EngineError> {
        let mut all: Vec<Seq> = self.waiting.drain(..).collect();
        if running {
            all.append(&mut self.running);
        }
        for s in all {
            self.drop_seq(s, err.clone())?;
        }
        Ok(())
    }

    /// Preempt `running[i]`: release its blocks and put it first in line to recompute.
    fn preempt(&mut self, pool: &mut dyn KvBackend, i: usize) -> Result<(), EngineError> {
        let mut s = self.running.remove(i);
        release_blocks(pool, &mut s)?;
        s.preempted = true;
        s.n_preempted += 1;
        self.waiting.push_front(s);
        self.shared.preemptions.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The waiting sequence to admit next: preempted ones first (oldest first), then by
    /// the policy.
    fn next_waiting(&self) -> Option<usize> {
        if let Some(i) = self.waiting.iter().position(|s| s.preempted) {
            return Some(i);
        }
        match self.lim.policy {
            SchedPolicy::Fcfs => (!self.waiting.is_empty()).then_some(0),
            SchedPolicy::ShortestFirst => {
                self.waiting.iter().enumerate().min_by_key(|(_, s)| (s.tokens.len(), s.order)).map(|(i, _)| i)
            }
        }
    }

    /// Plan one step: blocks for every running sequence's next piece (preempting the
    /// newest when the pool is short), then admission of waiting prompts into the rest of
    /// the token budget. Sets each running sequence's `take`.
    fn plan(&mut self) -> Result<usize, EngineError> {
        let b = self.lim.block_tokens;
        let mut admitted = 0;
        let mut budget = self.lim.max_batch_tokens;
        let pool = Arc::clone(&self.pool);
        let mut g = lock(&pool)?;
        let mut preempted = false;
        let mut i = 0;
        'seqs: while i < self.running.len() {
            let s = &mut self.running[i];
            let want = s.tokens.len() - s.computed;
            s.take = want.min(budget).min(self.lim.prefill_chunk);
            if s.take == 0 {
                i += 1;
                continue;
            }
            let need = (s.computed + s.take).div_ceil(b);
            while self.running[i].blocks.len() < need {
                let have = self.running[i].blocks.len();
                match g.alloc(need - have) {
                    Ok(ids) => self.running[i].blocks.extend(ids),
                    Err(_) => {
                        let last = self.running.len() - 1;
                        self.preempt(g.as_mut(), last)?;
                        preempted = true;
                        if last == i {
                            break 'seqs;
                        }
                    }
                }
            }
            budget -= self.running[i].take;
            i += 1;
        }
        // Admitting right after a preemption would only thrash: the pool is short now.
        while !preempted && budget > 0 && self.running.len() < self.lim.max_seqs {
            let Some(w) = self.next_waiting() else { break };
            let len = self.waiting[w].tokens.len();
            let need = len.div_ceil(b);
            if need > self.lim.n_blocks {
                let s = self.waiting.remove(w).ok_or_else(|| kv_err("waiting index"))?;
                drop(g);
                self.drop_seq(s, EngineError::PoolTooSmall { needed: need, n_blocks: self.lim.n_blocks })?;
                g = lock(&pool)?;
                continue;
            }
            let s = &mut self.waiting[w];
            // A P/D decode sequence arrives holding blocks (pd.rs); every other one holds
            // none until admitted.
            let preloaded = s.blocks.len();
            // The longest cached prefix of full blocks, leaving at least one token to feed
            // (its logits are the ones to sample from).
            let mut hits = Vec::new();
            if self.lim.prefix && preloaded == 0 {
                let max_hit = (len - 1) / b;
                s.chain_upto(max_hit, b);
                for &h in &s.chain[..max_hit] {
                    match g.lookup(h) {
                        Some(id) => hits.push(id),
                        None => break,
                    }
                }
            }
            // Below block granularity: a registered child of the last hit that shares
            // the next few tokens lends them (its block stays held until copied).
            let mut partial = None;
            if self.lim.prefix && self.lim.partial && preloaded == 0 {
                let h = hits.len();
                let room = (len - 1 - h * b).min(b);
                let parent = h.checked_sub(1).map(|k| s.chain[k]);
                for (hash, n) in self.partial.candidates(parent, &s.tokens[h * b..h * b + room]) {
                    if let Some(src) = g.lookup(hash) {
                        partial = Some((src, n.min(room)));
                        break;
                    }
                }
            }
            let ids = match g.alloc(need - hits.len() - preloaded) {
                Ok(ids) => ids,
                Err(_) => {
                    for id in hits.into_iter().chain(partial.map(|p| p.0)) {
                        g.release(id).map_err(kv_err)?;
                    }
                    break;
                }
            };
            let mut shared = 0;
            if let Some((src, n)) = partial {
                prefix::copy_slots(g.as_mut(), src, ids[0], n).map_err(kv_err)?;
                g.release(src).map_err(kv_err)?;
                shared = n;
            }
            let mut s = self.waiting.remove(w).ok_or_else(|| kv_err("waiting index"))?;
            self.uncount(&mut s);
            if preloaded == 0 {
                s.computed = hits.len() * b + shared;
                s.registered = hits.len();
                s.blocks = hits;
            }
            if s.cached_tokens.is_none() {
                s.cached_tokens = Some(s.computed);
                if let Some(o) = &self.observer {
                    o.admitted(s.arrived.elapsed(), s.computed);
                }
            }
            admitted += 1;
            let hit = if preloaded > 0 { s.preload_local } else { s.computed };
            self.shared.prefix_hit_tokens.fetch_add(hit, Ordering::Relaxed);
            s.blocks.extend(ids);
            s.preempted = false;
            s.take = (len - s.computed).min(budget).min(self.lim.prefill_chunk);
            budget -= s.take;
            let at = self.running.partition_point(|r| r.order < s.order);
            self.running.insert(at, s);
        }
        Ok(admitted)
    }

    /// One step: plan, drafts for the sequences that speculate (in what is left of the
    /// token budget), one forward over every planned piece, then sampling (and, for a
    /// drafting sequence, verification) for each sequence whose last token was fed.
    /// Returns false when there was nothing to run.
    pub(crate) fn step(&mut self) -> Result<bool, EngineError> {
        let admitted = self.plan()?;
        let planned: Vec<usize> = (0..self.running.len()).filter(|&i| self.running[i].take > 0).collect();
        if planned.is_empty() {
            return Ok(false);
        }
        let t0 = Instant::now();
        let drafting = self.plan_drafts(&planned)?;
        // Logit rows per sequence: its last token's, plus one per drafted token.
        let tails: Vec<usize> = planned.iter().map(|&i| 1 + self.running[i].draft.len()).collect();
        let batch = ForwardBatch {
            seqs: planned
                .iter()
                .map(|&i| {
                    let s = &self.running[i];
                    let tokens =
                        if s.draft.is_empty() { &s.tokens[s.computed..s.computed + s.take] } else { &s.feed[..] };
                    ForwardSeq { tokens, start: s.computed, blocks: &s.blocks }
                })
                .collect(),
        };
        let n_tokens = batch.n_tokens();
        // A decode row feeds one sampled token; anything else is prompt or recompute.
        let decode_rows = planned
            .iter()
            .filter(|&&i| {
                let s = &self.running[i];
                s.take == 1 && s.computed + 1 == s.tokens.len() && s.generated() > 0
            })
            .count();
        let logits = if drafting { self.runner.forward_tails(&batch, &tails) } else { self.runner.forward(&batch) };
        let logits = logits.map_err(kv_err)?;
        let forward = t0.elapsed();
        let mut finished: Vec<(usize, FinishReason)> = Vec::new();
        let mut first = 0; // the first logits row of the current sequence
        for (&i, &rows) in planned.iter().zip(&tails) {
            let s = &mut self.running[i];
            s.computed += s.take;
            s.take = 0;
            let outcome = if s.computed < s.tokens.len() {
                Ok(None) // mid-prefill: this row's logits are not the sequence's next token
            } else {
                self.verify(i, &logits, first)
            };
            first += rows;
            self.register_full(i)?;
            match outcome {
                Ok(Some(reason)) => finished.push((i, reason)),
                Ok(None) => {}
                Err(e) => {
                    // A bad sampling parameter (the server checks them first) or unusable
                    // logits: this sequence ends with the error, its blocks released.
                    let _ = self.running[i].tx.send(Event::Error(e));
                    self.running[i].req.max_tokens = 0;
                    finished.push((i, FinishReason::Length));
                }
            }
        }
        let elapsed = t0.elapsed();
        self.shared.steps.fetch_add(1, Ordering::Relaxed);
        if let Some(o) = &self.observer {
            o.step(&StepFigures {
                tokens: n_tokens,
                seqs: planned.len(),
                prefill_tokens: n_tokens - decode_rows,
                admitted,
                forward,
                elapsed,
            });
        }
        for &(i, reason) in finished.iter().rev() {
            let s = self.running.remove(i);
            self.finish(s, reason)?;
        }
        Ok(true)
    }

    /// Register `running[i]`'s full blocks of computed tokens in the prefix index (only
    /// positions whose K/V belong to the sequence's accepted tokens).
    fn register_full(&mut self, i: usize) -> Result<(), EngineError> {
        if !self.lim.prefix {
            return Ok(());
        }
        let b = self.lim.block_tokens;
        let s = &mut self.running[i];
        let full = s.computed / b;
        s.chain_upto(full, b);
        let mut g = lock(&self.pool)?;
        for k in s.registered..full {
            g.register(s.blocks[k], s.chain[k]).map_err(kv_err)?;
            // Indexed below block granularity too (prefix.rs).
            let parent = k.checked_sub(1).map(|p| s.chain[p]);
            self.partial.record(s.blocks[k], parent, s.chain[k], &s.tokens[k * b..(k + 1) * b]);
        }
        s.registered = s.registered.max(full);
        Ok(())
    }

    /// Sample `running[i]`'s next token from its logits row; `Some` when it is done.
    pub(crate) fn sample(&mut self, i: usize, row: &[f32]) -> Result<Option<FinishReason>, EngineError> {
        let s = &mut self.running[i];
        let (prompt, output) = s.tokens.split_at(s.n_prompt);
        let field = s.req.grammar.as_ref().map_or("logit_bias", |g| g.field);
        let grammar_err = |e: String| EngineError::BadRequest { field, reason: format!("grammar: {e}") };
        // Step 3a's allowed set: a function of this sequence's own output only.
        let mask = match s.matcher.as_mut() {
            Some(m) => Some(m.compute_mask().map_err(|e| grammar_err(e.to_string()))?),
            None => None,
        };
        let constraint = Constraint { allowed: mask.as_ref().map(|m| m.as_slice()), bias: &s.req.logit_bias };
        let (id, logprob) = self
            .sampler
            .sample_constrained(row, &s.req.params, prompt, output, &constraint, &mut s.rng)
            .map_err(|e| match e {
                // Not the request's fault: the model's output is unusable (a corrupt
                // checkpoint, say). Refuse to sample, and say so.
                SampleError::BadLogit { .. } | SampleError::AllMasked | SampleError::EmptyLogits => {
                    EngineError::Internal(format!("the model's logits are unusable, refusing to sample: {e}"))
                }
                SampleError::NothingAllowed => EngineError::BadRequest {
                    field,
                    reason: "the constraint leaves no token the model can produce here".into(),
                },
                e => EngineError::BadRequest { field: "sampling", reason: e.to_string() },
            })?;
        if self.eos.contains(&id) {
            return Ok(Some(FinishReason::Stop));
        }
        let top = match s.req.logprobs {
            Some(k) if k > 0 => self.sampler.top_logprobs(k),
            _ => Vec::new(),
        };
        s.tokens.push(id);
        // The grammar advances with the token; a grammar that is complete ends the output.
        let mut grammar_done = false;
        if let Some(m) = s.matcher.as_mut() {
            m.consume_token(id).map_err(|e| grammar_err(e.to_string()))?;
            grammar_done = m.is_stopped();
        }
        let bytes = self.tok.decode_bytes(&[id]).unwrap_or_default();
        let (text, stopped) = s.text.push(&bytes, &s.req.stop);
        let now = Instant::now();
        match s.last_token {
            None => {
                let ttft = now - s.arrived;
                s.ttft = Some(ttft);
                if let Some(o) = &self.observer {
                    o.first_token(ttft);
                }
            }
            Some(prev) => {
                if let Some(o) = &self.observer {
                    o.inter_token(now - prev);
                }
            }
        }
        s.last_token = Some(now);
        self.shared.generated.fetch_add(1, Ordering::Relaxed);
        let _ = s.tx.send(Event::Token { token: TokenInfo { id, logprob, top }, text });
        if stopped || grammar_done {
            return Ok(Some(FinishReason::Stop));
        }
        let full = self.lim.max_ctx.is_some_and(|m| s.tokens.len() >= m);
        Ok((s.generated() >= s.req.max_tokens || full).then_some(FinishReason::Length))
    }

    fn finish(&mut self, mut s: Seq, finish: FinishReason) -> Result<(), EngineError> {
        match s.hold.take() {
            // A P/D prefill: its blocks wait for the decode server under the lease.
            Some(hold) if s.req.max_tokens > 0 => {
                let blocks = std::mem::take(&mut s.blocks);
                crate::pd::keep(&self.shared.leases, hold, blocks, s.computed, lock(&self.pool)?.as_mut());
            }
            _ => release_blocks(lock(&self.pool)?.as_mut(), &mut s)?,
        }
        self.shared.finished.fetch_add(1, Ordering::Relaxed);
        if s.req.max_tokens == 0 {
            return Ok(()); // dropped with an error event already
        }
        let usage = Usage {
            prompt_tokens: s.n_prompt,
            completion_tokens: s.generated(),
            cached_tokens: s.cached_tokens.unwrap_or(0),
        };
        let timings = crate::Timings { ttft: s.ttft, total: s.arrived.elapsed(), preempted: s.n_preempted };
        let text = s.text.finish();
        let _ = s.tx.send(Event::Done { finish, text, usage, timings });
        Ok(())
    }

    /// Show the pool and every block table to an observer that asked (tests).
    pub(crate) fn observe_pool(&self) {
        let Some(o) = self.observer.as_ref().filter(|o| o.wants_pool()) else { return };
        let Ok(g) = lock(&self.pool) else { return };
        let tables: Vec<&[u32]> = self.running.iter().chain(self.waiting.iter()).map(|s| s.blocks.as_slice()).collect();
        o.pool(g.as_ref(), &tables);
    }

    /// Publish the gauges.
    pub(crate) fn publish(&self) -> Result<(), EngineError> {
        let g = lock(&self.pool)?;
        let sh = &self.shared;
        sh.waiting.store(self.waiting.len(), Ordering::Relaxed);
        sh.running.store(self.running.len(), Ordering::Relaxed);
        sh.kv_free.store(g.n_free(), Ordering::Relaxed);
        sh.kv_cached.store(g.n_cached(), Ordering::Relaxed);
        sh.kv_in_use.store(g.n_in_use(), Ordering::Relaxed);
        Ok(())
    }
}
