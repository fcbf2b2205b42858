//! The engine thread and the way to it: [`Mailbox`] is the handle's end (submit,
//! shut down, join), [`run`] the thread's loop (take commands, blocking only when idle;
//! step; publish).

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::encode::Job;
use crate::error::EngineError;
use crate::scheduler::Scheduler;
use crate::seq::Seq;
use crate::stats::Shared;

enum Cmd {
    Submit(Box<Seq>),
    Encode(Job),
    Shutdown(Instant),
}

/// The handle's end of the engine thread: its command channel and its join handle.
pub(crate) struct Mailbox {
    tx: Mutex<Option<mpsc::Sender<Cmd>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Mailbox {
    /// Start the engine thread over `sched`.
    pub(crate) fn start(sched: Scheduler) -> Result<Mailbox, EngineError> {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("tl-engine".into())
            .spawn(move || run(sched, rx))
            .map_err(|e| EngineError::Internal(format!("engine thread: {e}")))?;
        Ok(Mailbox { tx: Mutex::new(Some(tx)), thread: Mutex::new(Some(thread)) })
    }

    /// Queue `seqs` on the engine thread, all or nothing within the queue bound
    /// `max_queue` (counted in `shared.queued` until each is first admitted).
    pub(crate) fn send(&self, seqs: Vec<Seq>, shared: &Shared, max_queue: usize) -> Result<(), EngineError> {
        self.send_all(seqs.into_iter().map(|s| Cmd::Submit(Box::new(s))).collect(), shared, max_queue)
    }

    /// Queue encode jobs, as [`Mailbox::send`] queues sequences (counted until run).
    pub(crate) fn send_encodes(&self, jobs: Vec<Job>, shared: &Shared, max_queue: usize) -> Result<(), EngineError> {
        self.send_all(jobs.into_iter().map(Cmd::Encode).collect(), shared, max_queue)
    }

    fn send_all(&self, cmds: Vec<Cmd>, shared: &Shared, max_queue: usize) -> Result<(), EngineError> {
        if !shared.accepting.load(Ordering::SeqCst) {
            return Err(EngineError::ShuttingDown);
        }
        let n = cmds.len();
        shared
            .queued
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |q| (q + n <= max_queue).then_some(q + n))
            .map_err(|_| EngineError::QueueFull { max_queue })?;
        let guard = self.tx.lock().map_err(|_| EngineError::Internal("engine lock poisoned".into()))?;
        for (k, cmd) in cmds.into_iter().enumerate() {
            let sent = guard.as_ref().is_some_and(|tx| tx.send(cmd).is_ok());
            if !sent {
                // The ones already sent are counted down by the thread as it drops them.
                shared.queued.fetch_sub(n - k, Ordering::SeqCst);
                return Err(EngineError::ShuttingDown);
            }
        }
        Ok(())
    }

    /// Ask the thread to finish what it accepted by `at`, then drop the rest and exit.
    pub(crate) fn shutdown(&self, at: Instant) {
        if let Ok(g) = self.tx.lock() {
            if let Some(tx) = g.as_ref() {
                let _ = tx.send(Cmd::Shutdown(at));
            }
        }
    }

    /// Close the channel and wait for the thread to exit.
    pub(crate) fn join(&self) {
        if let Ok(mut g) = self.tx.lock() {
            g.take(); // a thread waiting for commands sees the channel close
        }
        let handle = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(h) = handle {
            let _ = h.join();
        }
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

/// Take one command: queue a submission (or refuse it once shutting down), or note the
/// earliest shutdown deadline.
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
        Cmd::Encode(job) if deadline.is_some() => {
            sched.shared.queued.fetch_sub(1, Ordering::SeqCst);
            let _ = job.out.send(Err(EngineError::ShuttingDown));
        }
        Cmd::Encode(job) => sched.encodes.push_back(job),
        Cmd::Shutdown(at) => *deadline = Some(deadline.map_or(at, |d| d.min(at))),
    }
}

/// The engine thread: take commands (blocking only when idle), step, publish.
fn run(mut sched: Scheduler, rx: mpsc::Receiver<Cmd>) {
    let mut deadline: Option<Instant> = None;
    let wait = admit_wait();
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
        if !sched.encodes.is_empty() {
            sched.encode_waiting();
        }
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
