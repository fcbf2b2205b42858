//! Layer groups: which pool page holds which layers' K and V (docs/kv.md).
//!
//! A pool page holds K and V of `g` layers of one attention kind for `B` positions; the
//! model's layers are split into groups of `g` (the same `g` for every group, so every
//! page has one size and the pool keeps one free list and one budget). A model without
//! windows is one group of all its layers: a page is today's block, unchanged.
//!
//! A sequence's block table holds one page per group for each run of `B` positions,
//! row-major: position `j` of group `k` lives in page `table[(j / B) * G + k]`, slot
//! `j % B`, and layer `l` of that group is slab `l`'s index inside the group. A windowed
//! group's page whose positions no future query can see is given back early; its entry
//! becomes [`NO_BLOCK`]. The forward never reads it: a windowed layer's query at
//! position `i` reads keys `i + 1 - w ..= i` only.
//!
//! A hybrid model's recurrent layers (docs/spec/kv.md, "Recurrent state beside the
//! pages") hold no pages: they form one more column, the **state column**, last in each
//! row, whose entries are state slots of the same pool (`KvBackend::alloc_slots`). Entry
//! `r` holds the state after row `r`'s last computed position; a query at `next` needs the
//! state after `next - 1`, so the column behaves as a window of 2 and every windowed rule
//! (given back early, `NO_BLOCK` entries, the prefix hit) serves it unchanged.
//!
//! A layer that reads another layer's K and V (a shared-KV layer,
//! [`KvLayout::with_shared`]) owns no slab: it is in no group, and its slot is its
//! source's, which the forward only reads. Pages hold the owning layers only, so the pool
//! shrinks by the shared layers.

use crate::kv::{KvBackend, KvError, KvGeometry};

/// A block-table entry whose page was given back (a windowed group's page out of every
/// future query's window). Never a valid page id: ids are `< n_blocks <= u32::MAX`.
pub const NO_BLOCK: u32 = u32::MAX;

/// One group: its layers, in order, and their window (all the same).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvGroup {
    /// The model's layer indices in this group; slab `i` of a page is `layers[i]` (for
    /// the state column: layer `i` of a state slot).
    pub layers: Vec<u32>,
    /// `Some(w)`: every layer of the group sees the last `w` keys (its own included).
    /// The state column's is `Some(2)`: a query reads the state its predecessor left.
    pub window: Option<usize>,
    /// The state column: entries are state slots, not pages.
    pub state: bool,
}

/// The window the state column behaves as: the query at `next` reads the state after
/// `next - 1`, so rows before `(next - 1) / B` are needed by no later query.
const STATE_WINDOW: usize = 2;

