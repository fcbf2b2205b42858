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
#![deny(missing_docs)]

mod disk_cache;
mod draft;
mod embed;
mod emit;
mod error;
mod fingerprint;
mod grammar;
mod mtp;
mod pd;
mod prefix;
mod request;
mod scheduler;
mod seq;
mod speculate;
mod speculator;
mod text;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use disk_cache::{DiskCacheConfig, DiskCounts};
pub use embed::{EmbedRequest, EmbedResult, Embedding, Pooling};
pub use error::EngineError;
pub use fingerprint::fingerprint;
pub use grammar::{token_bytes, Allowed, Grammar, GrammarCompiler, GrammarSpec};
pub use pd::{LeaseCounts, LeaseInfo, PdError, Preload};
pub use request::{Event, FinishReason, Request, Timings, TokenInfo, Usage};
pub use speculate::{ngram_draft, Adapt, Speculation, COOL_MAX, COOL_START, MAX_DRAFT, NGRAM_MAX, SPEC_STEP_ROWS};
pub use text::top_logprobs;
use tl_core::{ModelRunner, SharedPool, Tokenizer};
pub use tokio::sync::mpsc::UnboundedReceiver;

use scheduler::Scheduler;
use seq::Seq;

/// What one step did, for metrics.
#[derive(Clone, Copy, Debug)]
pub struct StepFigures {
    /// Tokens fed.
    pub tokens: usize,
    /// Sequences in the step.
    pub seqs: usize,
    /// Of `tokens`, those that were prompt (or recompute) rather than one decode token.
    pub prefill_tokens: usize,
    /// Sequences admitted in this step's plan.
    pub admitted: usize,
    /// Wall time of the forward alone.
    pub forward: Duration,
    /// Wall time of the forward and sampling.
    pub elapsed: Duration,
}

/// Receives timing figures from the engine thread (for histograms). Calls must be cheap.
pub trait Observer: Send + Sync {
    /// After every step.
    fn step(&self, _figures: &StepFigures) {}
    /// A sequence's first token, measured from its submit.
    fn first_token(&self, _ttft: Duration) {}
    /// A sequence was admitted `wait` after its submit (first admission only), with
    /// `cached` of its prompt tokens served from the prefix cache.
    fn admitted(&self, _wait: Duration, _cached: usize) {}
    /// The gap between two tokens of one sequence.
    fn inter_token(&self, _gap: Duration) {}
    /// Whether [`Observer::pool`] wants calls (it costs a pool lock and a walk of the
    /// running sequences per step, so only tests should say yes).
    fn wants_pool(&self) -> bool {
        false
    }
    /// After every step and every reap of cancelled sequences, with the pool locked: the
    /// pool and the block table of every sequence holding blocks (for invariant checks).
    fn pool(&self, _pool: &dyn tl_core::KvBackend, _tables: &[&[u32]]) {}
}

/// Engine settings beyond the runner's [`tl_core::EngineConfig`].
#[derive(Clone, Default)]
pub struct EngineOptions {
    /// Most submitted sequences waiting for admission; more are refused with
    /// [`EngineError::QueueFull`]. 0 means 256.
    pub max_queue: usize,
    /// Timing figures go here.
    pub observer: Option<Arc<dyn Observer>>,
    /// Speculative decoding for requests that do not choose ([`Request::speculate`]):
    /// `None` is [`Speculation::Off`]. Output is the same bits either way.
    pub speculate: Option<Speculation>,
    /// Drafts join a step only while it holds fewer rows than this; 0 means
    /// [`SPEC_STEP_ROWS`]. (`usize::MAX`: always, as tests of drafting under load want.)
    pub spec_step_rows: usize,
    /// Keep full prefix blocks on disk too (disk_cache.rs), so they are found again after
    /// an eviction or a restart. Only for models of one KV layer group (no attention
    /// windows); a windowed model runs without it.
    pub disk_cache: Option<DiskCacheConfig>,
}

