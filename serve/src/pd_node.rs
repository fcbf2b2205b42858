//! This server's P/D identity (engine id, advertised address) and counters: a part of
//! [`crate::state::AppState`], kept apart from the hand-off logic in pd/mod.rs so the state
//! can hold it without importing the handlers that read the state.

use std::sync::atomic::AtomicUsize;
use std::sync::OnceLock;

/// P/D state of one server.
#[derive(Default)]
pub struct Pd {
    /// `remote_engine_id`: random per process, as vLLM's engine id.
    pub(crate) engine_id: String,
    /// `host:port` others reach this server at (set once listening).
    pub(crate) addr: OnceLock<(String, u16)>,
    pub(crate) imported_blocks: AtomicUsize,
    pub(crate) local_blocks: AtomicUsize,
    pub(crate) computed_tokens: AtomicUsize,
    pub(crate) remote_prefills: AtomicUsize,
    /// Hand-offs: KV fetched, checked and imported.
    pub(crate) kv_fetches: AtomicUsize,
    /// Prompt positions hand-offs started with (the sum of their `cached_tokens`).
    pub(crate) preloaded_tokens: AtomicUsize,
    pub(crate) fetch_failed: AtomicUsize,
    pub(crate) recomputed: AtomicUsize,
    /// Prefill legs answered without a lease: their decode legs get no KV to fetch.
    pub(crate) unleased_prefills: AtomicUsize,
}

impl Pd {
    pub(crate) fn new() -> Pd {
        Pd { engine_id: format!("tl-{:016x}", crate::api::random_seed()), ..Pd::default() }
    }

    /// Record the address to advertise: `--advertise-host` or the listening host, and
    /// the listening port.
    pub(crate) fn set_addr(&self, advertise: Option<&str>, local: std::net::SocketAddr) {
        let host = match advertise {
            Some(h) => h.to_string(),
            None if local.ip().is_unspecified() => "127.0.0.1".into(),
            None => local.ip().to_string(),
        };
        let _ = self.addr.set((host, local.port()));
    }
}
