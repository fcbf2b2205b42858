//! tl-engine: the serving scheduler. It owns a [`ModelRunner`] and runs steps on its own
//! thread; callers [`Engine::submit`] requests and read their [`Event`]s from a channel.
//!
//! - Continuous batching: each step packs every running sequence's next token and pieces
//!   of waiting prompts into one forward, up to `max_batch_tokens`.
//! - Admission by KV blocks: a prompt waits until the pool can hold it; when a running
//!   sequence needs a block the pool does not have, the newest sequence is preempted
//!   (blocks released) and recomputed later.
//! - Prefix caching: full blocks are registered under the chained block hash of
//!   docs/spec/kv.md as they fill; a new sequence starts from its longest cached prefix.
//! - Each sequence samples from its own PCG32 stream, `choice_stream(seed, choice)`.
//!
//! Because the forward is batch- and chunk-invariant bit for bit, none of this changes a
//! sequence's tokens or logprobs: see docs/serving.md.
//!
//! This file is the handle users hold, [`Engine`]; the rooms below it: thread.rs (the
//! engine thread and its channel), scheduler.rs (admission, preemption, finish), step.rs
//! (one step), tail.rs (what a sequence does with its rows), stats.rs (published figures
//! and the observer), info.rs (settings, facts and request checks), pd.rs and lease.rs
//! (P/D). None of them imports this file.
#![deny(missing_docs)]

mod disk_cache;
mod draft;
mod embed;
mod emit;
mod encode;
mod error;
mod fingerprint;
mod grammar;
mod info;
mod lease;
mod mtp;
mod pd;
mod prefix;
mod request;
mod scheduler;
mod seq;
mod speculate;
mod speculator;
mod stats;
mod step;
mod tail;
mod text;
mod thread;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use disk_cache::{DiskCacheConfig, DiskCounts};
pub use embed::{EmbedRequest, EmbedResult, Embedding, Pooling};
pub use encode::{EncodeRequest, EncodeResult, Encoding};
pub use error::EngineError;
pub use fingerprint::{adapted as adapted_fingerprint, fingerprint};
pub use grammar::{token_bytes, Allowed, Grammar, GrammarCompiler, GrammarSpec};
pub use info::{EngineInfo, EngineOptions};
pub use lease::{LeaseCounts, LeaseInfo};
pub use pd::{PdError, Preload};
pub use request::{AdapterChoice, Event, FinishReason, Request, Timings, TokenInfo, Usage};
pub use speculate::{
    ngram_draft, Adapt, Drafter, Speculation, StepCosts, COOL_MAX, COOL_START, MAX_DRAFT, NGRAM_MAX, PAYS_BY,
    SPEC_P_MIN, SPEC_STEP_ROWS,
};
pub use stats::{Observer, Stats, StepFigures};
pub use text::top_logprobs;
use tl_core::{ModelRunner, Tokenizer};
pub use tokio::sync::mpsc::UnboundedReceiver;

use lease::Hold;
use pd::Pd;
use scheduler::Scheduler;
use seq::Seq;
use stats::Shared;
use thread::Mailbox;

/// The handle to the engine thread. Dropping it cancels everything and joins the thread.
pub struct Engine {
    mailbox: Mailbox,
    shared: Arc<Shared>,
    next: AtomicU64,
    info: EngineInfo,
    grammars: GrammarCompiler,
    /// The runner's pool and the figures, for P/D export and import from the server's threads.
    pd: Pd,
}

impl Engine {
    /// Start the engine thread over `runner` (which it owns from now on).
    pub fn start(runner: ModelRunner, tok: Arc<Tokenizer>, opts: EngineOptions) -> Result<Engine, EngineError> {
        Engine::start_with_draft(runner, None, tok, opts)
    }

    /// [`Engine::start`] with a draft model for [`Speculation::Draft`]: a second runner
    /// with its own KV pool, of the same vocabulary size as `runner` (its ids are the
    /// target's). Drafts never change an answer; a poor draft model only slows it.
    pub fn start_with_draft(
        runner: ModelRunner,
        draft: Option<ModelRunner>,
        tok: Arc<Tokenizer>,
        opts: EngineOptions,
    ) -> Result<Engine, EngineError> {
        Engine::start_with_drafters(runner, (draft, None), tok, opts)
    }

