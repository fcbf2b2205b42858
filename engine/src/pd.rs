//! Disaggregated prefill/decode (docs/scale-out.md), the engine's half.
//!
//! Prefill side: a sequence submitted with `Engine::submit_held` does not give its KV
//! blocks back when it finishes; they move, still referenced, into a lease (lease.rs) that a decode
//! server fetches (`Engine::take_lease`, which exports them in the KV envelope and
//! releases them) or that expires (`Engine::expire_leases`).
//!
//! Decode side: `Engine::hold_prefix` takes the leading prompt blocks this pool already
//! has in its prefix cache, `Engine::import_into` appends the blocks fetched from the
//! prefill server (checking that every full block's hash is the hash of this prompt's
//! tokens), and `Engine::submit_preloaded` starts a sequence whose first
//! `prompt.len() - 1` positions are already computed: only the last prompt token goes
//! through the forward here, and its logits are the ones the sampler draws from first.
//! Because the forward is chunk-invariant bit for bit, that is the same answer as a
//! whole prefill on one server (the scheduler's prefix-cache path relies on the same).
//!
//! A hybrid model (docs/spec/kv.md, "Recurrent state beside the pages") keeps its state
//! only at block boundaries, so its decode side starts from the last whole block row
//! before the prompt's last position, `(len - 1) / B` rows, whose state slot the lease
//! carries (registered under its group hash, checked like a page), and computes the
//! under-`B` positions after it itself. Its prefill ends a step at that boundary
//! (scheduler.rs) so the slot is there.
//!
//! The handle's P/D methods (lib.rs) hand their work to [`Pd`], which holds what it needs
//! of the engine: the pool, the published figures and the shape of a table row.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use thiserror::Error;
use tl_core::envelope::Entry;
use tl_core::{SharedPool, NO_BLOCK};

use crate::error::EngineError;
use crate::lease::{Lease, LeaseInfo};
use crate::stats::Shared;

/// Why a P/D operation failed. Each names the lease or block at fault.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PdError {
    /// No lease of that id (never made, already fetched, or expired).
    #[error("no KV lease {id:?} (unknown, already fetched or expired)")]
    UnknownLease {
        /// The lease id.
        id: String,
    },
    /// A block range outside the lease.
    #[error("KV lease {id:?} holds {held} blocks; blocks {from}..{to} were asked for")]
    Range {
        /// The lease id.
        id: String,
        /// First block asked for.
        from: usize,
        /// One past the last.
        to: usize,
        /// Blocks held.
        held: usize,
    },
    /// The fetched envelope does not hold this prompt's KV.
    #[error("imported KV: {reason}")]
    Mismatch {
        /// What differs (block index, hash, fill, count).
        reason: String,
    },
    /// The pool refused (too few blocks, a bad envelope).
    #[error(transparent)]
    Kv(#[from] tl_core::KvError),
    /// The engine is unusable (a poisoned lock).
    #[error("{0}")]
    Engine(String),
}

impl From<PdError> for EngineError {
    fn from(e: PdError) -> EngineError {
        match e {
            PdError::Engine(m) => EngineError::Internal(m),
            e => EngineError::BadRequest { field: "kv_transfer_params", reason: e.to_string() },
        }
    }
}

/// Blocks held for one prompt on the decode side before it is submitted: the first
/// `computed` positions' K/V, block j holding positions j*B.. Dropped unused, it gives
/// the blocks back.
pub struct Preload {
    pool: SharedPool,
    shared: Arc<Shared>,
    /// (ceil(computed / B),) once complete; fewer while being assembled.
    pub(crate) blocks: Vec<u32>,
    /// Leading blocks taken from the local prefix cache (not imported).
    local: usize,
    block_tokens: usize,
    /// Pages per block (the KV layer groups): `blocks` holds rows of this many.
    groups: usize,
    /// The state column of a hybrid model's rows.
    state: Option<usize>,
    /// The root of the prompt's block-hash chain (its adapter's key, `None` for the base).
    root: Option<u64>,
}

impl Preload {
    /// Blocks held (local hits and imported).
    pub fn n_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// The root of the prompt's block-hash chain (its adapter's key).
    pub(crate) fn root(&self) -> Option<u64> {
        self.root
    }

    /// Leading blocks that came from this pool's own prefix cache.
    pub fn n_local(&self) -> usize {
        self.local
    }

    /// Blocks (pages: one per layer group and `B` positions) a prompt of `len` tokens
    /// needs for its first `len - 1` positions; for a hybrid model, the table entries of
    /// its whole rows before position `len - 1` (the state is kept at row ends only).
    pub fn needed(&self, len: usize) -> usize {
        let upto = len.saturating_sub(1);
        let rows = if self.state.is_some() { upto / self.block_tokens } else { upto.div_ceil(self.block_tokens) };
        rows * self.groups
    }
}

