//! A persistent team of worker threads for the parallel regions of one forward step.
//!
//! A decode step of a small model is ~150 short parallel regions (four products and the
//! attention per layer, then the LM head), each a few tens of microseconds. Through rayon
//! each region wakes the other threads, which sleep between regions, and that hand-off
//! cost ~7-10% of decode time (docs/benchmarks.md). A [`Team`]'s workers instead spin
//! between regions for a short while ([`SPIN`]), so the next region starts within a
//! fraction of a microsecond, and only then sleep (between steps, say).
//!
//! A region is `n_tasks` independent tasks, claimed one at a time from a shared counter
//! by the calling thread and every worker; the call returns once all have run. Which
//! thread runs which task never changes a result: callers give tasks disjoint outputs,
//! each computed the same way whoever computes it (batch invariance stays bit for bit).
//! A thread that is descheduled (a busy machine) claims fewer tasks instead of holding
//! up the region with a fixed share.
//!
//! [`parallel`] runs on the team the calling thread entered with [`Team::enter`], and on
//! the current rayon pool otherwise (tests, tools), so kernels need not know which.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rayon::prelude::*;

/// How long an idle worker spins for the next region before it sleeps.
pub const SPIN: Duration = Duration::from_micros(200);

/// Most tasks in one region (the counter's width).
const MAX_TASKS: usize = u16::MAX as usize;

/// A region's body: `f(task)` for each task index.
type Job = dyn Fn(usize) + Sync;

/// What the caller and the workers share.
struct Shared {
    /// `epoch << 32 | n_tasks << 16 | next`: which region is current, its size, and the
    /// next task to claim. One word, so a claim can only ever take a task of the region
    /// its claimant saw (a worker late from an earlier region claims nothing).
    state: AtomicU64,
    /// The current region's body, valid while one of its tasks is unfinished. Written by
    /// the caller only while no task of any region is claimable.
    job: Mutex<Option<&'static Job>>,
    /// Tasks of the current region finished.
    done: AtomicU32,
    /// A task panicked in the current region.
    panicked: AtomicBool,
    /// Workers asleep on `wake`.
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
    stop: AtomicBool,
}

fn unpack(s: u64) -> (u32, usize, usize) {
    ((s >> 32) as u32, (s >> 16 & 0xffff) as usize, (s & 0xffff) as usize)
}

impl Shared {
    /// Claim the next task of region `epoch`, if it has one left.
    fn claim(&self, epoch: u32) -> Option<usize> {
        let mut s = self.state.load(Acquire);
        loop {
            let (e, n, next) = unpack(s);
            if e != epoch || next >= n {
                return None;
            }
            match self.state.compare_exchange_weak(s, s + 1, AcqRel, Acquire) {
                Ok(_) => return Some(next),
                Err(now) => s = now,
            }
        }
    }

    /// Run every task of region `epoch` this thread can claim.
    fn work(&self, epoch: u32) {
        while let Some(t) = self.claim(epoch) {
            // The region cannot end before this task is done, so its body is alive.
            let job = *self.job.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(f) = job {
                if catch_unwind(AssertUnwindSafe(|| f(t))).is_err() {
                    self.panicked.store(true, Release);
                }
            }
            self.done.fetch_add(1, Release);
        }
    }
}

/// `threads - 1` workers; the thread that calls [`parallel`] is the last member.
pub struct Team {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    threads: usize,
    /// Serializes regions: one caller at a time.
    caller: Mutex<()>,
}

thread_local! {
    /// The team this thread entered, and whether it is inside one of its regions now.
    static CURRENT: Cell<(*const Team, bool)> = const { Cell::new((std::ptr::null(), false)) };
}