    /// [`Engine::start_with_draft`] with, as well or instead, the model's own draft head
    /// for [`Speculation::Mtp`] (`ModelRunner::load_draft_head` of the same model).
    pub fn start_with_drafters(
        runner: ModelRunner,
        (draft, head): (Option<ModelRunner>, Option<ModelRunner>),
        tok: Arc<Tokenizer>,
        opts: EngineOptions,
    ) -> Result<Engine, EngineError> {
        let info = EngineInfo::of(&runner, (draft.as_ref(), head.as_ref()), &opts)?;
        let shared = Arc::new(Shared { accepting: AtomicBool::new(true), ..Shared::default() });
        let eos = runner.config().eos_token_ids.first().copied();
        let grammars = GrammarCompiler::new(Arc::clone(&tok), info.vocab_size, eos);
        let pd = Pd {
            pool: runner.pool(),
            shared: Arc::clone(&shared),
            block_tokens: info.block_tokens,
            groups: info.kv_groups,
            recurrent: info.recurrent,
        };
        let mut sched = Scheduler::new(runner, (draft, head), tok, Arc::clone(&shared), opts.observer, info.n_blocks);
        if let Some(cfg) = opts.disk_cache.as_ref() {
            sched.disk = Some(disk_cache::DiskCache::open(cfg, &sched.kv_backend())?);
        }
        if opts.spec_step_rows > 0 {
            sched.spec.step_rows = opts.spec_step_rows;
        }
        sched.spec.p_min = opts.spec_p_min;
        sched.spec.measured = opts.spec_costs;
        sched.publish()?;
        let mailbox = Mailbox::start(sched)?;
        Ok(Engine { mailbox, shared, next: AtomicU64::new(0), info, grammars, pd })
    }

    /// Facts about the engine.
    pub fn info(&self) -> EngineInfo {
        self.info
    }

    /// Submit one sequence; its events arrive on the returned channel. Dropping the
    /// receiver cancels the sequence at the next step.
    pub fn submit(&self, req: Request) -> Result<UnboundedReceiver<Event>, EngineError> {
        let mut v = self.submit_all(vec![req])?;
        v.pop().ok_or_else(|| EngineError::Internal("no receiver".into()))
    }

    /// Submit several sequences (the choices of one request) all or nothing. A grammar is
    /// compiled here, on the caller's thread, once per distinct grammar: a bad one is a
    /// [`EngineError::BadRequest`] before anything is queued.
    pub fn submit_all(&self, reqs: Vec<Request>) -> Result<Vec<UnboundedReceiver<Event>>, EngineError> {
        self.submit_with(reqs, |_| {})
    }

    /// [`Engine::submit_all`], with `setup` applied to each sequence before it is queued.
    fn submit_with(
        &self,
        reqs: Vec<Request>,
        mut setup: impl FnMut(&mut Seq),
    ) -> Result<Vec<UnboundedReceiver<Event>>, EngineError> {
        for r in &reqs {
            self.info.check(r)?;
        }
        let mut matchers = Vec::with_capacity(reqs.len());
        let mut i = 0;
        while i < reqs.len() {
            let Some(g) = &reqs[i].grammar else {
                matchers.push(None);
                i += 1;
                continue;
            };
            // The choices of one request share their grammar: compile it once.
            let same = reqs[i..].iter().take_while(|r| r.grammar.as_ref() == Some(g)).count();
            matchers.extend(self.grammars.compile(g, same)?.into_iter().map(Some));
            i += same;
        }
        let mut seqs = Vec::with_capacity(reqs.len());
        let mut out = Vec::with_capacity(reqs.len());
        for (req, matcher) in reqs.into_iter().zip(matchers) {
            let (etx, erx) = tokio::sync::mpsc::unbounded_channel();
            // The tail (sample, or verify with this speculation) is fixed here, for life.
            let spec = req.speculate.unwrap_or(self.info.speculate);
            let mut seq = Seq::new(self.next.fetch_add(1, Ordering::SeqCst), req, spec, matcher, etx);
            setup(&mut seq);
            seqs.push(seq);
            out.push(erx);
        }
        self.mailbox.send(seqs, &self.shared, self.info.max_queue)?;
        Ok(out)
    }

    /// Submit embedding sequences (the inputs of one request) all or nothing; each
    /// receiver gets one [`EmbedResult`]. They are planned and batched with generation in
    /// the same steps (embed.rs): an embedding is the same bits alone or among others.
    pub fn embed_all(&self, reqs: Vec<EmbedRequest>) -> Result<Vec<UnboundedReceiver<EmbedResult>>, EngineError> {
        for r in &reqs {
            self.info.check_embed(r)?;
        }
        let mut seqs = Vec::with_capacity(reqs.len());
        let mut out = Vec::with_capacity(reqs.len());
        for req in &reqs {
            let (etx, erx) = tokio::sync::mpsc::unbounded_channel();
            seqs.push(Seq::embedding(self.next.fetch_add(1, Ordering::SeqCst), req, etx));
            out.push(erx);
        }
        self.mailbox.send(seqs, &self.shared, self.info.max_queue)?;
        Ok(out)
    }

    /// Encode whole inputs with an encoder model (docs/spec/encoders.md), all or nothing;
    /// each receiver gets one [`EncodeResult`]. Every input is checked here (empty, too
    /// long, ids or type ids out of range: [`EngineError::BadRequest`] naming its index);
    /// the engine thread runs waiting inputs together (encode.rs), which never changes an
    /// input's outputs. A decoder model refuses.
    pub fn encode_all(&self, reqs: Vec<EncodeRequest>) -> Result<Vec<UnboundedReceiver<EncodeResult>>, EngineError> {
        for (i, r) in reqs.iter().enumerate() {
            self.info.check_encode(i, r)?;
        }
        let mut jobs = Vec::with_capacity(reqs.len());
        let mut out = Vec::with_capacity(reqs.len());
        for req in reqs {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            jobs.push(encode::Job { req, out: tx });
            out.push(rx);
        }
        self.mailbox.send_encodes(jobs, &self.shared, self.info.max_queue)?;
        Ok(out)
    }