impl Drop for Preload {
    fn drop(&mut self) {
        if self.blocks.is_empty() {
            return;
        }
        if let Ok(mut g) = self.pool.lock() {
            let _ = tl_core::release_all(g.as_mut(), self.blocks.drain(..));
            self.shared.publish_pool(g.as_ref());
        }
    }
}

/// The chained hashes of every full block of `tokens`, the first's parent `root`.
fn chain(root: Option<u64>, tokens: &[u32], b: usize) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::with_capacity(tokens.len() / b);
    for blk in tokens.chunks_exact(b) {
        out.push(tl_core::block_hash(out.last().copied().or(root), blk));
    }
    out
}

fn poisoned() -> PdError {
    PdError::Engine("KV pool lock poisoned".into())
}

/// The handle's P/D side: the pool, the published figures and the shape of a table row.
pub(crate) struct Pd {
    pub(crate) pool: SharedPool,
    pub(crate) shared: Arc<Shared>,
    pub(crate) block_tokens: usize,
    /// Entries per table row (the KV layer groups).
    pub(crate) groups: usize,
    /// A hybrid model's rows end with a state column.
    pub(crate) recurrent: bool,
}

impl Pd {
    /// The lease `id`, once its prefill finished.
    pub(crate) fn lease(&self, id: &str) -> Option<LeaseInfo> {
        let m = self.shared.leases.map.lock().ok()?;
        m.get(id).map(|l| LeaseInfo { blocks: l.blocks.clone(), tokens: l.tokens })
    }

    /// Export blocks `from..to` of lease `id` (all from `from` when `to` is `None`) and
    /// release the whole lease: a lease is fetched once, as vLLM's NIXL connector frees
    /// the prefill blocks once the decode side read them.
    pub(crate) fn take_lease(&self, id: &str, from: usize, to: Option<usize>) -> Result<Vec<u8>, PdError> {
        let lease = {
            let mut m = self.shared.leases.map.lock().map_err(|_| poisoned())?;
            m.remove(id).ok_or_else(|| PdError::UnknownLease { id: id.into() })?
        };
        let held = lease.blocks.len();
        let to = to.unwrap_or(held);
        let mut g = self.pool.lock().map_err(|_| poisoned())?;
        let out = if from <= to && to <= held {
            g.export(&lease.blocks[from..to]).map_err(PdError::from)
        } else {
            Err(PdError::Range { id: id.into(), from, to, held })
        };
        tl_core::release_all(g.as_mut(), lease.blocks.iter().copied())?;
        self.shared.publish_pool(g.as_ref());
        self.shared.leases.fetched.fetch_add(1, Ordering::Relaxed);
        out
    }

    /// Release every lease past its expiry; returns how many.
    pub(crate) fn expire_leases(&self) -> Result<usize, PdError> {
        let now = Instant::now();
        let gone: Vec<Lease> = {
            let mut m = self.shared.leases.map.lock().map_err(|_| poisoned())?;
            let ids: Vec<String> = m.iter().filter(|(_, l)| l.expires <= now).map(|(k, _)| k.clone()).collect();
            ids.iter().filter_map(|k| m.remove(k)).collect()
        };
        if gone.is_empty() {
            return Ok(0);
        }
        let mut g = self.pool.lock().map_err(|_| poisoned())?;
        for l in &gone {
            tl_core::release_all(g.as_mut(), l.blocks.iter().copied())?;
        }
        self.shared.publish_pool(g.as_ref());
        self.shared.leases.expired.fetch_add(gone.len(), Ordering::Relaxed);
        Ok(gone.len())
    }

    /// Decode side, step 1: hold the leading full blocks of `prompt`'s first `len - 1`
    /// positions that this pool has in its prefix cache (none with the cache off).
    pub(crate) fn hold_prefix(&self, prompt: &[u32], root: Option<u64>) -> Result<Preload, PdError> {
        let b = self.block_tokens.max(1);
        let mut p = Preload {
            pool: self.pool.clone(),
            shared: Arc::clone(&self.shared),
            blocks: Vec::new(),
            local: 0,
            block_tokens: b,
            groups: self.groups.max(1),
            // The state column is a row's last entry (kv.md).
            state: self.recurrent.then(|| self.groups.max(1) - 1),
            root,
        };
        let usable = prompt.len().saturating_sub(1);
        let hashes = chain(root, &prompt[..usable], b);
        let mut g = self.pool.lock().map_err(|_| poisoned())?;
        // Whole blocks only: every group's page (a windowed page given back or evicted
        // ends the local part; the import brings the rest).
        for h in hashes.into_iter().take(p.needed(prompt.len()) / p.groups) {
            let row: Vec<Option<u32>> = (0..p.groups).map(|j| g.lookup(tl_core::group_hash(h, j))).collect();
            // A hybrid's state slot is kept on some rows only: a row without one is a hole.
            if row.iter().enumerate().all(|(j, e)| e.is_some() || Some(j) == p.state) {
                p.blocks.extend(row.into_iter().map(|e| e.unwrap_or(NO_BLOCK)));
            } else {
                tl_core::release_all(g.as_mut(), row.into_iter().flatten())?;
                break;
            }
        }
        // A hybrid resumes from its last local row's state: back to the last row that has it.
        tl_core::keep_to_last_state(g.as_mut(), &mut p.blocks, p.groups, p.state)?;
        p.local = p.blocks.len();
        self.shared.publish_pool(g.as_ref());
        Ok(p)
    }

