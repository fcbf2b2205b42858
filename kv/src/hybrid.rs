//! A pool for a hybrid model (docs/spec/kv.md, "Recurrent state beside the pages"): the
//! KV pages of a [`KvPool`] and, beside them, a fixed number of recurrent-state slots
//! with the same bookkeeping (a second `KvPool` over no slab storage: reference counts,
//! fill, the prefix index and the LRU of cached slots) and their f32 values in one
//! allocation made here, once.
//!
//! Slot ids follow the page ids (`n_blocks ..`), so every operation that takes an id
//! (retain, release, fill, register, lookup) serves both without the caller knowing
//! which it holds; only allocation says which kind it wants.

use tl_core::{KvBackend, KvElem, KvError, KvGeometry, KvSlabs, KvSpec, Q8Slab, Q8SlabMut, StateGeometry};

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
        if let Some(&id) = ids.iter().find(|&&id| self.slot(id).is_some()) {
            // Envelope version 3 (kv.md) is specified, not built yet: refuse rather than
            // hand over a sequence without its state.
            return Err(KvError::Backend(format!("KV export: {id} is a recurrent-state slot (envelope v3 not built)")));
        }
        self.pages.export(ids)
    }
    fn import(&mut self, buf: &[u8]) -> Result<Vec<u32>, KvError> {
        self.pages.import(buf)
    }
}
