//! What the engine thread publishes and who watches it: the counters and gauges it
//! stores after every step ([`Shared`], read by the handle as a [`Stats`] snapshot) and
//! the [`Observer`] that receives timing figures as they happen.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::disk_cache::DiskCounts;
use crate::lease::Leases;

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

/// Counters and gauges the engine thread publishes after every step.
#[derive(Default)]
pub(crate) struct Shared {
    /// Submitted sequences not yet admitted once (the bounded queue).
    pub(crate) queued: AtomicUsize,
    pub(crate) accepting: AtomicBool,
    pub(crate) waiting: AtomicUsize,
    pub(crate) running: AtomicUsize,
    pub(crate) kv_free: AtomicUsize,
    pub(crate) kv_cached: AtomicUsize,
    pub(crate) kv_in_use: AtomicUsize,
    pub(crate) prefix_hit_tokens: AtomicUsize,
    pub(crate) preemptions: AtomicUsize,
    pub(crate) steps: AtomicUsize,
    pub(crate) generated: AtomicUsize,
    pub(crate) finished: AtomicUsize,
    pub(crate) cancelled: AtomicUsize,
    pub(crate) draft_proposed: AtomicUsize,
    pub(crate) draft_accepted: AtomicUsize,
    pub(crate) stopped: AtomicBool,
    /// P/D: finished prefills' KV waiting for a decode server.
    pub(crate) leases: Leases,
    /// The disk cache's counters, as of the last step.
    pub(crate) disk: Mutex<DiskCounts>,
}

impl Shared {
    /// The pool gauges, from a locked pool (the engine thread after a step, or P/D
    /// operations that took or released blocks off it while it may be idle).
    pub(crate) fn publish_pool(&self, g: &dyn tl_core::KvBackend) {
        self.kv_free.store(g.n_free(), Ordering::Relaxed);
        self.kv_cached.store(g.n_cached(), Ordering::Relaxed);
        self.kv_in_use.store(g.n_in_use(), Ordering::Relaxed);
    }
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

impl Stats {
    /// A snapshot of `s` for a pool of `n_blocks`.
    pub(crate) fn read(s: &Shared, n_blocks: usize) -> Stats {
        let l = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        Stats {
            waiting: l(&s.waiting),
            running: l(&s.running),
            kv_blocks_free: l(&s.kv_free),
            kv_blocks_cached: l(&s.kv_cached),
            kv_blocks_in_use: l(&s.kv_in_use),
            kv_blocks_total: n_blocks,
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
}
