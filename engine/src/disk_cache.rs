//! Prompt caches on disk: full prefix blocks kept as files, found again by their prefix
//! hash after the pool evicted them or the process restarted.
//!
//! Each file is one KV block envelope (docs/formats/kv-block.md: versions 1 and 2, or 3
//! for a hybrid model; checksummed) holding one block-table row (every layer group's page,
//! a hybrid's state slot or hole) registered under its hash, named
//! `<hash as 16 hex digits>.kvb`, in a directory per fingerprint and KV element type
//! (`<root>/<fingerprint>-<backend>`): a block's prefix hash chains only its tokens, so the
//! directory name is what keeps another model's (or another element type's) KV apart.
//! Reading goes through the pool's own `import`, which checks magic, version, element
//! type, geometry, length and checksum before touching a block; the scheduler checks
//! besides that the file holds one full block registered under the hash it was looked up
//! by. A file that fails any check is deleted and its tokens are prefilled again: a bad
//! file costs time, never a wrong bit.
//!
//! Blocks are written when they are registered (write-through), not at eviction: the
//! pool evicts inside `alloc`, where the block's bits are already being overwritten, and
//! a block written once stays valid for as long as the fingerprint does, so every block
//! the pool may evict is already on disk. Files go in whole (a temporary file, then a
//! rename), so a crash leaves no half-written `.kvb`. The directory is bounded: past
//! `max_bytes` the files least recently written or read go first (their mtime).

use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::time::SystemTime;

use tl_core::envelope::Entry;
use tl_core::{group_hash, KvBackend, KvLayout, NO_BLOCK};

use crate::error::{kv_err, EngineError};
use crate::prefix::PartialIndex;

/// Where and how much: the `serve --kv-disk DIR --kv-disk-max-gib N` settings.
#[derive(Clone, Debug)]
pub struct DiskCacheConfig {
    /// The root directory; blocks go in `<dir>/<fingerprint>-<backend>/`.
    pub dir: PathBuf,
    /// The most bytes of block files kept in this model's directory.
    pub max_bytes: u64,
    /// The engine fingerprint (`tl_engine::fingerprint`): blocks of another model, weight
    /// mode or engine version live in another directory.
    pub fingerprint: String,
}

/// Disk cache counters, in [`crate::stats::Stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskCounts {
    /// Blocks written.
    pub written: usize,
    /// Blocks read back into the pool.
    pub read: usize,
    /// Files refused (corrupt, truncated, foreign) and deleted.
    pub refused: usize,
    /// Files deleted to keep the directory under its bound.
    pub dropped: usize,
}

/// One model's block directory.
pub(crate) struct DiskCache {
    dir: PathBuf,
    max_bytes: u64,
    /// Bytes of `.kvb` files, as of the last scan plus what was written since.
    bytes: u64,
    /// Hashes whose files follow a refused one in some prompt's chain: not read yet, so
    /// maybe as damaged as it was. Their recomputed blocks are written over them.
    suspect: HashSet<u64>,
    pub(crate) counts: DiskCounts,
}

