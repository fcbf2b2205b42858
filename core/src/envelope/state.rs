//! Version 3's state section (docs/formats/kv-block.md, "Version 3"): after the page
//! records, a hybrid pool's recurrent-state slots and the holes of the exported list.
//!
//! `[n_state_layers u32 = R][floats u32 = F][n_slots u32 = M][n_holes u32 = Z]`, then Z
//! hole indices (u32, ascending), then M records
//! `[fill u32][flags u32][hash u64][at u32][reserved u32 = 0][R * F f32]`, `at` ascending.
//! The exported list has `N + M + Z` entries: the holes at their indices, each slot at its
//! `at`, the N pages in the remaining indices in order. So an export of a block table
//! (pages, the state column's slots and its holes, in table order) imports back to a table
//! of the same shape.

use super::{bad, u32_at, u64_at, FLAG_HASH};
use crate::kv::{KvError, StateGeometry};

/// Bytes of the state section's header.
pub const STATE_HEADER_BYTES: usize = 16;
/// Bytes of a slot record before its values: fill, flags, hash, at, reserved.
pub const SLOT_HEADER_BYTES: usize = 24;

/// One entry of an exported id list, as a version 3 envelope lays it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Page record `i`.
    Page(usize),
    /// Slot record `j` of the state section.
    Slot(usize),
    /// No block there (`NO_BLOCK` in the exported table).
    Hole,
}

/// One slot record: its fill, its registered hash if any, its place in the exported
/// list, and its values' bytes (`R * F` f32, little-endian, layer-major).
#[derive(Clone, Copy, Debug)]
pub struct SlotRecord<'a> {
    /// Positions of its row the state has run through, `0..=block_tokens`.
    pub fill: u32,
    /// The registered hash (only on a full row's slot).
    pub hash: Option<u64>,
    /// Its index in the exported list.
    pub at: u32,
    /// The values, as stored.
    pub values: &'a [u8],
}

/// Where the section lies and what its header says (before its contents are checked).
#[derive(Clone, Copy, Debug)]
pub(super) struct Layout {
    at: usize,
    geometry: StateGeometry,
    n_slots: usize,
    n_holes: usize,
    slot: usize,
    /// The section's whole length.
    pub(super) bytes: usize,
}

impl Layout {
    /// The section header at `at` (the end of the page records), checked against `want`
    /// (a pool's state geometry) when given.
    pub(super) fn read(buf: &[u8], at: usize, want: Option<StateGeometry>) -> Result<Layout, KvError> {
        if buf.len() < at.saturating_add(STATE_HEADER_BYTES + super::TRAILER_BYTES) {
            return Err(bad(format!("truncated: {} bytes end before the state section at {at}", buf.len())));
        }
        let f = [u32_at(buf, at), u32_at(buf, at + 4), u32_at(buf, at + 8), u32_at(buf, at + 12)];
        let geometry = StateGeometry { n_layers: f[0], floats: f[1] };
        if let Some(w) = want {
            if w != geometry {
                return Err(bad(format!(
                    "state geometry (n_state_layers, floats) = ({}, {}) does not match this pool's ({}, {})",
                    f[0], f[1], w.n_layers, w.floats
                )));
            }
        } else if f[0] == 0 || f[1] == 0 {
            return Err(bad(format!("state geometry (n_state_layers, floats) = ({}, {}) has a zero", f[0], f[1])));
        }
        let (n_slots, n_holes) = (f[2] as usize, f[3] as usize);
        let overflow = || bad(format!("{n_slots} state slots of {geometry:?} overflow the address space"));
        let slot = geometry.slot_bytes().and_then(|b| b.checked_add(SLOT_HEADER_BYTES)).ok_or_else(overflow)?;
        let bytes = slot
            .checked_mul(n_slots)
            .and_then(|b| b.checked_add(n_holes.checked_mul(4)?))
            .and_then(|b| b.checked_add(STATE_HEADER_BYTES))
            .ok_or_else(overflow)?;
        Ok(Layout { at, geometry, n_slots, n_holes, slot, bytes })
    }

    fn holes_at(&self) -> usize {
        self.at + STATE_HEADER_BYTES
    }

    fn slot_at(&self, j: usize) -> usize {
        self.holes_at() + 4 * self.n_holes + j * self.slot
    }
}

/// A checked state section: holes ascending and inside the list, slots' `at` ascending,
/// inside the list and on no hole, every slot's fill, flags and hash consistent.
#[derive(Clone, Debug)]
pub struct StateSection<'a> {
    buf: &'a [u8],
    l: Layout,
}