/// How a model's layers map onto pool pages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvLayout {
    groups: Vec<KvGroup>,
    // (n_layers,) (group, slab index in the group) of each model layer.
    slot_of: Vec<(u32, u32)>,
    // The state column gets a slot every this many rows (and at the end of every range
    // allocated); 1 for every row.
    snapshot_every: usize,
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl KvLayout {
    /// One group of all `n_layers` layers, no window: a page is a whole block.
    pub fn uniform(n_layers: u32) -> KvLayout {
        KvLayout::from_windows(&vec![None; n_layers.max(1) as usize]).unwrap_or_else(|_| KvLayout {
            groups: vec![KvGroup { layers: vec![0], window: None, state: false }],
            slot_of: vec![(0, 0)],
            snapshot_every: 1,
        })
    }

    /// Groups from each layer's window (`None`: global). Layers of one window value form
    /// one kind; the group size `g` is the greatest common divisor of the kinds' sizes,
    /// so every kind splits into whole groups of `g` and no page holds padding. Groups are
    /// ordered by their first layer. A model of 15 windowed and 3 global layers: `g = 3`, six
    /// groups; a model of one kind: one group.
    pub fn from_windows(windows: &[Option<usize>]) -> Result<KvLayout, KvError> {
        KvLayout::hybrid(windows, &[])
    }

    /// Groups of the attention layers from their windows (`windows` has an entry for
    /// every layer; a recurrent layer's is ignored), as [`KvLayout::from_windows`], then
    /// the state column of the `recurrent` layers (ascending model indices), when any.
    pub fn hybrid(windows: &[Option<usize>], recurrent: &[u32]) -> Result<KvLayout, KvError> {
        KvLayout::with_shared(windows, recurrent, &[])
    }

    /// [`KvLayout::hybrid`] where `shared[l] = Some(src)` says layer `l` reads layer
    /// `src`'s K and V and writes none (`shared` empty: no layer shares): `l` joins no
    /// group and its slot is `src`'s. `src` must be an earlier attention layer that owns
    /// its KV and has `l`'s window (a query of `l` sees the keys `src`'s pages keep).
    pub fn with_shared(
        windows: &[Option<usize>],
        recurrent: &[u32],
        shared: &[Option<u32>],
    ) -> Result<KvLayout, KvError> {
        if !shared.is_empty() && shared.len() != windows.len() {
            return Err(KvError::Backend(format!(
                "{} shared-KV entries for a {}-layer model",
                shared.len(),
                windows.len()
            )));
        }
        let source = |l: usize| shared.get(l).copied().flatten();
        for (l, src) in (0..windows.len()).filter_map(|l| source(l).map(|s| (l, s as usize))) {
            let owns = |s: usize| s < l && source(s).is_none() && !recurrent.contains(&(s as u32));
            if !owns(src) || windows.get(src) != windows.get(l) {
                return Err(KvError::Backend(format!(
                    "layer {l} cannot read layer {src}'s KV: the source must be an earlier attention layer that \
                     owns its KV, with the same window"
                )));
            }
        }
        if windows.is_empty() {
            return Err(KvError::ZeroCapacity { field: "n_layers" });
        }
        if windows.contains(&Some(0)) {
            return Err(KvError::ZeroCapacity { field: "window" });
        }
        if recurrent.iter().any(|&l| l as usize >= windows.len()) || !recurrent.is_sorted_by(|a, b| a < b) {
            return Err(KvError::Backend(format!(
                "recurrent layers {recurrent:?} are not ascending layers of a {}-layer model",
                windows.len()
            )));
        }
        let mut kinds: Vec<(Option<usize>, Vec<u32>)> = Vec::new();
        for (l, &w) in windows.iter().enumerate() {
            if recurrent.contains(&(l as u32)) || source(l).is_some() {
                continue;
            }
            match kinds.iter_mut().find(|(k, _)| *k == w) {
                Some((_, ls)) => ls.push(l as u32),
                None => kinds.push((w, vec![l as u32])),
            }
        }
        if kinds.is_empty() {
            // Every page would be empty: a model of recurrent layers only is not built yet.
            return Err(KvError::ZeroCapacity { field: "attention layers" });
        }
        let g = kinds.iter().fold(0, |g, (_, ls)| gcd(g, ls.len()));
        let mut groups: Vec<KvGroup> = kinds
            .iter()
            .flat_map(|(w, ls)| ls.chunks(g).map(|c| KvGroup { layers: c.to_vec(), window: *w, state: false }))
            .collect();
        groups.sort_by_key(|gr| gr.layers[0]);
        if !recurrent.is_empty() {
            groups.push(KvGroup { layers: recurrent.to_vec(), window: Some(STATE_WINDOW), state: true });
        }
        let mut slot_of = vec![(0, 0); windows.len()];
        for (k, gr) in groups.iter().enumerate() {
            for (i, &l) in gr.layers.iter().enumerate() {
                slot_of[l as usize] = (k as u32, i as u32);
            }
        }
        for l in 0..windows.len() {
            if let Some(src) = source(l) {
                slot_of[l] = slot_of[src as usize];
            }
        }
        Ok(KvLayout { groups, slot_of, snapshot_every: 1 })
    }

    /// The state column keeps a snapshot every `rows` block rows (at least 1) besides the
    /// last row of every allocation ([`KvLayout::alloc_entries`]); a layout without a state
    /// column is unchanged.
    pub fn with_snapshots(mut self, rows: usize) -> KvLayout {
        self.snapshot_every = rows.max(1);
        self
    }

    /// Rows between the state column's snapshots.
    pub fn snapshot_every(&self) -> usize {
        self.snapshot_every
    }

    /// The groups, ordered by their first layer.
    pub fn groups(&self) -> &[KvGroup] {
        &self.groups
    }

    /// Groups G: entries per block-table row (the pages, and the state slot when the
    /// model has recurrent layers).
    pub fn n_groups(&self) -> usize {
        self.groups.len()
    }

    /// Page groups: pages per block-table row (G less the state column).
    pub fn n_page_groups(&self) -> usize {
        self.groups.len() - usize::from(self.state_column().is_some())
    }

    /// The state column's index in a row (always the last), when the model has one.
    pub fn state_column(&self) -> Option<usize> {
        self.groups.last().filter(|g| g.state).map(|_| self.groups.len() - 1)
    }

    /// Recurrent layers (the state column's), 0 for an attention-only model.
    pub fn state_layers(&self) -> usize {
        self.state_column().map_or(0, |k| self.groups[k].layers.len())
    }

    /// Layers per group (and slabs per page), `g`.
    pub fn group_layers(&self) -> u32 {
        self.groups[0].layers.len() as u32
    }

    /// The model's layers.
    pub fn n_layers(&self) -> usize {
        self.slot_of.len()
    }

    /// Whether any group is windowed (pages may be given back early).
    pub fn windowed(&self) -> bool {
        self.groups.iter().any(|g| g.window.is_some())
    }

    /// Layers that own a slab of a page or a state slot (every layer but the shared-KV
    /// ones).
    pub fn owning_layers(&self) -> usize {
        self.groups.iter().map(|g| g.layers.len()).sum()
    }

    /// Layer `layer`'s (group, slab index in its group), or `None` past the last layer.
    /// A shared-KV layer's is its source's.
    pub fn slot(&self, layer: u32) -> Option<(usize, u32)> {
        self.slot_of.get(layer as usize).map(|&(k, i)| (k as usize, i))
    }

    /// The geometry of one page, from the model's (`n_layers` becomes `g`).
    pub fn page_geometry(&self, model: KvGeometry) -> KvGeometry {
        KvGeometry { n_layers: self.group_layers(), ..model }
    }

    /// The first block-table row group `k` must still hold when the next query is at
    /// position `next` or later (rows before it are out of every future window): 0 for a
    /// global group.
    pub fn first_live_row(&self, k: usize, next: usize, b: usize) -> usize {
        match self.groups.get(k).and_then(|g| g.window) {
            Some(w) => (next + 1).saturating_sub(w) / b.max(1),
            None => 0,
        }
    }

    /// Pages a sequence of `len` positions holds once its out-of-window pages are given
    /// back (next query at `len - 1`): `ceil(len / B)` per global group and at most
    /// `ceil((w - 1) / B) + 1` per windowed one. The scheduler's admission count.
    pub fn pages_for(&self, len: usize, b: usize) -> usize {
        self.count(len, b, false)
    }

    /// State slots a sequence of `len` positions holds ([`KvLayout::pages_for`] of the
    /// state column: at most 2), 0 for an attention-only model.
    pub fn slots_for(&self, len: usize, b: usize) -> usize {
        self.count(len, b, true)
    }

    fn count(&self, len: usize, b: usize, state: bool) -> usize {
        let rows = len.div_ceil(b.max(1));
        let live = |k: usize| rows - self.first_live_row(k, len.saturating_sub(1), b).min(rows);
        (0..self.groups.len()).filter(|&k| self.groups[k].state == state).map(live).sum()
    }

    /// The most pages a sequence of `len` positions holds at once when fed in steps of
    /// at most `chunk` tokens: [`KvLayout::pages_for`] but, per windowed group, the
    /// blocks a step's `chunk` queries and their windows span (`chunk + w - 1` positions,
    /// at most `(chunk + w - 2) / B + 2` blocks). A pool smaller than this can never run
    /// the sequence through.
    pub fn peak_pages(&self, len: usize, chunk: usize, b: usize) -> usize {
        self.peak(len, chunk, b, false)
    }

    /// [`KvLayout::peak_pages`] of the state column: the slots one step's rows hold.
    pub fn peak_slots(&self, len: usize, chunk: usize, b: usize) -> usize {
        self.peak(len, chunk, b, true)
    }

    fn peak(&self, len: usize, chunk: usize, b: usize, state: bool) -> usize {
        let (rows, b) = (len.div_ceil(b.max(1)), b.max(1));
        let span = |w: usize| (chunk.max(1) + w).saturating_sub(2) / b + 2;
        self.groups.iter().filter(|g| g.state == state).map(|g| g.window.map_or(rows, |w| rows.min(span(w)))).sum()
    }

    /// Grow `table` to `entries` entries (whole rows of G), allocating each new entry from
    /// the pool by its column: a page, or a state slot for the state column on every
    /// `snapshot_every`-th row and on the last row (the others `NO_BLOCK`), and make sure
    /// the last row's state entry holds a slot. All or nothing: on an error nothing stays
    /// taken and `table` is unchanged.
    pub fn alloc_entries(&self, pool: &mut dyn KvBackend, table: &mut Vec<u32>, entries: usize) -> Result<(), KvError> {
        let have = table.len();
        let (state, g) = (self.state_column(), self.groups.len());
        if entries <= have {
            // The range's last row must hold a slot (the running state of a step that ends
            // there), though it was a hole when the table grew past it.
            if let Some(k) = state.filter(|_| entries > 0) {
                let e = (entries.div_ceil(g) - 1) * g + k;
                if table[e] == NO_BLOCK {
                    table[e] = pool.alloc_slots(1)?[0];
                }
            }
            return Ok(());
        }
        let is_slot = |e: usize| Some(e % g) == state;
        // A state entry gets a slot on every `snapshot_every`-th row and on the range's
        // last row (where the step that needs this range ends); the others stay NO_BLOCK.
        let last = entries.div_ceil(g) - 1;
        let wanted = |e: usize| is_slot(e) && ((e / g + 1).is_multiple_of(self.snapshot_every) || e / g == last);
        let n_slots = (have..entries).filter(|&e| wanted(e)).count();
        let n_holes = (have..entries).filter(|&e| is_slot(e) && !wanted(e)).count();
        let pages = pool.alloc(entries - have - n_slots - n_holes)?;
        let slots = match n_slots {
            0 => Vec::new(),
            n => match pool.alloc_slots(n) {
                Ok(s) => s,
                Err(e) => {
                    release_all(pool, pages)?;
                    return Err(e);
                }
            },
        };
        let (mut pages, mut slots) = (pages.into_iter(), slots.into_iter());
        for e in have..entries {
            let next = match (is_slot(e), wanted(e)) {
                (true, true) => slots.next(),
                (true, false) => None,
                (false, _) => pages.next(),
            };
            table.push(next.unwrap_or(NO_BLOCK));
        }
        Ok(())
    }

    /// Give back every page of `table` (rows of G, [`NO_BLOCK`] entries skipped) that no
    /// query at position `next` or later can see; their entries become [`NO_BLOCK`].
    /// Released rows form a prefix of each windowed group's column, so the walk goes
    /// down from the first live row and stops at the first entry already given back.
    /// Returns how many pages went back.
    pub fn release_out_of_window(
        &self,
        pool: &mut dyn KvBackend,
        table: &mut [u32],
        next: usize,
        b: usize,
    ) -> Result<usize, KvError> {
        let n = self.groups.len();
        let rows = table.len() / n;
        let mut gone = 0;
        for k in 0..n {
            let live = self.first_live_row(k, next, b).min(rows);
            for r in (0..live).rev() {
                let e = &mut table[r * n + k];
                if *e == NO_BLOCK {
                    // The state column has holes (rows without a snapshot): walk on.
                    if self.groups[k].state {
                        continue;
                    }
                    break;
                }
                pool.release(*e)?;
                *e = NO_BLOCK;
                gone += 1;
            }
        }
        Ok(gone)
    }
}

/// Cut a table prefix (rows of `n` entries) that a sequence will resume from back to its
/// last row whose state column `state` holds a slot (a hybrid model resumes from a row's
/// state snapshot, kv.md), giving back the rows after it; returns the rows kept. Without a
/// state column every row is kept.
pub fn keep_to_last_state(
    pool: &mut dyn KvBackend,
    table: &mut Vec<u32>,
    n: usize,
    state: Option<usize>,
) -> Result<usize, KvError> {
    let rows = table.len() / n.max(1);
    let Some(k) = state else { return Ok(rows) };
    let keep = (0..rows).rev().find(|r| table[r * n + k] != NO_BLOCK).map_or(0, |r| r + 1);
    release_all(pool, table.drain(keep * n..))?;
    Ok(keep)
}

/// Give back every page of `ids` ([`NO_BLOCK`] entries skipped).
pub fn release_all(pool: &mut dyn KvBackend, ids: impl IntoIterator<Item = u32>) -> Result<(), KvError> {
    for id in ids {
        if id != NO_BLOCK {
            pool.release(id)?;
        }
    }
    Ok(())
}