    /// Decode side, step 2: import an envelope holding prompt blocks
    /// `p.n_blocks()..p.needed(prompt.len())` (or more: extra trailing blocks are
    /// ignored) and append them to `p`. Every record with a hash must carry the hash of
    /// this prompt's block at its place; a record without one must be the prompt's last,
    /// partial block, filled at least to position `len - 2`.
    pub(crate) fn import_into(&self, p: &mut Preload, prompt: &[u32], envelope: &[u8]) -> Result<(), PdError> {
        let b = p.block_tokens;
        let first = p.blocks.len();
        let need = p.needed(prompt.len());
        let want = need.saturating_sub(first);
        let env = tl_core::Envelope::read(envelope)?;
        let entries = env.entries();
        let n = entries.len();
        if n < want {
            return Err(PdError::Mismatch { reason: format!("the envelope holds {n} blocks, {want} are needed") });
        }
        let hashes = chain(p.root, prompt, b);
        let usable = prompt.len() - 1;
        for (j, &e) in entries.iter().take(want).enumerate() {
            // Entry j is table entry `first + j`: group `% G` of block `/ G`.
            let (k, grp) = ((first + j) / p.groups, (first + j) % p.groups);
            let state = Some(grp) == p.state;
            let (fill, hash) = match (e, env.state()) {
                (Entry::Page(i), _) if !state => (env.record(i).fill, env.record(i).hash),
                (Entry::Slot(i), Some(s)) if state => (s.slot(i).fill, s.slot(i).hash),
                // A row without a state snapshot, before the last: the decode resumes after it.
                (Entry::Hole, _) if state && first + j + p.groups < need => continue,
                (e, _) => {
                    return Err(PdError::Mismatch {
                        reason: format!(
                            "block {k}: {e:?} where the table holds a {}",
                            if state { "state slot" } else { "page" }
                        ),
                    })
                }
            };
            let upto = (usable - k * b).min(b); // positions of block k that must hold data
            let want = hashes.get(k).map(|&h| tl_core::group_hash(h, grp));
            match hash {
                Some(h) if want == Some(h) => {}
                Some(h) => {
                    return Err(PdError::Mismatch {
                        reason: format!("block {k}: hash {h:#018x} is not this prompt's ({want:?})"),
                    })
                }
                None if (fill as usize) < upto => {
                    return Err(PdError::Mismatch {
                        reason: format!("block {k}: fill {fill}, the prompt needs {upto} positions there"),
                    })
                }
                None if upto == b => {
                    return Err(PdError::Mismatch { reason: format!("block {k}: a full prompt block without a hash") })
                }
                None => {}
            }
        }
        // Only the records needed: re-export is not possible here, so cut the envelope.
        let cut;
        let buf = if n == want {
            envelope
        } else {
            cut = env.first(want)?;
            &cut[..]
        };
        let mut g = self.pool.lock().map_err(|_| poisoned())?;
        let ids = g.import(buf)?;
        self.shared.publish_pool(g.as_ref());
        p.blocks.extend(ids);
        Ok(())
    }
}

impl Preload {
    /// Decode side, step 3 (the handle's `submit_preloaded`): the blocks, computed
    /// positions and local positions a sequence of a `len`-token prompt starts from. The
    /// blocks must cover every prompt position but the last (checked); on an error they
    /// stay here.
    pub(crate) fn hand_over(&mut self, len: usize) -> Result<(Vec<u32>, usize, usize), EngineError> {
        let need = self.needed(len);
        if self.blocks.len() != need {
            return Err(EngineError::Internal(format!(
                "a preload of {} blocks for a prompt that needs {need}",
                self.blocks.len()
            )));
        }
        let blocks = std::mem::take(&mut self.blocks);
        // Every position but the last; a hybrid's whole rows before it.
        let computed = (len - 1).min(blocks.len() / self.groups * self.block_tokens);
        let local = (self.local / self.groups * self.block_tokens).min(computed);
        Ok((blocks, computed, local))
    }
}