/// Counters and gauges the engine thread publishes after every step.
#[derive(Default)]
pub(crate) struct Shared {
    queued: AtomicUsize,
    accepting: AtomicBool,
    waiting: AtomicUsize,
    running: AtomicUsize,
    kv_free: AtomicUsize,
    kv_cached: AtomicUsize,
    kv_in_use: AtomicUsize,
    prefix_hit_tokens: AtomicUsize,
    preemptions: AtomicUsize,
    steps: AtomicUsize,
    generated: AtomicUsize,
    finished: AtomicUsize,
    cancelled: AtomicUsize,
    pub(crate) draft_proposed: AtomicUsize,
    pub(crate) draft_accepted: AtomicUsize,
    stopped: AtomicBool,
    /// P/D: finished prefills' KV waiting for a decode server.
    leases: pd::Leases,
    /// The disk cache's counters, as of the last step.
    disk: Mutex<DiskCounts>,
}

/// A snapshot of the engine's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Sequences waiting for admission (including preempted ones).
    pub waiting: usize,
    /// Sequences admitted.
    pub running: usize,
    /// KV blocks free.
    pub kv_blocks_free: usize,
    /// KV blocks cached (ref 0, findable by prefix hash).
    pub kv_blocks_cached: usize,
    /// KV blocks in use.
    pub kv_blocks_in_use: usize,
    /// KV blocks in the pool.
    pub kv_blocks_total: usize,
    /// Prompt tokens served from the prefix cache, over all admissions.
    pub prefix_hit_tokens: usize,
    /// Preemptions so far.
    pub preemptions: usize,
    /// Steps run.
    pub steps: usize,
    /// Tokens generated.
    pub generated_tokens: usize,
    /// Sequences finished (any reason).
    pub finished: usize,
    /// Sequences dropped because their receiver went away.
    pub cancelled: usize,
    /// Tokens drafted for speculative verification.
    pub draft_tokens: usize,
    /// Drafted tokens that verification accepted (the sampled token was the draft's).
    pub draft_accepted: usize,
    /// The engine thread has exited.
    pub stopped: bool,
    /// The disk cache's counters (all 0 without one).
    pub disk: DiskCounts,
}

/// Fixed facts about the loaded engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineInfo {
    /// The model's context (`max_position_embeddings`), when known.
    pub max_context: Option<usize>,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// KV blocks in the pool.
    pub n_blocks: usize,
    /// Token positions per block.
    pub block_tokens: usize,
    /// Pool pages per block of a block table (the model's KV layer groups, docs/kv.md):
    /// a table, a lease and a preload hold this many entries per `block_tokens` positions.
    pub kv_groups: usize,
    /// Bound on waiting submissions.
    pub max_queue: usize,
    /// Speculation for requests that do not choose.
    pub speculate: Speculation,
    /// A draft model is loaded (`Speculation::Draft` is allowed).
    pub draft_model: bool,
    /// The model's MTP head is loaded (`Speculation::Mtp` is allowed).
    pub mtp_head: bool,
    /// Width of the model's final hidden state (an embedding's full dimension).
    pub hidden_size: usize,
    /// The model has recurrent layers (a state column, docs/spec/kv.md).
    pub recurrent: bool,
}

/// Why a draft model with recurrent layers is refused: its own state would keep the
/// rejected drafts (the target's is rolled back through spare slots; the draft model's
/// tables are not).
const NO_HYBRID_DRAFT: &str =
    "a draft model with recurrent layers is not supported (its state cannot be rolled back past rejected drafts); use a draft model without them, or ngram";

/// Why `mtp` speculation is refused on an engine started without the model's head.
const NO_HEAD: &str = "no MTP head is loaded (start the engine with the model's own draft head, --speculate mtp)";

enum Cmd {
    Submit(Box<Seq>),
    Shutdown(Instant),
}

