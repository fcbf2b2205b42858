//! tl-kv: the bounded, Rust-owned KV block pool, registered as `"f16-slab"` (f16 values)
//! and `"q8-slab"` (8-bit codes with an f16 scale per row, [`Q8Slabs`]).
//!
//! Contract: `docs/spec/kv.md`. A [`KvPool`] keeps the block bookkeeping over slab
//! storage: by default [`F16Slabs`], every K and V slab of every block in one
//! allocation made at construction, never grown; [`KvPool::with_slabs`] takes another. Block bookkeeping (reference
//! counts, the free list, the prefix hash index and the LRU of cached blocks) costs O(1)
//! per block touched. [`KvPool::export`] / [`KvPool::import`] move blocks between pools
//! through the envelope documented in `docs/formats/kv-block.md`.
//!
//! Inventory linking pitfall: a binary or test that wants the `"f16-slab"` registration
//! without naming any item of this crate must write `use tl_kv as _;` (the same for
//! `"q8-slab"`).
#![deny(missing_docs)]

mod backend;
mod check;
mod envelope;
mod hybrid;
mod pool;
mod q8;

// The envelope's format and the hashes live in tl-core (one reader and writer for the
// pool, P/D and the disk cache); named here too for the crates and tests that knew them here.
pub use hybrid::HybridPool;
pub use pool::{n_blocks_for_budget, BlockState, F16Slabs, KvPool, DTYPE_F16, DTYPE_Q8, FORMAT_F16_SLAB};
pub use q8::{Q8Slabs, Q8_BACKEND_NAME};
pub use tl_core::envelope::{
    ENVELOPE_MAGIC, ENVELOPE_VERSION, ENVELOPE_VERSION_2, ENVELOPE_VERSION_3, HEADER_BYTES, RECORD_HEADER_BYTES,
    TRAILER_BYTES,
};
pub use tl_core::{block_hash, fnv1a64, group_hash};
pub use tl_core::{KvElem, KvError, KvGeometry, KvSlabs, KvSpec};

/// The name this backend registers under in tl-core's registry.
pub const BACKEND_NAME: &str = "f16-slab";