/// A fingerprint or backend name as a path component: nothing that could leave the root.
fn safe_component(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl DiskCache {
    /// Open (creating) `<cfg.dir>/<fingerprint>-<backend>`.
    pub(crate) fn open(cfg: &DiskCacheConfig, backend: &str) -> Result<DiskCache, EngineError> {
        for (what, s) in [("fingerprint", cfg.fingerprint.as_str()), ("KV backend", backend)] {
            if !safe_component(s) {
                return Err(EngineError::BadRequest {
                    field: "kv_disk",
                    reason: format!("{what} {s:?} is not a plain file name"),
                });
            }
        }
        let dir = cfg.dir.join(format!("{}-{backend}", cfg.fingerprint));
        fs::create_dir_all(&dir).map_err(|e| EngineError::Internal(format!("{}: {e}", dir.display())))?;
        // A crash between create and rename leaves a temporary file: never read, removed.
        for e in fs::read_dir(&dir).into_iter().flatten().flatten() {
            if e.path().extension().is_some_and(|x| x == "tmp") {
                let _ = fs::remove_file(e.path());
            }
        }
        let mut cache = DiskCache {
            dir,
            max_bytes: cfg.max_bytes,
            bytes: 0,
            suspect: HashSet::new(),
            counts: DiskCounts::default(),
        };
        cache.bound();
        Ok(cache)
    }

    fn path(&self, hash: u64) -> PathBuf {
        self.dir.join(format!("{hash:016x}.kvb"))
    }

    /// Whether a block registered under `hash` should be written: no file is there, or
    /// the one there is suspect.
    pub(crate) fn wants(&self, hash: u64) -> bool {
        self.suspect.contains(&hash) || !self.path(hash).is_file()
    }

    /// After a refusal at `chain[k]`, the files of `chain[k + 1..]` go unread this time:
    /// a damaged directory (a bad disk, a partial copy) is repaired as the prompt's
    /// blocks are recomputed, not one refusal per restart.
    pub(crate) fn suspect(&mut self, rest: &[u64]) {
        let there: Vec<u64> = rest.iter().copied().filter(|&h| self.path(h).is_file()).collect();
        self.suspect.extend(there);
    }

    /// Keep `env` (one block's envelope) under `hash`, unless it is there already (and
    /// not suspect) or larger than the whole bound. An I/O error loses only this block's
    /// copy. Rewriting a suspect file with a recomputed block is harmless even when the
    /// file was fine: the bits are the same.
    pub(crate) fn write(&mut self, hash: u64, env: &[u8]) {
        if !self.wants(hash) || env.len() as u64 > self.max_bytes {
            return;
        }
        if self.suspect.remove(&hash) {
            self.refuse_silently(hash);
        }
        let tmp = self.dir.join(format!(".{hash:016x}.{}.tmp", std::process::id()));
        let ok =
            fs::File::create(&tmp).and_then(|mut f| f.write_all(env)).and_then(|()| fs::rename(&tmp, self.path(hash)));
        if ok.is_err() {
            let _ = fs::remove_file(&tmp);
            return;
        }
        self.counts.written += 1;
        self.bytes += env.len() as u64;
        if self.bytes > self.max_bytes {
            self.bound();
        }
    }

    /// The file for `hash`, marked as just used (so the bound drops it last), or `None`.
    pub(crate) fn read(&mut self, hash: u64) -> Option<Vec<u8>> {
        let path = self.path(hash);
        // Never written by this cache (it keeps no file past the bound): not read into
        // memory at all, however large someone made it.
        if fs::metadata(&path).ok()?.len() > self.max_bytes {
            self.refuse(hash);
            return None;
        }
        let bytes = fs::read(&path).ok()?;
        if let Ok(f) = fs::File::options().write(true).open(&path) {
            let _ = f.set_modified(SystemTime::now());
        }
        Some(bytes)
    }

    /// The file for `hash` failed a check: delete it, so the next lookup recomputes and
    /// the recomputed block is written again.
    pub(crate) fn refuse(&mut self, hash: u64) {
        self.refuse_silently(hash);
        self.counts.refused += 1;
    }

    /// Delete the file for `hash`, keeping the byte count.
    fn refuse_silently(&mut self, hash: u64) {
        let path = self.path(hash);
        if let Ok(m) = fs::metadata(&path) {
            self.bytes = self.bytes.saturating_sub(m.len());
        }
        let _ = fs::remove_file(path);
    }

    /// Rescan the directory and delete the oldest files (by mtime, then name) until the
    /// rest fit in `max_bytes`, less a tenth: the scan costs a directory listing, so a
    /// full directory pays it once per tenth of the bound written, not on every block.
    fn bound(&mut self) {
        let Ok(rd) = fs::read_dir(&self.dir) else { return };
        let mut files: Vec<(SystemTime, PathBuf, u64)> = rd
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "kvb"))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((m.modified().unwrap_or(SystemTime::UNIX_EPOCH), e.path(), m.len()))
            })
            .collect();
        // A file past the whole bound was never written here: refused outright, rather
        // than pushing out every good file older than it.
        files.retain(|(_, path, len)| {
            let foreign = *len > self.max_bytes;
            if foreign && fs::remove_file(path).is_ok() {
                self.counts.refused += 1;
            }
            !foreign
        });
        files.sort();
        let mut total: u64 = files.iter().map(|f| f.2).sum();
        let target = if total > self.max_bytes { self.max_bytes - self.max_bytes / 10 } else { self.max_bytes };
        for (_, path, len) in files {
            if total <= target {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total -= len;
                self.counts.dropped += 1;
            }
        }
        self.bytes = total;
    }
}

