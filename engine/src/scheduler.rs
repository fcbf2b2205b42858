//! The step loop's state: waiting and running sequences, their blocks, admission
//! (planning a step), preemption and finish. The step itself is step.rs.
//!
//! Every rule here leans on one property of the forward: a sequence's logits depend
//! only on its own tokens, bit for bit, whatever else is in the step and however its
//! prefill was chunked. So the scheduler is free to batch, chunk, share cached prefix
//! blocks and preempt (recomputing later) without changing any answer, provided each
//! sequence samples with its own generator and only when its last token was fed.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tl_core::{KvBackend, KvLayout, ModelRunner, PrefixCache, SchedPolicy, SharedPool, Tokenizer, NO_BLOCK};

use crate::disk_cache::{disk_hits, DiskCache};
use crate::emit::Emitter;
use crate::encode::Job;
use crate::error::{kv_err, lock, EngineError};
use crate::prefix::{self, PartialIndex};
use crate::request::{FinishReason, Usage};
use crate::seq::Seq;
use crate::speculator::Speculator;
use crate::stats::{Observer, Shared};

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
    /// The pages of a block-table row (docs/kv.md): a table holds `groups` entries per
    /// `block_tokens` positions, and a windowed group's pages go back once out of window.
    pub(crate) layout: KvLayout,
    pub(crate) groups: usize,
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
            // Below block granularity a hybrid model's state has no snapshot to resume from
            // (kv.md: snapshots are at block boundaries), so only whole blocks are reused.
            partial: std::env::var("TL_PREFIX_REUSE").map_or(true, |v| v != "blocks")
                && runner.kv_layout().state_column().is_none(),
            policy: e.policy,
            layout: runner.kv_layout().clone(),
            groups: runner.kv_layout().n_groups(),
        }
    }

    /// Tokens the next step runs of `s` from position `computed` (`s.computed`, or what an
    /// admission will set it to), `want` of them wanted (within the step's budget):
    /// at most a prefill chunk, and a held (P/D) prefill of a hybrid model ends a step at
    /// the last row boundary before its prompt's last position, so that row's state slot
    /// holds what the decode server resumes from (pd.rs, kv.md).
    pub(crate) fn take(&self, s: &Seq, computed: usize, want: usize) -> usize {
        let take = want.min(self.prefill_chunk);
        let edge = s.n_prompt.saturating_sub(1) / self.block_tokens * self.block_tokens;
        match s.handoff.hold.is_some() && self.layout.state_column().is_some() && computed < edge {
            true => take.min(edge - computed),
            false => take,
        }
    }
}

pub(crate) struct Scheduler {
    pub(crate) runner: ModelRunner,
    pub(crate) pool: SharedPool,
    /// Sampling, stops and finish (emit.rs).
    pub(crate) emitter: Emitter,
    /// Drafting and verification, for the sequences that speculate (speculator.rs).
    pub(crate) spec: Speculator,
    pub(crate) lim: Limits,
    pub(crate) waiting: VecDeque<Seq>,
    /// Sorted by `order`, oldest first.
    pub(crate) running: Vec<Seq>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) observer: Option<Arc<dyn Observer>>,
    /// Registered blocks by id, for reuse below block granularity.
    pub(crate) partial: PartialIndex,
    /// Full blocks on disk (disk_cache.rs); only for one KV layer group.
    pub(crate) disk: Option<DiskCache>,
    /// Encoder inputs waiting (an encoder model's only work; encode.rs).
    pub(crate) encodes: VecDeque<Job>,
}

impl Scheduler {
    pub(crate) fn new(
        runner: ModelRunner,
        drafters: (Option<ModelRunner>, Option<ModelRunner>),
        tok: Arc<Tokenizer>,
        shared: Arc<Shared>,
        observer: Option<Arc<dyn Observer>>,
        n_blocks: usize,
    ) -> Scheduler {
        let lim = Limits::of(&runner, n_blocks);
        let pool = runner.pool();
        let eos = runner.config().eos_token_ids.clone();
        let emitter = Emitter::new(tok, eos, lim.max_ctx, observer.clone(), Arc::clone(&shared));
        let spec = Speculator::new(
            drafters,
            Arc::clone(&pool),
            Arc::clone(&shared),
            lim.max_batch_tokens,
            lim.block_tokens,
            lim.max_ctx,
        )
        .with_layout(&lim.layout);
        Scheduler {
            pool,
            runner,
            emitter,
            spec,
            lim,
            waiting: VecDeque::new(),
            running: Vec::new(),
            shared,
            observer,
            partial: PartialIndex::new(n_blocks),
            disk: None,
            encodes: VecDeque::new(),
        }
    }