/// The handle to the engine thread. Dropping it cancels everything and joins the thread.
pub struct Engine {
    tx: Mutex<Option<mpsc::Sender<Cmd>>>,
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    next: AtomicU64,
    info: EngineInfo,
    grammars: GrammarCompiler,
    /// The runner's pool, for P/D export and import from the server's threads.
    pool: SharedPool,
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
        if let Some(h) = &head {
            let (hv, tv, hd, td) =
                (h.config().vocab_size, runner.config().vocab_size, h.hidden_size(), runner.hidden_size());
            if (hv, hd) != (tv, td) {
                let reason =
                    format!("the MTP head's vocabulary and width are {hv} and {hd}, the model's {tv} and {td}");
                return Err(EngineError::BadRequest { field: "speculate", reason });
            }
        }
        if let Some(d) = &draft {
            let (dv, tv) = (d.config().vocab_size, runner.config().vocab_size);
            if dv != tv {
                return Err(EngineError::BadRequest {
                    field: "draft",
                    reason: format!("the draft model's vocabulary has {dv} ids, the model's {tv}"),
                });
            }
            if d.kv_layout().state_column().is_some() {
                return Err(EngineError::BadRequest { field: "draft", reason: NO_HYBRID_DRAFT.into() });
            }
        }
        let n_blocks =
            runner.pool().lock().map_err(|_| EngineError::Internal("KV pool lock poisoned".into()))?.n_blocks()
                as usize;
        let max_queue = if opts.max_queue == 0 { 256 } else { opts.max_queue };
        let info = EngineInfo {
            max_context: runner.config().max_position_embeddings,
            vocab_size: runner.config().vocab_size,
            n_blocks,
            block_tokens: runner.block_tokens(),
            kv_groups: runner.kv_layout().n_groups(),
            max_queue,
            speculate: opts.speculate.unwrap_or(Speculation::Off),
            draft_model: draft.is_some(),
            mtp_head: head.is_some(),
            hidden_size: runner.hidden_size(),
            recurrent: runner.kv_layout().state_column().is_some(),
        };
        if let Err(e) = info.speculate.check() {
            return Err(EngineError::BadRequest { field: "speculate", reason: e });
        }
        if matches!(info.speculate, Speculation::Draft { .. }) && draft.is_none() {
            return Err(EngineError::BadRequest { field: "speculate", reason: "no draft model is loaded".into() });
        }
        if matches!(info.speculate, Speculation::Mtp { .. }) && head.is_none() {
            return Err(EngineError::BadRequest { field: "speculate", reason: NO_HEAD.into() });
        }
        let shared = Arc::new(Shared { accepting: AtomicBool::new(true), ..Shared::default() });
        let eos = runner.config().eos_token_ids.first().copied();
        let grammars = GrammarCompiler::new(Arc::clone(&tok), info.vocab_size, eos);
        let pool = runner.pool();
        let mut sched = Scheduler::new(runner, (draft, head), tok, Arc::clone(&shared), opts.observer, n_blocks);
        if let Some(cfg) = opts.disk_cache.as_ref() {
            sched.disk = Some(disk_cache::DiskCache::open(cfg, &sched.kv_backend())?);
        }
        if opts.spec_step_rows > 0 {
            sched.spec.step_rows = opts.spec_step_rows;
        }
        sched.publish()?;
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("tl-engine".into())
            .spawn(move || run(sched, rx))
            .map_err(|e| EngineError::Internal(format!("engine thread: {e}")))?;
        Ok(Engine {
            tx: Mutex::new(Some(tx)),
            shared,
            thread: Mutex::new(Some(thread)),
            next: AtomicU64::new(0),
            info,
            grammars,
            pool,
        })
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
    pub(crate) fn submit_with(
        &self,
        reqs: Vec<Request>,
        mut setup: impl FnMut(&mut Seq),
    ) -> Result<Vec<UnboundedReceiver<Event>>, EngineError> {
        for r in &reqs {
            self.check(r)?;
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
            let spec = req.speculate.unwrap_or(self.info.speculate);
            let mut seq = Seq::new(self.next.fetch_add(1, Ordering::SeqCst), req, spec, matcher, etx);
            setup(&mut seq);
            seqs.push(seq);
            out.push(erx);
        }
        self.enqueue(seqs)?;
        Ok(out)
    }

    /// Submit embedding sequences (the inputs of one request) all or nothing; each
    /// receiver gets one [`EmbedResult`]. They are planned and batched with generation in
    /// the same steps (embed.rs): an embedding is the same bits alone or among others.
    pub fn embed_all(&self, reqs: Vec<EmbedRequest>) -> Result<Vec<UnboundedReceiver<EmbedResult>>, EngineError> {
        for r in &reqs {
            self.check_embed(r)?;
        }
        let mut seqs = Vec::with_capacity(reqs.len());
        let mut out = Vec::with_capacity(reqs.len());
        for req in &reqs {
            let (etx, erx) = tokio::sync::mpsc::unbounded_channel();
            seqs.push(Seq::embedding(self.next.fetch_add(1, Ordering::SeqCst), req, etx));
            out.push(erx);
        }
        self.enqueue(seqs)?;
        Ok(out)
    }

