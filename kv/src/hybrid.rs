//! A pool for a hybrid model (docs/spec/kv.md, "Recurrent state beside the pages"): the
//! KV pages of a [`KvPool`] and, beside them, a fixed number of recurrent-state slots
//! with the same bookkeeping (a second `KvPool` over no slab storage: reference counts,
//! fill, the prefix index and the LRU of cached slots) and their f32 values in one
//! allocation made here, once.
//!
//! Slot ids follow the page ids (`n_blocks ..`), so every operation that takes an id
//! (retain, release, fill, register, lookup) serves both without the caller knowing
//! which it holds; only allocation says which kind it wants.

use tl_core::envelope::{Entry, Envelope, EnvelopeWriter};
use tl_core::{KvBackend, KvElem, KvError, KvGeometry, KvSlabs, KvSpec, Q8Slab, Q8SlabMut, StateGeometry, NO_BLOCK};

use crate::pool::KvPool;

/// Storage of nothing: the slots' bookkeeping pool never reads a slab (the values live in
/// [`HybridPool`]'s `values`), but [`KvPool::with_slabs`] wants a geometry to check.
struct NoSlabs(KvGeometry);

impl KvSlabs for NoSlabs {
    fn geometry(&self) -> KvGeometry {
        self.0
    }
    fn slab(&self, id: u32, _layer: u32, _is_v: bool) -> Result<&[u16], KvError> {
        Err(KvError::BadId { id, n_blocks: 0 })
    }
    fn slab_mut(&mut self, id: u32, _layer: u32, _is_v: bool) -> Result<&mut [u16], KvError> {
        Err(KvError::BadId { id, n_blocks: 0 })
    }
}

/// KV pages and recurrent-state slots in one backend.
pub struct HybridPool {
    pages: KvPool,
    slots: KvPool,
    geometry: StateGeometry,
    /// `(n_slots, R, F)` f32, slot-major.
    values: Vec<f32>,
}

impl HybridPool {
    /// `pages` and `n_slots` slots of `geometry`, every value zero; the slots' memory is
    /// allocated here, once.
    pub fn new(pages: KvPool, geometry: StateGeometry, n_slots: u32) -> Result<HybridPool, KvError> {
        for (field, v) in [("state n_layers", geometry.n_layers), ("state floats", geometry.floats)] {
            if v == 0 {
                return Err(KvError::ZeroCapacity { field });
            }
        }
        let len = geometry
            .slot_floats()
            .and_then(|f| f.checked_mul(n_slots as usize))
            .filter(|&f| f <= isize::MAX as usize / 4)
            .ok_or_else(|| KvError::Overflow { what: format!("{n_slots} state slots of {geometry:?}") })?;
        let mut values = Vec::new();
        values.try_reserve_exact(len).map_err(|_| KvError::Backend(format!("cannot allocate {len} state values")))?;
        values.resize(len, 0.0);
        // The slots' fill counts positions of their row, as a page's does.
        let b = pages.geometry().block_tokens;
        let shape = KvGeometry { n_layers: 1, n_kv_heads: 1, head_dim: 1, block_tokens: b };
        let slots = KvPool::with_slabs(Box::new(NoSlabs(shape)), n_slots, pages.prefix_cache())?;
        Ok(HybridPool { pages, slots, geometry, values })
    }

    /// The pool `spec` asks for: [`HybridPool`] when it has state slots, else the pages alone.
    pub(crate) fn boxed(pages: KvPool, spec: &KvSpec) -> Result<Box<dyn KvBackend>, KvError> {
        Ok(match spec.state {
            Some((g, n)) => Box::new(HybridPool::new(pages, g, n)?),
            None => Box::new(pages),
        })
    }

    /// The slot index of id `id`, if it is a slot.
    fn slot(&self, id: u32) -> Option<u32> {
        id.checked_sub(self.pages.n_blocks()).filter(|&s| s < self.slots.n_blocks())
    }