impl<'a> StateSection<'a> {
    pub(super) fn check(buf: &'a [u8], l: Layout, n_pages: usize, bt: u32) -> Result<StateSection<'a>, KvError> {
        let s = StateSection { buf, l };
        let total = n_pages + l.n_slots + l.n_holes;
        let mut prev = None;
        for i in 0..l.n_holes {
            let h = u32_at(buf, l.holes_at() + 4 * i);
            if h as usize >= total || prev.is_some_and(|p| h <= p) {
                return Err(bad(format!("hole {i}: index {h} is not ascending inside the {total} entries")));
            }
            prev = Some(h);
        }
        let holes: Vec<u32> = s.holes().collect();
        let mut prev = None;
        for j in 0..l.n_slots {
            let at = l.slot_at(j);
            let (fill, flags, hash) = (u32_at(buf, at), u32_at(buf, at + 4), u64_at(buf, at + 8));
            let (idx, reserved) = (u32_at(buf, at + 16), u32_at(buf, at + 20));
            if idx as usize >= total || prev.is_some_and(|p| idx <= p) || holes.binary_search(&idx).is_ok() {
                return Err(bad(format!(
                    "slot {j}: index {idx} is not ascending inside the {total} entries, or is a hole"
                )));
            }
            prev = Some(idx);
            if fill > bt {
                return Err(bad(format!("slot {j}: fill {fill} exceeds block_tokens {bt}")));
            }
            if flags & !FLAG_HASH != 0 || reserved != 0 {
                return Err(bad(format!("slot {j}: unknown flags {flags:#x} or reserved {reserved:#x}")));
            }
            if flags & FLAG_HASH != 0 && fill != bt {
                return Err(bad(format!("slot {j}: has a hash but fill {fill} of {bt}")));
            }
            if flags & FLAG_HASH == 0 && hash != 0 {
                return Err(bad(format!("slot {j}: hash field {hash:#x} without the hash flag")));
            }
        }
        Ok(s)
    }

    /// The state geometry of its slots.
    pub fn geometry(&self) -> StateGeometry {
        self.l.geometry
    }

    /// Slot records it holds.
    pub fn n_slots(&self) -> usize {
        self.l.n_slots
    }

    /// The holes' indices in the exported list, ascending.
    pub fn holes(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.l.n_holes).map(|i| u32_at(self.buf, self.l.holes_at() + 4 * i))
    }

    /// Slot record `j` (`j < n_slots`).
    pub fn slot(&self, j: usize) -> SlotRecord<'a> {
        let at = self.l.slot_at(j);
        let flags = u32_at(self.buf, at + 4);
        SlotRecord {
            fill: u32_at(self.buf, at),
            hash: (flags & FLAG_HASH != 0).then(|| u64_at(self.buf, at + 8)),
            at: u32_at(self.buf, at + 16),
            values: &self.buf[at + SLOT_HEADER_BYTES..at + self.l.slot],
        }
    }

    /// The exported list's entries in order, with `n_pages` page records.
    pub(super) fn entries(&self, n_pages: usize) -> Vec<Entry> {
        let total = n_pages + self.l.n_slots + self.l.n_holes;
        let mut out = vec![None; total];
        for h in self.holes() {
            out[h as usize] = Some(Entry::Hole);
        }
        for j in 0..self.l.n_slots {
            out[self.slot(j).at as usize] = Some(Entry::Slot(j));
        }
        let mut pages = 0..n_pages;
        // Checked: holes and slots are distinct indices inside the list, so exactly
        // `n_pages` are left for the pages.
        out.into_iter().map(|e| e.unwrap_or_else(|| Entry::Page(pages.next().unwrap_or(0)))).collect()
    }
}

/// A version 3 writer's state part: the section header and holes go in before the first
/// slot (or at the finish when there is none).
#[derive(Debug)]
pub(super) struct Writing {
    geometry: StateGeometry,
    n_slots: usize,
    holes: Vec<u32>,
    written: usize,
    started: bool,
    pub(super) bytes: usize,
}

impl Writing {
    pub(super) fn new(geometry: StateGeometry, n_slots: usize, holes: &[u32]) -> Result<Writing, KvError> {
        let overflow = || KvError::Overflow { what: format!("export of {n_slots} state slots of {geometry:?}") };
        let n32 = u32::try_from(n_slots).map_err(|_| overflow())?;
        let slot = geometry.slot_bytes().and_then(|b| b.checked_add(SLOT_HEADER_BYTES)).ok_or_else(overflow)?;
        let bytes = slot
            .checked_mul(n32 as usize)
            .and_then(|b| b.checked_add(holes.len().checked_mul(4)?))
            .and_then(|b| b.checked_add(STATE_HEADER_BYTES))
            .ok_or_else(overflow)?;
        Ok(Writing { geometry, n_slots, holes: holes.to_vec(), written: 0, started: false, bytes })
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        let g = self.geometry;
        for v in [g.n_layers, g.floats, self.n_slots as u32, self.holes.len() as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for h in &self.holes {
            out.extend_from_slice(&h.to_le_bytes());
        }
    }

    pub(super) fn slot(&mut self, out: &mut Vec<u8>, fill: u32, hash: Option<u64>, at: u32) {
        self.start(out);
        self.written += 1;
        let flags = if hash.is_some() { FLAG_HASH } else { 0 };
        for v in [fill, flags] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&hash.unwrap_or(0).to_le_bytes());
        for v in [at, 0] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }

    /// Whether the section is whole after `pages_end` bytes of header and page records.
    pub(super) fn finish(&mut self, out: &mut Vec<u8>, pages_end: usize) -> bool {
        self.start(out);
        self.written == self.n_slots && out.len() == pages_end + self.bytes
    }

    pub(super) fn announced(&self) -> String {
        format!("{} slots of {:?} ({} written)", self.n_slots, self.geometry, self.written)
    }
}