    /// Queue `seqs` on the engine thread, all or nothing (within the queue bound).
    fn enqueue(&self, seqs: Vec<Seq>) -> Result<(), EngineError> {
        if !self.shared.accepting.load(Ordering::SeqCst) {
            return Err(EngineError::ShuttingDown);
        }
        let n = seqs.len();
        let max = self.info.max_queue;
        self.shared
            .queued
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |q| (q + n <= max).then_some(q + n))
            .map_err(|_| EngineError::QueueFull { max_queue: max })?;
        let guard = self.tx.lock().map_err(|_| EngineError::Internal("engine lock poisoned".into()))?;
        for (k, seq) in seqs.into_iter().enumerate() {
            let sent = guard.as_ref().is_some_and(|tx| tx.send(Cmd::Submit(Box::new(seq))).is_ok());
            if !sent {
                // The ones already sent are counted down by the thread as it drops them.
                self.shared.queued.fetch_sub(n - k, Ordering::SeqCst);
                return Err(EngineError::ShuttingDown);
            }
        }
        Ok(())
    }

    /// A prompt (named `field` in the error) has tokens, each below the vocabulary size.
    fn check_tokens(&self, prompt: &[u32], field: &'static str) -> Result<(), EngineError> {
        let bad = |reason: String| Err(EngineError::BadRequest { field, reason });
        if prompt.is_empty() {
            return bad("no tokens".into());
        }
        if let Some(&t) = prompt.iter().find(|&&t| t as usize >= self.info.vocab_size) {
            return bad(format!("token id {t} >= vocab_size {}", self.info.vocab_size));
        }
        Ok(())
    }

    fn check_embed(&self, r: &EmbedRequest) -> Result<(), EngineError> {
        let bad = |field, reason: String| Err(EngineError::BadRequest { field, reason });
        self.check_tokens(&r.prompt, "input")?;
        if let Some(ctx) = self.info.max_context.filter(|&c| r.prompt.len() > c) {
            return bad("input", format!("{} tokens exceed the context of {ctx}", r.prompt.len()));
        }
        let d = self.info.hidden_size;
        if r.dimensions.is_some_and(|k| k == 0 || k > d) {
            return bad("dimensions", format!("must be in 1..={d} (the model's hidden size)"));
        }
        Ok(())
    }

    fn check(&self, r: &Request) -> Result<(), EngineError> {
        let bad = |field, reason: String| Err(EngineError::BadRequest { field, reason });
        self.check_tokens(&r.prompt, "prompt")?;
        if r.max_tokens == 0 {
            return bad("max_tokens", "must be at least 1".into());
        }
        if let Some(spec) = r.speculate {
            spec.check().or_else(|e| bad("speculate", e))?;
            if matches!(spec, Speculation::Draft { .. }) && !self.info.draft_model {
                return bad("speculate", "this engine has no draft model".into());
            }
            if matches!(spec, Speculation::Mtp { .. }) && !self.info.mtp_head {
                return bad("speculate", NO_HEAD.into());
            }
        }
        let mut biased = std::collections::HashSet::new();
        for &(id, b) in &r.logit_bias {
            if id as usize >= self.info.vocab_size {
                return bad("logit_bias", format!("token id {id} >= vocab_size {}", self.info.vocab_size));
            }
            if !(-100.0..=100.0).contains(&b) {
                return bad("logit_bias", format!("bias {b} for token {id} is outside [-100, 100]"));
            }
            if !biased.insert(id) {
                return bad("logit_bias", format!("token id {id} appears twice"));
            }
        }
        if let Some(ctx) = self.info.max_context {
            if r.prompt.len() + r.max_tokens > ctx {
                return bad(
                    "max_tokens",
                    format!(
                        "{} prompt tokens + {} max_tokens exceed the context of {ctx}",
                        r.prompt.len(),
                        r.max_tokens
                    ),
                );
            }
        }
        Ok(())
    }

    /// A snapshot of the figures.
    pub fn stats(&self) -> Stats {
        let s = &self.shared;
        let l = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        Stats {
            waiting: l(&s.waiting),
            running: l(&s.running),
            kv_blocks_free: l(&s.kv_free),
            kv_blocks_cached: l(&s.kv_cached),
            kv_blocks_in_use: l(&s.kv_in_use),
            kv_blocks_total: self.info.n_blocks,
            prefix_hit_tokens: l(&s.prefix_hit_tokens),
            preemptions: l(&s.preemptions),
            steps: l(&s.steps),
            generated_tokens: l(&s.generated),
            finished: l(&s.finished),
            cancelled: l(&s.cancelled),
            draft_tokens: l(&s.draft_proposed),
            draft_accepted: l(&s.draft_accepted),
            stopped: s.stopped.load(Ordering::SeqCst),
            disk: s.disk.lock().map(|d| *d).unwrap_or_default(),
        }
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
        if let Ok(g) = self.tx.lock() {
            if let Some(tx) = g.as_ref() {
                let _ = tx.send(Cmd::Shutdown(Instant::now() + grace));
            }
        }
    }

    /// Wait for the engine thread to exit (after [`Engine::shutdown`]).
    pub fn join(&self) {
        if let Ok(mut g) = self.tx.lock() {
            g.take(); // a thread waiting for commands sees the channel close
        }
        let handle = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown(Duration::ZERO);
        self.join();
    }
}

