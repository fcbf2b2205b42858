//! The q8 slab storage (docs/spec/kv.md, "Other element types"), registered as
//! `"q8-slab"`: tl-kv's block bookkeeping ([`KvPool::with_slabs`]) over [`Q8Slabs`].
//!
//! Per block, layer, K/V, KV head and slot: `head_dim` signed 8-bit codes and one f16
//! scale ([`tl_core::quantize_q8`]'s rule). Codes and scales live in two allocations
//! made at construction, never grown, laid out like [`crate::F16Slabs`]' values: slab
//! `(block, layer, K|V)` holds `(n_kv_heads, B, D)` codes and `(n_kv_heads, B)` scales.

use std::ops::Range;

use tl_core::{KvBackend, KvElem, KvError, KvGeometry, KvSlabs, KvSpec, Q8Slab, Q8SlabMut};

use crate::pool::{checked_sizes, KvPool};

/// The name the q8 backend registers under in tl-core's registry.
pub const Q8_BACKEND_NAME: &str = "q8-slab";

/// q8 slab storage: every block's codes in one allocation, every block's scales in another.
pub struct Q8Slabs {
    geometry: KvGeometry,
    n_blocks: u32,
    slab_elems: usize,
    slab_rows: usize,
    // (n_blocks, n_layers, 2 [K, V], n_kv_heads, block_tokens, head_dim) codes
    codes: Vec<i8>,
    // (n_blocks, n_layers, 2 [K, V], n_kv_heads, block_tokens) f16 scale bit patterns
    scales: Vec<u16>,
}

/// A zeroed vector of `n` elements, or an `Err` when the allocation is impossible (a budget
/// too large for the machine is the caller's error, not an abort).
fn zeroed<T: Clone + Default>(n: usize, what: &str) -> Result<Vec<T>, KvError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| KvError::Backend(format!("q8-slab: cannot allocate {n} {what}")))?;
    v.resize(n, T::default());
    Ok(v)
}

impl Q8Slabs {
    /// Zeroed q8 slabs for `n_blocks` blocks of `geometry`; a zero field, an overflowing
    /// size or an impossible allocation is an `Err`.
    pub fn new(geometry: KvGeometry, n_blocks: u32) -> Result<Q8Slabs, KvError> {
        if n_blocks == 0 {
            return Err(KvError::ZeroCapacity { field: "n_blocks" });
        }
        let (slab_elems, _) = checked_sizes(&geometry, KvElem::Q8, n_blocks)?;
        let slab_rows = slab_elems / geometry.head_dim as usize;
        let slabs = n_blocks as usize * geometry.n_layers as usize * 2; // checked with the bytes
        let codes = zeroed(slabs * slab_elems, "codes")?;
        let scales = zeroed(slabs * slab_rows, "scales")?;
        Ok(Q8Slabs { geometry, n_blocks, slab_elems, slab_rows, codes, scales })
    }

    /// The index of one slab (block, layer, K|V); the id and layer are checked.
    fn slab_index(&self, id: u32, layer: u32, is_v: bool) -> Result<usize, KvError> {
        if id >= self.n_blocks {
            return Err(KvError::BadId { id, n_blocks: self.n_blocks });
        }
        if layer >= self.geometry.n_layers {
            return Err(KvError::BadLayer { layer, n_layers: self.geometry.n_layers });
        }
        Ok((id as usize * self.geometry.n_layers as usize + layer as usize) * 2 + usize::from(is_v))
    }

    fn ranges(&self, id: u32, layer: u32, is_v: bool) -> Result<(Range<usize>, Range<usize>), KvError> {
        let i = self.slab_index(id, layer, is_v)?;
        let (c, r) = (i * self.slab_elems, i * self.slab_rows);
        Ok((c..c + self.slab_elems, r..r + self.slab_rows))
    }
}

impl KvSlabs for Q8Slabs {
    fn geometry(&self) -> KvGeometry {
        self.geometry
    }
    fn slab(&self, _id: u32, _layer: u32, _is_v: bool) -> Result<&[u16], KvError> {
        Err(KvError::WrongElem { asked: KvElem::F16, stored: KvElem::Q8 })
    }
    fn slab_mut(&mut self, _id: u32, _layer: u32, _is_v: bool) -> Result<&mut [u16], KvError> {
        Err(KvError::WrongElem { asked: KvElem::F16, stored: KvElem::Q8 })
    }
    fn elem(&self) -> KvElem {
        KvElem::Q8
    }
    fn q8_slab(&self, id: u32, layer: u32, is_v: bool) -> Result<Q8Slab<'_>, KvError> {
        let (c, s) = self.ranges(id, layer, is_v)?;
        Ok(Q8Slab { codes: &self.codes[c], scales: &self.scales[s] })
    }
    fn q8_slab_mut(&mut self, id: u32, layer: u32, is_v: bool) -> Result<Q8SlabMut<'_>, KvError> {
        let (c, s) = self.ranges(id, layer, is_v)?;
        Ok(Q8SlabMut { codes: &mut self.codes[c], scales: &mut self.scales[s] })
    }
}

impl KvPool {
    /// A q8 pool (`"q8-slab"`) of `n_blocks` blocks of `geometry`, prefix caching on or off.
    pub fn q8(geometry: KvGeometry, n_blocks: u32, prefix_cache: bool) -> Result<KvPool, KvError> {
        KvPool::with_slabs(Box::new(Q8Slabs::new(geometry, n_blocks)?), n_blocks, prefix_cache)
    }
}

fn make(spec: &KvSpec) -> Result<Box<dyn KvBackend>, KvError> {
    crate::HybridPool::boxed(KvPool::q8(spec.geometry, spec.n_blocks, spec.prefix_cache)?, spec)
}

tl_core::inventory::submit!(tl_core::KvRegistration { name: Q8_BACKEND_NAME, make });