    /// A snapshot of the figures.
    pub fn stats(&self) -> Stats {
        Stats::read(&self.shared, self.info.n_blocks)
    }

    /// Whether new submissions are accepted (false once [`Engine::shutdown`] began).
    pub fn accepting(&self) -> bool {
        self.shared.accepting.load(Ordering::SeqCst) && !self.shared.stopped.load(Ordering::SeqCst)
    }

    /// Stop accepting; let every accepted sequence (running or still waiting for blocks)
    /// finish for up to `grace`, then drop what is left (each gets
    /// [`EngineError::ShuttingDown`]). A client that was already answered 200 is served,
    /// not cut, when the grace allows it.
    pub fn shutdown(&self, grace: Duration) {
        self.shared.accepting.store(false, Ordering::SeqCst);
        self.mailbox.shutdown(Instant::now() + grace);
    }

    /// Wait for the engine thread to exit (after [`Engine::shutdown`]).
    pub fn join(&self) {
        self.mailbox.join();
    }

    // P/D (pd.rs, docs/scale-out.md).

    /// Submit a prefill (the choices of one request share its lease only when `n == 1`:
    /// the server submits one) whose blocks are kept under the lease `id` for `ttl` after
    /// it finishes, instead of being released.
    pub fn submit_held(
        &self,
        req: Request,
        id: String,
        ttl: Duration,
    ) -> Result<UnboundedReceiver<Event>, EngineError> {
        let hold = Hold { id, ttl };
        let mut v = self.submit_with(vec![req], |s| s.handoff.hold = Some(hold.clone()))?;
        v.pop().ok_or_else(|| EngineError::Internal("no receiver".into()))
    }

    /// The lease `id`, once its prefill finished.
    pub fn lease(&self, id: &str) -> Option<LeaseInfo> {
        self.pd.lease(id)
    }

    /// Export blocks `from..to` of lease `id` (all from `from` when `to` is `None`) and
    /// release the whole lease: a lease is fetched once, as vLLM's NIXL connector frees
    /// the prefill blocks once the decode side read them.
    pub fn take_lease(&self, id: &str, from: usize, to: Option<usize>) -> Result<Vec<u8>, PdError> {
        self.pd.take_lease(id, from, to)
    }

    /// Release every lease past its expiry; returns how many.
    pub fn expire_leases(&self) -> Result<usize, PdError> {
        self.pd.expire_leases()
    }

    /// Lease figures (one lock of the lease table, no pool lock: cheap enough per scrape).
    pub fn lease_counts(&self) -> LeaseCounts {
        self.shared.leases.counts()
    }

    /// Decode side, step 1: hold the leading full blocks of `prompt`'s first `len - 1`
    /// positions that this pool has in its prefix cache (none with the cache off).
    pub fn hold_prefix(&self, prompt: &[u32]) -> Result<Preload, PdError> {
        self.pd.hold_prefix(prompt, None)
    }

    /// [`Engine::hold_prefix`] for a request under `adapter`: its blocks are keyed by
    /// the adapter, so only blocks computed under the same adapter and scale are found
    /// or imported.
    pub fn hold_prefix_for(&self, prompt: &[u32], adapter: Option<&AdapterChoice>) -> Result<Preload, PdError> {
        self.pd.hold_prefix(prompt, request::chain_root(adapter))
    }

    /// Decode side, step 2: import an envelope holding prompt blocks
    /// `p.n_blocks()..p.needed(prompt.len())` (or more: extra trailing blocks are
    /// ignored) and append them to `p`. Every record with a hash must carry the hash of
    /// this prompt's block at its place; a record without one must be the prompt's last,
    /// partial block, filled at least to position `len - 2`.
    pub fn import_into(&self, p: &mut Preload, prompt: &[u32], envelope: &[u8]) -> Result<(), PdError> {
        self.pd.import_into(p, prompt, envelope)
    }

    /// Decode side, step 3: submit `req` starting from the blocks of `p`, which must cover
    /// every prompt position but the last (checked). With n > 1 choices, use the prefix
    /// cache path instead (each choice needs its own last block).
    pub fn submit_preloaded(&self, req: Request, mut p: Preload) -> Result<UnboundedReceiver<Event>, EngineError> {
        if p.root() != request::chain_root(req.adapter.as_ref()) {
            let reason = "the blocks were held for another adapter (hold_prefix_for)".to_string();
            return Err(EngineError::BadRequest { field: "adapter", reason });
        }
        let (blocks, computed, local) = p.hand_over(req.prompt.len())?;
        let mut cell = Some(blocks);
        let r = self.submit_with(vec![req], |s| {
            if let Some(b) = cell.take() {
                s.preload(b, computed, local);
            }
        });
        if let Some(b) = cell {
            p.blocks = b; // never handed to a sequence: Drop gives them back
        }
        let mut v = r?;
        v.pop().ok_or_else(|| EngineError::Internal("no receiver".into()))
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown(Duration::ZERO);
        self.join();
    }
}