/// After a step in which a sequence finished while others still run, how long the engine
/// waits for a new request before planning the next step (`TL_ADMIT_WAIT_MS`, default 3;
/// 0 turns it off). The finished sequence's client is often about to send its next request
/// (a client that keeps N requests in flight, a batch job's next item, an agent's next
/// turn): on loopback it arrives a millisecond or two later, just after the next step
/// began, and would wait that whole step (~100 ms at 1B on two cores) before admission.
/// Waiting a few milliseconds lets it join that step instead. At most this much idle per
/// finishing step; it changes no answer (the plan never changes what a sequence samples).
fn admit_wait() -> Duration {
    let ms = std::env::var("TL_ADMIT_WAIT_MS").ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(3);
    Duration::from_millis(ms)
}

/// The engine thread: take commands (blocking only when idle), step, publish.
fn run(mut sched: Scheduler, rx: mpsc::Receiver<Cmd>) {
    let mut deadline: Option<Instant> = None;
    let wait = admit_wait();
    fn take(cmd: Cmd, sched: &mut Scheduler, deadline: &mut Option<Instant>) {
        match cmd {
            Cmd::Submit(seq) if deadline.is_some() => {
                let mut seq = *seq;
                if seq.counted {
                    seq.counted = false;
                    sched.shared.queued.fetch_sub(1, Ordering::SeqCst);
                }
                seq.out.fail(EngineError::ShuttingDown);
            }
            Cmd::Submit(seq) => sched.waiting.push_back(*seq),
            Cmd::Shutdown(at) => *deadline = Some(deadline.map_or(at, |d| d.min(at))),
        }
    }
    loop {
        if sched.idle() && deadline.is_none() {
            match rx.recv() {
                Ok(cmd) => take(cmd, &mut sched, &mut deadline),
                Err(_) => break,
            }
        }
        loop {
            match rx.try_recv() {
                Ok(cmd) => take(cmd, &mut sched, &mut deadline),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    deadline = Some(deadline.map_or(Instant::now(), |d| d.min(Instant::now())));
                    break;
                }
            }
        }
        let mut result = sched.reap_cancelled();
        sched.observe_pool();
        if let Some(d) = deadline {
            if Instant::now() >= d {
                result = result.and_then(|_| sched.cancel_all(true, EngineError::ShuttingDown));
            }
            if sched.idle() {
                let _ = sched.publish();
                break;
            }
        }
        let finished = sched.shared.finished.load(Ordering::Relaxed);
        result = result.and_then(|_| sched.step().map(|_| ()));
        if let Err(e) = result {
            // A failed forward or pool operation: nothing running can be trusted to
            // continue, but the engine can serve the next requests.
            let _ = sched.cancel_all(true, e);
        }
        sched.observe_pool();
        let _ = sched.publish();
        let someone_left = sched.shared.finished.load(Ordering::Relaxed) > finished;
        if someone_left && !wait.is_zero() && deadline.is_none() && sched.waiting.is_empty() && !sched.idle() {
            match rx.recv_timeout(wait) {
                Ok(cmd) => take(cmd, &mut sched, &mut deadline),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => deadline = Some(Instant::now()),
            }
        }
    }
    sched.shared.stopped.store(true, Ordering::SeqCst);
}