impl Team {
    /// A team of `threads` (the caller included: `threads - 1` workers are spawned).
    pub fn new(threads: usize) -> Team {
        let shared = Arc::new(Shared {
            state: AtomicU64::new(0),
            job: Mutex::new(None),
            done: AtomicU32::new(0),
            panicked: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let workers = (1..threads.max(1))
            .filter_map(|i| {
                let s = Arc::clone(&shared);
                std::thread::Builder::new().name(format!("tl-team-{i}")).spawn(move || worker(&s)).ok()
            })
            .collect::<Vec<_>>();
        let threads = workers.len() + 1;
        Team { shared, workers, threads, caller: Mutex::new(()) }
    }

    /// Threads that run a region (the workers and the caller).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Run `f` with this team as the calling thread's team: [`parallel`] inside uses it.
    pub fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore((*const Team, bool));
        impl Drop for Restore {
            fn drop(&mut self) {
                CURRENT.with(|c| c.set(self.0));
            }
        }
        let _restore = Restore(CURRENT.with(|c| c.replace((self as *const Team, false))));
        f()
    }

    /// Run `f(t)` for `t` in `0..n_tasks` on the team, the caller included.
    fn run<'a>(&self, n_tasks: usize, f: &'a (dyn Fn(usize) + Sync + 'a)) {
        let _one = self.caller.lock().unwrap_or_else(|e| e.into_inner());
        let sh = &*self.shared;
        // SAFETY (lifetime): `f` is only called for claimed tasks of this region, and
        // this function returns only after every one of them has finished (`done`), so
        // no worker calls it once it is gone.
        let f: &'static Job = unsafe { std::mem::transmute::<&'a (dyn Fn(usize) + Sync + 'a), &'static Job>(f) };
        let epoch = unpack(sh.state.load(Acquire)).0.wrapping_add(1);
        *sh.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(f);
        sh.done.store(0, Relaxed);
        sh.panicked.store(false, Relaxed);
        sh.state.store((epoch as u64) << 32 | (n_tasks as u64) << 16, SeqCst);
        if sh.sleepers.load(SeqCst) > 0 {
            let _g = sh.lock.lock().unwrap_or_else(|e| e.into_inner());
            sh.wake.notify_all();
        }
        sh.work(epoch);
        while (sh.done.load(Acquire) as usize) < n_tasks {
            std::hint::spin_loop();
        }
        *sh.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if sh.panicked.load(Acquire) {
            panic!("a task of a parallel region panicked");
        }
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.shared.stop.store(true, SeqCst);
        {
            let _g = self.shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn worker(sh: &Shared) {
    let mut seen = 0u32;
    loop {
        // Spin for the next region, then sleep until one is published.
        let t0 = Instant::now();
        let mut spins = 0u32;
        let epoch = loop {
            let e = unpack(sh.state.load(Acquire)).0;
            if e != seen {
                break e;
            }
            if sh.stop.load(Relaxed) {
                return;
            }
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins % 256 == 0 && t0.elapsed() > SPIN {
                let g = sh.lock.lock().unwrap_or_else(|e| e.into_inner());
                sh.sleepers.fetch_add(1, SeqCst);
                let g = sh
                    .wake
                    .wait_while(g, |_| unpack(sh.state.load(SeqCst)).0 == seen && !sh.stop.load(SeqCst))
                    .unwrap_or_else(|e| e.into_inner());
                sh.sleepers.fetch_sub(1, SeqCst);
                drop(g);
            }
        };
        seen = epoch;
        sh.work(epoch);
    }
}

/// Run `f(t)` for every `t` in `0..n_tasks`, on the calling thread's team (see
/// [`Team::enter`]) or else the current rayon pool, and return when all are done. Each
/// task must write only its own outputs. One task, or a call from inside a task, runs
/// in line.
pub fn parallel(n_tasks: usize, f: impl Fn(usize) + Sync) {
    let (team, inside) = CURRENT.with(Cell::get);
    if n_tasks <= 1 || inside {
        (0..n_tasks).for_each(f);
        return;
    }
    if team.is_null() {
        let f = &f;
        (0..n_tasks).into_par_iter().for_each(|t| f(t));
        return;
    }
    // SAFETY: `enter` set this pointer for the duration of its closure, on this thread,
    // and this call happens inside that closure, so the team is alive.
    let team = unsafe { &*team };
    struct Outside(*const Team);
    impl Drop for Outside {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set((self.0, false)));
        }
    }
    let _outside = Outside(team);
    CURRENT.with(|c| c.set((team as *const Team, true)));
    for start in (0..n_tasks).step_by(MAX_TASKS) {
        let n = (n_tasks - start).min(MAX_TASKS);
        let body = |t: usize| {
            CURRENT.with(|c| c.set((team as *const Team, true)));
            f(start + t)
        };
        team.run(n, &body);
    }
}

/// `f(i, chunk)` for each `chunk`-long piece of `out` (the last may be shorter), as the
/// tasks of one [`parallel`] region.
pub fn parallel_chunks<T: Send>(out: &mut [T], chunk: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    if chunk == 0 || out.is_empty() {
        return;
    }
    let len = out.len();
    let base = SendPtr(out.as_mut_ptr());
    parallel(len.div_ceil(chunk), |i| {
        let start = i * chunk;
        let n = chunk.min(len - start);
        // SAFETY: task `i` runs once, and the pieces of distinct tasks are disjoint
        // ranges of `out`, which is borrowed mutably for the whole region.
        let piece = unsafe { std::slice::from_raw_parts_mut(base.get().add(start), n) };
        f(i, piece)
    });
}

/// A pointer the tasks of a region may share (each touches its own part).
struct SendPtr<T>(*mut T);
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
// SAFETY: see `parallel_chunks`: tasks write disjoint parts.
unsafe impl<T: Send> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    fn get(self) -> *mut T {
        self.0
    }
}

/// Threads a region started here would use: the team's, else the rayon pool's.
pub fn threads() -> usize {
    let (team, _) = CURRENT.with(Cell::get);
    if team.is_null() {
        rayon::current_num_threads()
    } else {
        // SAFETY: as in `parallel`.
        unsafe { &*team }.threads()
    }
}
