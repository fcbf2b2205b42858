//! tl-kv: the bounded, Rust-owned f16 KV block pool, registered as `"f16-slab"`.
//!
//! Contract: `docs/spec/kv.md`. A [`KvPool`] keeps the block bookkeeping over slab
//! storage: by default [`F16Slabs`], every K and V slab of every block in one
//! allocation made at construction, never grown; [`KvPool::with_slabs`] takes another. Block bookkeeping (reference
//! counts, the free list, the prefix hash index and the LRU of cached blocks) costs O(1)
//! per block touched. [`KvPool::export`] / [`KvPool::import`] move blocks between pools
//! through the envelope documented in `docs/formats/kv-block.md`.
//!
//! Inventory linking pitfall: a binary or test that wants the `"f16-slab"` registration
//! without naming any item of this crate must write `use tl_kv as _;`.
#![deny(missing_docs)]

mod backend;
mod check;
mod envelope;
mod hash;
mod pool;

pub use envelope::{ENVELOPE_MAGIC, ENVELOPE_VERSION, HEADER_BYTES, RECORD_HEADER_BYTES, TRAILER_BYTES};
pub use hash::{block_hash, fnv1a64};
pub use pool::{n_blocks_for_budget, BlockState, F16Slabs, KvPool, DTYPE_F16, FORMAT_F16_SLAB};
pub use tl_core::{KvError, KvGeometry, KvSlabs, KvSpec};

/// The name this backend registers under in tl-core's registry.
pub const BACKEND_NAME: &str = "f16-slab";