    /// Where slot `id`'s layer `layer` lives in `values`; the slot must be in use.
    fn range(&self, id: u32, layer: u32) -> Result<std::ops::Range<usize>, KvError> {
        let s = self.slot(id).ok_or(KvError::BadSlot { id })?;
        if self.slots.refs(s)? == 0 {
            return Err(KvError::NotInUse { id });
        }
        if layer >= self.geometry.n_layers {
            return Err(KvError::BadLayer { layer, n_layers: self.geometry.n_layers });
        }
        let f = self.geometry.floats as usize;
        let start = (s as usize * self.geometry.n_layers as usize + layer as usize) * f;
        Ok(start..start + f)
    }

    /// `op` on the page pool for a page id, on the slot pool (by slot index) for a slot id.
    fn by_id<T>(&mut self, id: u32, op: impl FnOnce(&mut KvPool, u32) -> Result<T, KvError>) -> Result<T, KvError> {
        match self.slot(id) {
            Some(s) => op(&mut self.slots, s),
            None => op(&mut self.pages, id),
        }
    }
}

impl KvSlabs for HybridPool {
    fn geometry(&self) -> KvGeometry {
        self.pages.geometry()
    }
    fn slab(&self, id: u32, layer: u32, is_v: bool) -> Result<&[u16], KvError> {
        self.pages.slab(id, layer, is_v)
    }
    fn slab_mut(&mut self, id: u32, layer: u32, is_v: bool) -> Result<&mut [u16], KvError> {
        self.pages.slab_mut(id, layer, is_v)
    }
    fn elem(&self) -> KvElem {
        self.pages.elem()
    }
    fn q8_slab(&self, id: u32, layer: u32, is_v: bool) -> Result<Q8Slab<'_>, KvError> {
        self.pages.q8_slab(id, layer, is_v)
    }
    fn q8_slab_mut(&mut self, id: u32, layer: u32, is_v: bool) -> Result<Q8SlabMut<'_>, KvError> {
        self.pages.q8_slab_mut(id, layer, is_v)
    }
    fn state(&self, slot: u32, layer: u32) -> Result<&[f32], KvError> {
        let r = self.range(slot, layer)?;
        Ok(&self.values[r])
    }
    fn state_mut(&mut self, slot: u32, layer: u32) -> Result<&mut [f32], KvError> {
        let r = self.range(slot, layer)?;
        Ok(&mut self.values[r])
    }
    fn copy_state(&mut self, from: u32, to: u32, layer: u32) -> Result<(), KvError> {
        let (src, dst) = (self.range(from, layer)?, self.range(to, layer)?);
        self.values.copy_within(src, dst.start);
        Ok(())
    }
    fn state_geometry(&self) -> Option<StateGeometry> {
        Some(self.geometry)
    }
}

impl KvBackend for HybridPool {
    fn n_blocks(&self) -> u32 {
        self.pages.n_blocks()
    }
    fn alloc(&mut self, n: usize) -> Result<Vec<u32>, KvError> {
        self.pages.alloc(n)
    }
    fn alloc_slots(&mut self, n: usize) -> Result<Vec<u32>, KvError> {
        let base = self.pages.n_blocks();
        Ok(self.slots.alloc(n)?.into_iter().map(|s| s + base).collect())
    }
    fn n_free_slots(&self) -> usize {
        self.slots.n_free() + self.slots.n_cached()
    }
    fn retain(&mut self, id: u32) -> Result<(), KvError> {
        self.by_id(id, |p, i| p.retain(i))
    }
    fn release(&mut self, id: u32) -> Result<(), KvError> {
        self.by_id(id, |p, i| p.release(i))
    }
    fn refs(&self, id: u32) -> Result<u32, KvError> {
        match self.slot(id) {
            Some(s) => self.slots.refs(s),
            None => self.pages.refs(id),
        }
    }
    fn fill(&self, id: u32) -> Result<u32, KvError> {
        match self.slot(id) {
            Some(s) => self.slots.fill(s),
            None => self.pages.fill(id),
        }
    }
    fn set_fill(&mut self, id: u32, n: u32) -> Result<(), KvError> {
        self.by_id(id, |p, i| p.set_fill(i, n))
    }
    fn register(&mut self, id: u32, hash: u64) -> Result<(), KvError> {
        self.by_id(id, |p, i| p.register(i, hash))
    }
    fn lookup(&mut self, hash: u64) -> Option<u32> {
        // Page and slot hashes never meet: a slot registers under its own column's
        // group hash (kv.md).
        let base = self.pages.n_blocks();
        self.pages.lookup(hash).or_else(|| self.slots.lookup(hash).map(|s| s + base))
    }
    fn n_free(&self) -> usize {
        self.pages.n_free()
    }
    fn n_cached(&self) -> usize {
        self.pages.n_cached()
    }
    fn n_in_use(&self) -> usize {
        self.pages.n_in_use()
    }
    fn export(&self, ids: &[u32]) -> Result<Vec<u8>, KvError> {
        self.export_v3(ids)
    }
    fn import(&mut self, buf: &[u8]) -> Result<Vec<u32>, KvError> {
        self.import_v3(buf)
    }
}

