//! How the engine refuses or drops a request, and the two helpers every engine-thread
//! file needs to turn pool failures into that error. A leaf: every other file may import
//! it without making a circle.

use std::sync::MutexGuard;

use thiserror::Error;
use tl_core::{KvBackend, SharedPool};

/// Why the engine refused or dropped a request.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum EngineError {
    /// The waiting queue holds `max_queue` requests already.
    #[error("the queue is full ({max_queue} requests waiting)")]
    QueueFull {
        /// The bound.
        max_queue: usize,
    },
    /// The engine is shutting down or has stopped.
    #[error("the engine is shutting down")]
    ShuttingDown,
    /// A request the engine cannot run, with the field at fault.
    #[error("{field}: {reason}")]
    BadRequest {
        /// The request field.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// The sequence needs more KV blocks than the whole pool has.
    #[error("the sequence needs {needed} KV blocks, the pool has {n_blocks}")]
    PoolTooSmall {
        /// Blocks needed.
        needed: usize,
        /// Blocks in the pool.
        n_blocks: usize,
    },
    /// The forward, the pool or the sampler failed.
    #[error("engine: {0}")]
    Internal(String),
}

/// A locked KV pool.
pub(crate) type Pool<'a> = MutexGuard<'a, Box<dyn KvBackend>>;

/// Lock `pool`; a poisoned lock is an internal error (a thread panicked holding it).
pub(crate) fn lock(pool: &SharedPool) -> Result<Pool<'_>, EngineError> {
    pool.lock().map_err(|_| EngineError::Internal("KV pool lock poisoned".into()))
}

/// A pool, forward or bookkeeping failure as an internal error.
pub(crate) fn kv_err(e: impl std::fmt::Display) -> EngineError {
    EngineError::Internal(e.to_string())
}
