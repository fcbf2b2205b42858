//! P/D's lease store (docs/scale-out.md): what a held prefill's finish does with its
//! blocks, and the leases they wait under for a decode server. The engine thread writes it
//! at a held sequence's finish ([`keep`]); the server's threads read and release it
//! through the handle (pd.rs).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a held sequence's finish does with its blocks.
#[derive(Clone, Debug)]
pub(crate) struct Hold {
    pub(crate) id: String,
    pub(crate) ttl: Duration,
}

/// A sequence's part in P/D: the lease its blocks go to at finish (a prefill), or how
/// many of its preloaded positions this pool's own prefix cache held (a decode: the only
/// ones that count as prefix-cache hits; the rest came over the network).
#[derive(Default)]
pub(crate) struct Handoff {
    pub(crate) hold: Option<Hold>,
    pub(crate) preload_local: usize,
}

/// One prefill's KV, waiting for its decode server.
pub(crate) struct Lease {
    /// Block table: position j in blocks[j / B], (ceil(tokens / B),).
    pub(crate) blocks: Vec<u32>,
    /// Positions computed.
    pub(crate) tokens: usize,
    pub(crate) expires: Instant,
}

/// The leases and their counters (in [`crate::stats::Shared`], written by the engine thread at
/// a held sequence's finish and by the server's fetch and expiry).
#[derive(Default)]
pub(crate) struct Leases {
    pub(crate) map: Mutex<HashMap<String, Lease>>,
    pub(crate) fetched: AtomicUsize,
    pub(crate) expired: AtomicUsize,
}

/// A lease as the prefill server describes it to the decode server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseInfo {
    /// Pool block ids, in block-table order.
    pub blocks: Vec<u32>,
    /// Prompt positions whose K/V the blocks hold.
    pub tokens: usize,
}

/// Lease counts for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseCounts {
    /// Leases holding blocks now.
    pub held: usize,
    /// Blocks held by them.
    pub held_blocks: usize,
    /// Leases released by a fetch, so far.
    pub fetched: usize,
    /// Leases released because nobody fetched them in time, so far.
    pub expired: usize,
}

/// Move a finished held sequence's blocks into its lease (engine thread).
pub(crate) fn keep(leases: &Leases, hold: Hold, blocks: Vec<u32>, tokens: usize, pool: &mut dyn tl_core::KvBackend) {
    let old = leases
        .map
        .lock()
        .ok()
        .and_then(|mut m| m.insert(hold.id, Lease { blocks, tokens, expires: Instant::now() + hold.ttl }));
    // Lease ids are random: a repeat is a client reusing one. The newer KV wins.
    if let Some(old) = old {
        let _ = tl_core::release_all(pool, old.blocks);
    }
}

impl Leases {
    /// Lease figures (one lock of the lease table, no pool lock: cheap enough per scrape).
    pub(crate) fn counts(&self) -> LeaseCounts {
        let (held, held_blocks) =
            self.map.lock().map(|m| (m.len(), m.values().map(|x| x.blocks.len()).sum())).unwrap_or_default();
        LeaseCounts {
            held,
            held_blocks,
            fetched: self.fetched.load(Ordering::Relaxed),
            expired: self.expired.load(Ordering::Relaxed),
        }
    }
}