    /// The KV backend's registered name (`"f16-slab"`, `"q8-slab"`): part of the disk
    /// cache's directory name, since the same tokens have other bits in each.
    pub(crate) fn kv_backend(&self) -> String {
        self.runner.engine().kv.backend.clone()
    }

    pub(crate) fn idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty() && self.encodes.is_empty()
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
        s.out.fail(err);
        s.release_blocks(lock(&self.pool)?.as_mut())
    }

    /// Drop every sequence whose receiver is gone (the client left); their blocks go back.
    pub(crate) fn reap_cancelled(&mut self) -> Result<(), EngineError> {
        let pool = Arc::clone(&self.pool);
        let mut g = lock(&pool)?;
        let mut gone = 0;
        for list in [0, 1] {
            let mut keep = |s: &mut Seq| -> Result<bool, EngineError> {
                if s.out.closed() {
                    s.release_blocks(g.as_mut())?;
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
        self.fail_encodes(&err);
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
        s.release_blocks(pool)?;
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
    pub(crate) fn plan(&mut self) -> Result<usize, EngineError> {
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
            s.take = self.lim.take(s, s.computed, want.min(budget));
            if s.take == 0 {
                i += 1;
                continue;
            }
            let need = (s.computed + s.take).div_ceil(b) * self.lim.groups;
            // Until the table reaches the step's end (and, for a hybrid, its last row holds
            // the state slot the step runs in), preempting the newest while the pool is short.
            loop {
                let blocks = &mut self.running[i].blocks;
                match self.lim.layout.alloc_entries(g.as_mut(), blocks, need) {
                    Ok(()) => break,
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
            // Pages per group: every block for a global one, the window's for a windowed
            // one (docs/kv.md); without windows, `ceil(len / B)`. A pool below the most
            // it holds at once (a prefill step's queries and windows) can never run it.
            let need = self.lim.layout.pages_for(len, b);
            let peak = self.lim.layout.peak_pages(len, self.lim.prefill_chunk, b);
            if peak > self.lim.n_blocks {
                let s = self.waiting.remove(w).ok_or_else(|| kv_err("waiting index"))?;
                drop(g);
                self.drop_seq(s, EngineError::PoolTooSmall { needed: peak, n_blocks: self.lim.n_blocks })?;
                g = lock(&pool)?;
                continue;
            }
            let s = &mut self.waiting[w];
            // A P/D decode sequence arrives holding blocks (pd.rs); every other one holds
            // none until admitted.
            let preloaded = s.blocks.len();
            // The longest cached prefix of full blocks, leaving at least one token to feed
            // (its logits are the ones to sample from). An embedding sequence takes no
            // hits: mean and CLS pooling need the hidden row of every position it would
            // skip (embed.rs), so it feeds its whole prompt (nor does it register blocks).
            let (mut hits, mut h) = (Vec::new(), 0);
            // Nor does a sequence drafting with an MTP head: the head needs the target's
            // hidden row of every position (mtp.rs).
            let lookup = self.lim.prefix && preloaded == 0 && !s.tail.needs_hidden();
            if lookup {
                let max_hit = (len - 1) / b;
                s.chain_upto(max_hit, b);
                (hits, h) = prefix::hits(g.as_mut(), &s.chain[..max_hit], &self.lim.layout, b).map_err(kv_err)?;
                // Then on disk, from where the pool's blocks end (disk_cache.rs).
                if let Some(disk) = self.disk.as_mut().filter(|_| h < max_hit) {
                    let chain = (&s.chain[..max_hit], s.parent(0), &s.tokens[..], b);
                    disk_hits(disk, &mut self.partial, g.as_mut(), chain, &self.lim.layout, (&mut hits, &mut h))?;
                }
            }
            // Below block granularity: a registered child of the last hit that shares
            // the next few tokens lends them (its pages stay held until copied).
            let mut partial: Option<(Vec<u32>, usize)> = None;
            if lookup && self.lim.partial {
                let room = (len - 1 - h * b).min(b);
                let parent = s.parent(h);
                for (hash, n) in self.partial.candidates(parent, &s.tokens[h * b..h * b + room]) {
                    // Every group's page of that block, or none of them.
                    let srcs: Vec<Option<u32>> =
                        (0..self.lim.groups).map(|j| g.lookup(tl_core::group_hash(hash, j))).collect();
                    if srcs.iter().all(Option::is_some) {
                        partial = Some((srcs.into_iter().flatten().collect(), n.min(room)));
                        break;
                    }
                    tl_core::release_all(g.as_mut(), srcs.into_iter().flatten()).map_err(kv_err)?;
                }
            }
            // Without windows the whole prompt's pages are taken now, as before; with
            // them, the pages of the first piece (later pieces take theirs as they run,
            // while the window's oldest go back), once the pool can hold the sequence's
            // `need` pages besides what the running ones will still take for theirs.
            let computed = if preloaded > 0 { s.computed } else { h * b + partial.as_ref().map_or(0, |p| p.1) };
            let take = |s: &Seq| self.lim.take(s, computed, (len - computed).min(budget));
            let rows = if self.lim.layout.windowed() { (computed + take(s)).div_ceil(b) } else { len.div_ceil(b) };
            let have = if preloaded > 0 { preloaded } else { hits.len() };
            let windowed = self.lim.layout.windowed();
            let held_by = |t: &[u32]| t.iter().filter(|&&id| id != NO_BLOCK).count();
            let reserved: usize = if windowed {
                let lay = &self.lim.layout;
                self.running.iter().map(|r| lay.pages_for(r.tokens.len(), b).saturating_sub(held_by(&r.blocks))).sum()
            } else {
                0
            };
            let held = held_by(&s.blocks) + held_by(&hits);
            let short = windowed && g.n_free() + g.n_cached() + held < need + reserved;
            // Entries `have..` of the table (pages, and a hybrid model's state slots).
            let mut table = vec![NO_BLOCK; have];
            let got = self
                .lim
                .layout
                .alloc_entries(g.as_mut(), &mut table, rows * self.lim.groups)
                .map(|()| table.split_off(have));
            let ids = match got {
                Ok(ids) if !short => ids,
                got => {
                    let back = hits.into_iter().chain(partial.into_iter().flat_map(|p| p.0));
                    tl_core::release_all(g.as_mut(), back.chain(got.into_iter().flatten())).map_err(kv_err)?;
                    break;
                }
            };
            let mut shared = 0;
            if let Some((srcs, n)) = partial {
                for (&src, &dst) in srcs.iter().zip(&ids) {
                    prefix::copy_slots(g.as_mut(), src, dst, n).map_err(kv_err)?;
                }
                tl_core::release_all(g.as_mut(), srcs).map_err(kv_err)?;
                shared = n;
            }
            let mut s = self.waiting.remove(w).ok_or_else(|| kv_err("waiting index"))?;
            self.uncount(&mut s);
            if preloaded == 0 {
                s.computed = h * b + shared;
                s.registered = h;
                s.blocks = hits;
            }
            if s.cached_tokens.is_none() {
                s.cached_tokens = Some(s.computed);
                if let Some(o) = &self.observer {
                    o.admitted(s.out.arrived.elapsed(), s.computed);
                }
            }
            admitted += 1;
            let hit = if preloaded > 0 { s.handoff.preload_local } else { s.computed };
            self.shared.prefix_hit_tokens.fetch_add(hit, Ordering::Relaxed);
            s.blocks.extend(ids);
            s.preempted = false;
            s.take = self.lim.take(&s, s.computed, (len - s.computed).min(budget));
            budget -= s.take;
            let at = self.running.partition_point(|r| r.order < s.order);
            self.running.insert(at, s);
        }
        Ok(admitted)
    }

    /// Release a finished sequence's blocks (a P/D prefill's go to its lease) and send
    /// its last event (an embedding's vector).
    pub(crate) fn finish(&mut self, mut s: Seq, finish: FinishReason) -> Result<(), EngineError> {
        if let Some(p) = s.tail.take_pooler() {
            s.release_blocks(lock(&self.pool)?.as_mut())?;
            self.shared.finished.fetch_add(1, Ordering::Relaxed);
            if s.req.max_tokens > 0 {
                // max_tokens 0: dropped with an error event already
                match p.finish() {
                    Ok(e) => s.out.embedded(e),
                    Err(e) => s.out.fail(e),
                }
            }
            return Ok(());
        }
        match s.handoff.hold.take() {
            // A P/D prefill: its blocks wait for the decode server under the lease.
            Some(hold) if s.req.max_tokens > 0 => {
                let blocks = std::mem::take(&mut s.blocks);
                crate::lease::keep(&self.shared.leases, hold, blocks, s.computed, lock(&self.pool)?.as_mut());
            }
            _ => s.release_blocks(lock(&self.pool)?.as_mut())?,
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
        self.emitter.finish(&mut s.out, finish, usage, s.n_preempted);
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
        sh.publish_pool(g.as_ref());
        if let (Some(d), Ok(mut to)) = (&self.disk, sh.disk.lock()) {
            *to = d.counts;
        }
        Ok(())
    }
}
