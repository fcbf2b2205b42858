//! `KvPool` as tl-core's `KvBackend`, registered as `"f16-slab"`.

use tl_core::{KvBackend, KvElem, KvError, KvGeometry, KvSlabs, KvSpec, Q8Slab, Q8SlabMut};

use crate::pool::KvPool;

// Each method names the inherent one explicitly: inherent methods win method lookup,
// and the explicit path keeps that from silently recursing if one is ever renamed.
impl KvSlabs for KvPool {
    fn geometry(&self) -> KvGeometry {
        KvPool::geometry(self)
    }
    fn slab(&self, id: u32, layer: u32, is_v: bool) -> Result<&[u16], KvError> {
        KvPool::slab(self, id, layer, is_v)
    }
    fn slab_mut(&mut self, id: u32, layer: u32, is_v: bool) -> Result<&mut [u16], KvError> {
        KvPool::slab_mut(self, id, layer, is_v)
    }
    fn elem(&self) -> KvElem {
        KvPool::elem(self)
    }
    fn q8_slab(&self, id: u32, layer: u32, is_v: bool) -> Result<Q8Slab<'_>, KvError> {
        KvPool::q8_slab(self, id, layer, is_v)
    }
    fn q8_slab_mut(&mut self, id: u32, layer: u32, is_v: bool) -> Result<Q8SlabMut<'_>, KvError> {
        KvPool::q8_slab_mut(self, id, layer, is_v)
    }
}

impl KvBackend for KvPool {
    fn n_blocks(&self) -> u32 {
        KvPool::n_blocks(self)
    }
    fn alloc(&mut self, n: usize) -> Result<Vec<u32>, KvError> {
        KvPool::alloc(self, n)
    }
    fn retain(&mut self, id: u32) -> Result<(), KvError> {
        KvPool::retain(self, id)
    }
    fn release(&mut self, id: u32) -> Result<(), KvError> {
        KvPool::release(self, id)
    }
    fn refs(&self, id: u32) -> Result<u32, KvError> {
        KvPool::refs(self, id)
    }
    fn fill(&self, id: u32) -> Result<u32, KvError> {
        KvPool::fill(self, id)
    }
    fn set_fill(&mut self, id: u32, n: u32) -> Result<(), KvError> {
        KvPool::set_fill(self, id, n)
    }
    fn register(&mut self, id: u32, hash: u64) -> Result<(), KvError> {
        KvPool::register(self, id, hash)
    }
    fn lookup(&mut self, hash: u64) -> Option<u32> {
        KvPool::lookup(self, hash)
    }
    fn n_free(&self) -> usize {
        KvPool::n_free(self)
    }
    fn n_cached(&self) -> usize {
        KvPool::n_cached(self)
    }
    fn n_in_use(&self) -> usize {
        KvPool::n_in_use(self)
    }
    fn export(&self, ids: &[u32]) -> Result<Vec<u8>, KvError> {
        KvPool::export(self, ids)
    }
    fn import(&mut self, buf: &[u8]) -> Result<Vec<u32>, KvError> {
        KvPool::import(self, buf)
    }
}

fn make(spec: &KvSpec) -> Result<Box<dyn KvBackend>, KvError> {
    let pool = KvPool::with_prefix_cache(spec.geometry, spec.n_blocks, spec.prefix_cache)?;
    crate::HybridPool::boxed(pool, spec)
}

tl_core::inventory::submit!(tl_core::KvRegistration { name: crate::BACKEND_NAME, make });