/// Whether `env` holds exactly one block-table row registered under `hash` (the pool's
/// import checks it against its own geometry and element type): `n` entries, column `j`'s
/// page full and registered under `group_hash(hash, j)`; a hybrid's state column (`state`)
/// holds the row's slot, full and registered so, or a hole (the row kept no snapshot).
pub(crate) fn holds_row(env: &[u8], hash: u64, b: usize, n: usize, state: Option<usize>) -> bool {
    let Ok(e) = tl_core::Envelope::read(env) else { return false };
    let entries = e.entries();
    let full = |fill: u32, h: Option<u64>, j: usize| fill == b as u32 && h == Some(group_hash(hash, j));
    entries.len() == n
        && entries.iter().enumerate().all(|(j, entry)| match (*entry, Some(j) == state) {
            (Entry::Page(i), false) => full(e.record(i).fill, e.record(i).hash, j),
            (Entry::Slot(i), true) => e.state().is_some_and(|s| full(s.slot(i).fill, s.slot(i).hash, j)),
            (Entry::Hole, true) => true,
            _ => false,
        })
}

/// The row of the table `blocks` (rows of `n`) to write for block `k`: every page there
/// (a windowed page already given back leaves nothing to write).
pub(crate) fn row_to_write<'a>(blocks: &'a [u32], k: usize, layout: &KvLayout) -> Option<&'a [u32]> {
    let n = layout.n_groups();
    let row = blocks.get(k * n..(k + 1) * n)?;
    let state = layout.state_column();
    (0..n).all(|j| row[j] != NO_BLOCK || Some(j) == state).then_some(row)
}

/// Extend a prefix hit of `h` rows with the rows the disk has of `chain[h..]` (whose first
/// block's parent is `root`: the adapter's key), in order,
/// stopping at the first row it lacks, refuses or the pool cannot hold. A file holds one
/// block-table row (every group's page; a hybrid's state slot or a hole). The imported
/// rows come registered with ref 1, like the hits `prefix::hits` gives, and indexed in
/// `partial` as the scheduler's own registrations are. A hybrid's hit then ends at its
/// last row with a state snapshot (the state the next step starts from).
pub(crate) fn disk_hits(
    disk: &mut DiskCache,
    partial: &mut PartialIndex,
    g: &mut dyn KvBackend,
    (chain, root, tokens, b): (&[u64], Option<u64>, &[u32], usize),
    layout: &KvLayout,
    (hits, h): (&mut Vec<u32>, &mut usize),
) -> Result<(), EngineError> {
    let (n, state) = (layout.n_groups(), layout.state_column());
    while *h < chain.len() {
        let hash = chain[*h];
        // A later row may still be in the pool though an earlier one was evicted.
        let row: Vec<Option<u32>> = (0..n).map(|j| g.lookup(group_hash(hash, j))).collect();
        if (0..n).all(|j| row[j].is_some() || Some(j) == state) {
            hits.extend(row.into_iter().map(|e| e.unwrap_or(NO_BLOCK)));
            *h += 1;
            continue;
        }
        tl_core::release_all(g, row.into_iter().flatten()).map_err(kv_err)?;
        let Some(env) = disk.read(hash) else { break };
        if !holds_row(&env, hash, b, n, state) {
            disk.refuse(hash);
            disk.suspect(&chain[*h + 1..]);
            break;
        }
        match g.import(&env) {
            Ok(ids) if ids.len() == n => {
                let parent = h.checked_sub(1).map(|p| chain[p]).or(root);
                partial.record(ids[0], parent, hash, &tokens[*h * b..(*h + 1) * b]);
                hits.extend(ids);
                disk.counts.read += 1;
                *h += 1;
            }
            Ok(ids) => {
                tl_core::release_all(g, ids).map_err(kv_err)?;
                disk.refuse(hash);
                disk.suspect(&chain[*h + 1..]);
                break;
            }
            // The pool is short now: the file is fine, the prefill goes on without it.
            Err(tl_core::KvError::OutOfBlocks { .. }) => break,
            Err(_) => {
                disk.refuse(hash);
                disk.suspect(&chain[*h + 1..]);
                break;
            }
        }
    }
    *h = tl_core::keep_to_last_state(g, hits, n, state).map_err(kv_err)?;
    Ok(())
}