impl HybridPool {
    /// A version 3 envelope of `ids` (a block table's entries: pages, slots and
    /// [`NO_BLOCK`] holes, in any order): the pages as records, the slots and holes in the
    /// state section at their places (docs/formats/kv-block.md, "Version 3").
    fn export_v3(&self, ids: &[u32]) -> Result<Vec<u8>, KvError> {
        let (mut pages, mut slots, mut holes) = (Vec::new(), Vec::new(), Vec::new());
        for (at, &id) in ids.iter().enumerate() {
            let at =
                u32::try_from(at).map_err(|_| KvError::Overflow { what: format!("export of {} ids", ids.len()) })?;
            match (id, self.slot(id)) {
                (NO_BLOCK, _) => holes.push(at),
                (_, Some(_)) => {
                    self.range(id, 0)?; // in use
                    slots.push((at, id));
                }
                (_, None) => pages.push(id),
            }
        }
        let (elem, g) = self.pages.envelope_kind();
        let mut w = EnvelopeWriter::with_state(elem, g, pages.len(), (self.geometry, slots.len(), &holes))?;
        self.pages.write_records(&mut w, &pages)?;
        let f = self.geometry.floats as usize;
        for (at, id) in slots {
            let s = self.slot(id).ok_or(KvError::BadSlot { id })?;
            let start = s as usize * self.geometry.n_layers as usize * f;
            let values = &self.values[start..start + self.geometry.n_layers as usize * f];
            let out = w.slot(self.slots.fill(s)?, self.slots.blocks[s as usize].hash, at);
            for v in values {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        w.finish()
    }

    /// Import a version 3 envelope of this pool's geometries: pages and slots allocated all
    /// or nothing, the ids returned in the exported list's order with [`NO_BLOCK`] at its
    /// holes. Each slot's values come back with the same bits.
    fn import_v3(&mut self, buf: &[u8]) -> Result<Vec<u32>, KvError> {
        let (elem, g) = self.pages.envelope_kind();
        let env = Envelope::parse_pool(buf, elem, g, Some(self.geometry))?;
        let Some(state) = env.state() else {
            return Err(KvError::Backend("KV import: a version 3 envelope without its state section".into()));
        };
        if self.n_free_slots() < state.n_slots() {
            return Err(KvError::OutOfBlocks { requested: state.n_slots(), available: self.n_free_slots() });
        }
        let pages = self.pages.import_records(&env)?;
        let slots = match self.slots.alloc(state.n_slots()) {
            Ok(s) => s,
            Err(e) => {
                tl_core::release_all(&mut self.pages, pages)?;
                return Err(e);
            }
        };
        let (base, f) = (self.pages.n_blocks(), self.geometry.slot_floats().unwrap_or(0));
        for (j, &s) in slots.iter().enumerate() {
            let rec = state.slot(j);
            let dst = &mut self.values[s as usize * f..(s as usize + 1) * f];
            for (d, b) in dst.iter_mut().zip(rec.values.chunks_exact(4)) {
                *d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
            self.slots.restore(s, rec.fill, rec.hash);
        }
        Ok(env
            .entries()
            .into_iter()
            .map(|e| match e {
                Entry::Page(i) => pages[i],
                Entry::Slot(j) => slots[j] + base,
                Entry::Hole => NO_BLOCK,
            })
            .collect())
    }
}
