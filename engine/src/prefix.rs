//! Partial-block prefix reuse: the prefix cache below block granularity.
//!
//! The pool's prefix index finds whole blocks by their chained hash. A prompt rarely ends
//! on a block boundary, so the tail of a shared prompt (a system prompt plus the same
//! question, say) would be prefilled again on every request: up to `block_tokens - 1`
//! tokens, which at 1B on two cores is most of a step. This index remembers, for every
//! registered block, its parent hash and its tokens; on admission the scheduler takes
//! the registered child of its last full hit that shares the longest run of leading
//! tokens with its own next block, and copies those slots' K/V into its fresh block.
//!
//! The copy changes no bit of any answer: the K/V of position j is a function of tokens
//! 0..=j only, and the forward gives it the same bits in any chunking and batch
//! (docs/forward.md), so copied slots hold exactly what a prefill would have written.

use tl_core::{KvBackend, KvElem, KvError, KvGeometry, KvLayout, NO_BLOCK};

/// What was registered in one block: its parent's chained hash (`None` for a first
/// block), its own hash, and its tokens, `(block_tokens,)`.
struct Entry {
    parent: Option<u64>,
    hash: u64,
    tokens: Box<[u32]>,
}

/// One entry per block id, overwritten when the id is registered again. An entry whose
/// block was evicted since is stale; the pool's `lookup` tells (the hash is gone).
pub(crate) struct PartialIndex {
    by_block: Vec<Option<Entry>>,
}

impl PartialIndex {
    pub(crate) fn new(n_blocks: usize) -> PartialIndex {
        PartialIndex { by_block: (0..n_blocks).map(|_| None).collect() }
    }

    /// Block `id` was registered under `hash` with these tokens.
    pub(crate) fn record(&mut self, id: u32, parent: Option<u64>, hash: u64, tokens: &[u32]) {
        if let Some(slot) = self.by_block.get_mut(id as usize) {
            *slot = Some(Entry { parent, hash, tokens: tokens.into() });
        }
    }

    /// Registered children of `parent` sharing at least one leading token with `want`,
    /// as (hash, shared tokens), longest first (ties: lowest block id first, so the
    /// choice is reproducible; any of them holds the same K/V for the shared slots).
    pub(crate) fn candidates(&self, parent: Option<u64>, want: &[u32]) -> Vec<(u64, usize)> {
        let mut out: Vec<(u64, usize)> = self
            .by_block
            .iter()
            .flatten()
            .filter(|e| e.parent == parent)
            .map(|e| (e.hash, e.tokens.iter().zip(want).take_while(|(a, b)| a == b).count()))
            .filter(|&(_, n)| n > 0)
            .collect();
        out.sort_by_key(|b| std::cmp::Reverse(b.1));
        out
    }
}

/// Copy slots `0..n` of every layer's K and V, every KV head, from block `src` to `dst`,
/// and mark `dst` as holding `n` slots. On a q8 pool the codes and the row scales move
/// (the values are copied, never requantized).
pub(crate) fn copy_slots(pool: &mut dyn KvBackend, src: u32, dst: u32, n: usize) -> Result<(), KvError> {
    let g = pool.geometry();
    let d = g.head_dim as usize;
    for layer in 0..g.n_layers {
        for is_v in [false, true] {
            match pool.elem() {
                KvElem::F16 => {
                    let buf = gather(pool.slab(src, layer, is_v)?, &g, n * d, d);
                    scatter(pool.slab_mut(dst, layer, is_v)?, &g, &buf, d);
                }
                KvElem::Q8 => {
                    let from = pool.q8_slab(src, layer, is_v)?;
                    let (codes, scales) = (gather(from.codes, &g, n * d, d), gather(from.scales, &g, n, 1));
                    let to = pool.q8_slab_mut(dst, layer, is_v)?;
                    scatter(to.codes, &g, &codes, d);
                    scatter(to.scales, &g, &scales, 1);
                }
            }
        }
    }
    pool.set_fill(dst, n as u32)
}

/// The first `span` items of every KV head's run in a slab of `per` items per row:
/// `(n_kv_heads, span)` (a head's rows are contiguous in a slab).
fn gather<T: Copy>(from: &[T], g: &KvGeometry, span: usize, per: usize) -> Vec<T> {
    let mut buf = Vec::with_capacity(span * g.n_kv_heads as usize);
    for h in 0..g.n_kv_heads as usize {
        let o = h * g.block_tokens as usize * per;
        buf.extend_from_slice(&from[o..o + span]);
    }
    buf
}

/// [`gather`]'s inverse: each head's run of `buf` back to the start of its rows in `to`.
fn scatter<T: Copy>(to: &mut [T], g: &KvGeometry, buf: &[T], per: usize) {
    let span = buf.len() / g.n_kv_heads.max(1) as usize;
    for (h, run) in buf.chunks_exact(span.max(1)).enumerate() {
        let o = h * g.block_tokens as usize * per;
        to[o..o + span].copy_from_slice(run);
    }
}

/// The longest cached prefix of whole blocks a sequence can start from, as its first
/// block-table rows (G pages each) and their count `h`; the pages come back with ref + 1.
///
/// `chain` holds the prompt's block hashes, at most as many as a hit may cover. Group
/// `j`'s page of block `k` is registered under `group_hash(chain[k], j)`. A global
/// group needs every block of the prefix; a windowed one only the blocks the next query
/// (at position `h * B`) sees, so a windowed page given back or evicted earlier only
/// shortens the hit, never breaks it. Entries before a windowed group's window are
/// [`NO_BLOCK`]. For a model of one global group this is the plain walk down the chain,
/// stopping at the first miss.
pub(crate) fn hits(
    pool: &mut dyn KvBackend,
    chain: &[u64],
    layout: &KvLayout,
    b: usize,
) -> Result<(Vec<u32>, usize), KvError> {
    let n = layout.n_groups();
    let global = |j: usize| layout.groups()[j].window.is_none();
    // (rows, G) what the pool has, walked until a global group misses.
    let mut found: Vec<Option<u32>> = Vec::with_capacity(chain.len() * n);
    for &h in chain {
        let row: Vec<Option<u32>> = (0..n).map(|j| pool.lookup(tl_core::group_hash(h, j))).collect();
        if (0..n).any(|j| row[j].is_none() && global(j)) {
            tl_core::release_all(pool, row.into_iter().flatten())?;
            break;
        }
        found.extend(row);
    }
    let rows = found.len() / n;
    let usable = |h: usize| (0..n).all(|j| (layout.first_live_row(j, h * b, b)..h).all(|r| found[r * n + j].is_some()));
    let h = (0..=rows).rev().find(|&h| usable(h)).unwrap_or(0);
    let mut table = Vec::with_capacity(h * n);
    let mut back = Vec::new();
    for (e, id) in found.into_iter().enumerate() {
        let (r, j) = (e / n, e % n);
        if r < h && r >= layout.first_live_row(j, h * b, b) {
            table.push(id.unwrap_or(NO_BLOCK)); // Some: `usable(h)` checked it
        } else {
            back.extend(id);
            if r < h {
                table.push(NO_BLOCK);
            }
        }
    }
    tl_core::release_all(pool, back)?;
    Ok((table, h))
}
