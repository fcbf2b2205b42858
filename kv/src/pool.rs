//! The pool: configuration, slabs and block bookkeeping (kv.md, "Block states").

use std::collections::HashMap;
use std::fmt;

use tl_core::{KvElem, KvError, KvGeometry, KvSlabs, Q8Slab, Q8SlabMut};

/// The envelope's dtype code for IEEE half values stored as `u16`.
pub const DTYPE_F16: i32 = 1;
/// The envelope's dtype code for q8 codes with an f16 scale per row (`"q8-slab"`).
pub const DTYPE_Q8: i32 = 2;
/// The export envelope version f16 pools write (q8 pools write 2, which adds the q8 dtype).
pub const FORMAT_F16_SLAB: u32 = 1;

/// "No block" in the intrusive LRU links; never a valid id, since ids are `< n_blocks`.
pub(crate) const NIL: u32 = u32::MAX;

/// Which of kv.md's three states a block is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// ref 0, unregistered, on the free list.
    Free,
    /// ref 0, registered, on the LRU (prefix caching on).
    Cached,
    /// ref >= 1.
    InUse,
}

/// Bookkeeping of one block; `prev`/`next` link the LRU while the block is cached.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Block {
    pub(crate) refs: u32,
    pub(crate) fill: u32,
    pub(crate) hash: Option<u64>,
    pub(crate) state: BlockState,
    pub(crate) prev: u32,
    pub(crate) next: u32,
}

/// tl-kv's slab storage: every K and V slab of every block in one allocation made at
/// construction, never grown.
pub struct F16Slabs {
    geometry: KvGeometry,
    n_blocks: u32,
    slab_elems: usize,
    // (n_blocks, n_layers, 2 [K, V], n_kv_heads, block_tokens, head_dim) f16 bit patterns
    data: Vec<u16>,
}

impl F16Slabs {
    /// Zeroed slabs for `n_blocks` blocks of `geometry`; a zero field, an overflowing
    /// size or an impossible allocation is an `Err`.
    pub fn new(geometry: KvGeometry, n_blocks: u32) -> Result<F16Slabs, KvError> {
        if n_blocks == 0 {
            return Err(KvError::ZeroCapacity { field: "n_blocks" });
        }
        let (slab_elems, total_bytes) = checked_sizes(&geometry, KvElem::F16, n_blocks)?;
        let elems = total_bytes / 2;
        let mut data = Vec::new();
        // try_reserve: an impossible budget is an Err for the caller, not an abort.
        data.try_reserve_exact(elems)
            .map_err(|_| KvError::Backend(format!("f16-slab: cannot allocate {total_bytes} bytes of slabs")))?;
        data.resize(elems, 0u16);
        Ok(F16Slabs { geometry, n_blocks, slab_elems, data })
    }

    /// Element range of one slab; the id and layer are checked.
    fn range(&self, id: u32, layer: u32, is_v: bool) -> Result<std::ops::Range<usize>, KvError> {
        if id >= self.n_blocks {
            return Err(KvError::BadId { id, n_blocks: self.n_blocks });
        }
        if layer >= self.geometry.n_layers {
            return Err(KvError::BadLayer { layer, n_layers: self.geometry.n_layers });
        }
        // Cannot overflow: the whole pool's size was checked in `new`.
        let slab = (id as usize * self.geometry.n_layers as usize + layer as usize) * 2 + usize::from(is_v);
        let start = slab * self.slab_elems;
        Ok(start..start + self.slab_elems)
    }
}

impl KvSlabs for F16Slabs {
    fn geometry(&self) -> KvGeometry {
        self.geometry
    }
    fn slab(&self, id: u32, layer: u32, is_v: bool) -> Result<&[u16], KvError> {
        let r = self.range(id, layer, is_v)?;
        Ok(&self.data[r])
    }
    fn slab_mut(&mut self, id: u32, layer: u32, is_v: bool) -> Result<&mut [u16], KvError> {
        let r = self.range(id, layer, is_v)?;
        Ok(&mut self.data[r])
    }
}

/// The bounded KV block pool (kv.md): block bookkeeping (reference counts, fill, the
/// free list, the prefix index and the LRU of cached blocks) over slab storage, by
/// default [`F16Slabs`]; [`KvPool::with_slabs`] puts the same bookkeeping over another
/// storage.
///
/// Slab contents of a freshly allocated block are whatever its last user left (zeros at
/// first): the forward writes a slot before `fill` covers it, so clearing would only cost.
pub struct KvPool {
    pub(crate) n_blocks: u32,
    pub(crate) elem: KvElem,
    pub(crate) geometry: KvGeometry,
    pub(crate) prefix_cache: bool,
    pub(crate) slab_elems: usize,
    pub(crate) slabs: Box<dyn KvSlabs>,
    pub(crate) blocks: Vec<Block>,
    // A stack: the most recently freed block is reused first (warm in cache).
    pub(crate) free: Vec<u32>,
    // Cached blocks, oldest release at the head; eviction pops the head.
    pub(crate) lru_head: u32,
    pub(crate) lru_tail: u32,
    pub(crate) index: HashMap<u64, u32>,
    pub(crate) n_cached: usize,
    pub(crate) n_in_use: usize,
}

impl fmt::Debug for KvPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KvPool")
            .field("geometry", &self.geometry)
            .field("n_blocks", &self.n_blocks)
            .field("prefix_cache", &self.prefix_cache)
            .field("n_free", &self.free.len())
            .field("n_cached", &self.n_cached)
            .field("n_in_use", &self.n_in_use)
            .finish_non_exhaustive()
    }
}

/// Checked sizes of a geometry holding `elem` values: (elements per slab, bytes per block).
fn sizes(g: &KvGeometry, elem: KvElem) -> Result<(usize, usize), KvError> {
    for (field, v) in [
        ("block_tokens", g.block_tokens),
        ("n_layers", g.n_layers),
        ("n_kv_heads", g.n_kv_heads),
        ("head_dim", g.head_dim),
    ] {
        if v == 0 {
            return Err(KvError::ZeroCapacity { field });
        }
    }
    let slab = g.slab_elems().ok_or_else(|| KvError::Overflow { what: "slab elements".into() })?;
    let block = g.block_bytes_of(elem).ok_or_else(|| KvError::Overflow { what: "block bytes".into() })?;
    Ok((slab, block))
}

/// [`sizes`] and the bytes of a pool of `n_blocks`: (elements per slab, pool bytes), an
/// `Err` when the pool would not fit the address space.
pub(crate) fn checked_sizes(g: &KvGeometry, elem: KvElem, n_blocks: u32) -> Result<(usize, usize), KvError> {
    let (slab, block) = sizes(g, elem)?;
    let total = block
        .checked_mul(n_blocks as usize)
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| KvError::Overflow { what: format!("pool of {n_blocks} blocks") })?;
    Ok((slab, total))
}

/// How many blocks of `geometry` fit in `bytes` of slab memory (capped at `u32::MAX`).
///
/// Errors on a geometry [`KvPool::new`] would refuse, and when the budget is below one
/// block (a zero-block pool is refused anyway, so better to say why here).
pub fn n_blocks_for_budget(bytes: usize, geometry: &KvGeometry) -> Result<u32, KvError> {
    let (_, block) = sizes(geometry, KvElem::F16)?;
    let n = bytes / block;
    if n == 0 {
        return Err(KvError::ZeroCapacity { field: "memory budget (smaller than one block)" });
    }
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

impl KvPool {
    /// An f16 pool of `n_blocks` blocks of `geometry`, prefix caching on (released
    /// registered blocks stay findable).
    pub fn new(geometry: KvGeometry, n_blocks: u32) -> Result<KvPool, KvError> {
        KvPool::with_prefix_cache(geometry, n_blocks, true)
    }

    /// An f16 pool with prefix caching on or off; all slab memory is allocated here, once.
    pub fn with_prefix_cache(geometry: KvGeometry, n_blocks: u32, prefix_cache: bool) -> Result<KvPool, KvError> {
        KvPool::with_slabs(Box::new(F16Slabs::new(geometry, n_blocks)?), n_blocks, prefix_cache)
    }

    /// This pool's bookkeeping over another slab storage, which must serve ids
    /// `0..n_blocks` of its geometry (a downstream crate's own memory layout, say).
    pub fn with_slabs(slabs: Box<dyn KvSlabs>, n_blocks: u32, prefix_cache: bool) -> Result<KvPool, KvError> {
        if n_blocks == 0 {
            return Err(KvError::ZeroCapacity { field: "n_blocks" });
        }
        let (geometry, elem) = (slabs.geometry(), slabs.elem());
        let (slab_elems, _) = sizes(&geometry, elem)?;
        let n = n_blocks as usize;
        let oom = |what: &str| KvError::Backend(format!("KV pool: cannot allocate {what}"));
        let mut blocks = Vec::new();
        blocks.try_reserve_exact(n).map_err(|_| oom("block table"))?;
        blocks.resize(n, Block { refs: 0, fill: 0, hash: None, state: BlockState::Free, prev: NIL, next: NIL });
        let mut free = Vec::new();
        free.try_reserve_exact(n).map_err(|_| oom("free list"))?;
        // Reversed so that the first allocations hand out 0, 1, 2, ...
        free.extend((0..n_blocks).rev());
        Ok(KvPool {
            n_blocks,
            elem,
            geometry,
            prefix_cache,
            slab_elems,
            slabs,
            blocks,
            free,
            lru_head: NIL,
            lru_tail: NIL,
            index: HashMap::new(),
            n_cached: 0,
            n_in_use: 0,
        })
    }

    /// The block geometry.
    pub fn geometry(&self) -> KvGeometry {
        self.geometry
    }

    /// Blocks in the pool.
    pub fn n_blocks(&self) -> u32 {
        self.n_blocks
    }

    /// Whether released registered blocks are kept findable (cached).
    pub fn prefix_cache(&self) -> bool {
        self.prefix_cache
    }

    /// Bytes of K/V slab memory, allocated once in `new` (bookkeeping adds ~32 per block).
    pub fn size_bytes(&self) -> usize {
        // `sizes` checked the block size and the storage's `new` the product when built.
        self.geometry.block_bytes_of(self.elem).unwrap_or(0).saturating_mul(self.n_blocks as usize)
    }

    /// The element type the slabs store.
    pub fn elem(&self) -> KvElem {
        self.elem
    }

    /// Values in one slab: `n_kv_heads * block_tokens * head_dim`.
    pub fn slab_elems(&self) -> usize {
        self.slab_elems
    }

    /// Free blocks.
    pub fn n_free(&self) -> usize {
        self.free.len()
    }

    /// Cached blocks (ref 0, registered, evictable).
    pub fn n_cached(&self) -> usize {
        self.n_cached
    }

    /// Blocks with ref >= 1.
    pub fn n_in_use(&self) -> usize {
        self.n_in_use
    }

    pub(crate) fn block(&self, id: u32) -> Result<&Block, KvError> {
        self.blocks.get(id as usize).ok_or(KvError::BadId { id, n_blocks: self.n_blocks })
    }

    /// The block, which must be in use.
    pub(crate) fn used(&self, id: u32) -> Result<&Block, KvError> {
        let b = self.block(id)?;
        if b.state != BlockState::InUse {
            return Err(KvError::NotInUse { id });
        }
        Ok(b)
    }

    /// A block's state.
    pub fn state(&self, id: u32) -> Result<BlockState, KvError> {
        Ok(self.block(id)?.state)
    }

    /// Reference count of a block (0 when free or cached).
    pub fn refs(&self, id: u32) -> Result<u32, KvError> {
        Ok(self.block(id)?.refs)
    }

    /// How many slots of a block hold data.
    pub fn fill(&self, id: u32) -> Result<u32, KvError> {
        Ok(self.block(id)?.fill)
    }

    /// The hash a block is registered under, if any.
    pub fn hash_of(&self, id: u32) -> Result<Option<u64>, KvError> {
        Ok(self.block(id)?.hash)
    }

    fn lru_push_back(&mut self, id: u32) {
        let tail = self.lru_tail;
        let b = &mut self.blocks[id as usize];
        b.prev = tail;
        b.next = NIL;
        if tail == NIL {
            self.lru_head = id;
        } else {
            self.blocks[tail as usize].next = id;
        }
        self.lru_tail = id;
    }

    fn lru_unlink(&mut self, id: u32) {
        let (prev, next) = {
            let b = &self.blocks[id as usize];
            (b.prev, b.next)
        };
        if prev == NIL {
            self.lru_head = next;
        } else {
            self.blocks[prev as usize].next = next;
        }
        if next == NIL {
            self.lru_tail = prev;
        } else {
            self.blocks[next as usize].prev = prev;
        }
        let b = &mut self.blocks[id as usize];
        b.prev = NIL;
        b.next = NIL;
    }

    /// Take `n` blocks, all or nothing: free ones first, then cached ones, oldest first.
    /// Each comes back with ref 1, fill 0 and no hash.
    pub fn alloc(&mut self, n: usize) -> Result<Vec<u32>, KvError> {
        let available = self.free.len() + self.n_cached;
        if n > available {
            return Err(KvError::OutOfBlocks { requested: n, available });
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let id = match self.free.pop() {
                Some(id) => id,
                None => {
                    // n <= free + cached, so the LRU is not empty here.
                    let id = self.lru_head;
                    self.lru_unlink(id);
                    if let Some(h) = self.blocks[id as usize].hash.take() {
                        self.index.remove(&h);
                    }
                    self.n_cached -= 1;
                    id
                }
            };
            let b = &mut self.blocks[id as usize];
            *b = Block { refs: 1, fill: 0, hash: None, state: BlockState::InUse, prev: NIL, next: NIL };
            self.n_in_use += 1;
            out.push(id);
        }
        Ok(out)
    }

    /// ref += 1 on a block in use (a free or cached block is reacquired with `lookup`).
    pub fn retain(&mut self, id: u32) -> Result<(), KvError> {
        self.used(id)?;
        let b = &mut self.blocks[id as usize];
        b.refs = b
            .refs
            .checked_add(1)
            .ok_or_else(|| KvError::Backend(format!("KV pool: reference count of block {id} overflows")))?;
        Ok(())
    }

    /// ref -= 1; at 0 the block is cached (registered, prefix caching on) or freed, its
    /// hash entry dropped. Releasing a free or cached block is an error.
    pub fn release(&mut self, id: u32) -> Result<(), KvError> {
        self.used(id)?;
        let b = &mut self.blocks[id as usize];
        b.refs -= 1;
        if b.refs > 0 {
            return Ok(());
        }
        self.n_in_use -= 1;
        if b.hash.is_some() && self.prefix_cache {
            b.state = BlockState::Cached;
            self.n_cached += 1;
            self.lru_push_back(id);
        } else {
            b.state = BlockState::Free;
            if let Some(h) = b.hash.take() {
                self.index.remove(&h);
            }
            self.free.push(id);
        }
        Ok(())
    }

    /// Set how many slots of a block in use hold data (`n <= block_tokens`). A registered
    /// block is full by invariant, so its fill cannot change.
    pub fn set_fill(&mut self, id: u32, n: u32) -> Result<(), KvError> {
        let b = self.used(id)?;
        let bt = self.geometry.block_tokens;
        if n > bt {
            return Err(KvError::FillTooLarge { id, fill: n, block_tokens: bt });
        }
        if b.hash.is_some() && n != bt {
            return Err(KvError::Backend(format!(
                "KV pool: block {id} is registered; its fill stays {bt}, cannot set {n}"
            )));
        }
        self.blocks[id as usize].fill = n;
        Ok(())
    }

    /// Make a full block in use findable under `hash`.
    ///
    /// Registering a block again under its own hash is a no-op. When `hash` already names
    /// another block, the first registration wins and this block stays unregistered (two
    /// sequences that prefilled the same prefix in one step): check with
    /// [`KvPool::hash_of`]. A block registered under another hash is an error.
    pub fn register(&mut self, id: u32, hash: u64) -> Result<(), KvError> {
        let b = self.used(id)?;
        let bt = self.geometry.block_tokens;
        if b.fill != bt {
            return Err(KvError::NotFull { id, fill: b.fill, block_tokens: bt });
        }
        match b.hash {
            Some(h) if h == hash => return Ok(()),
            Some(h) => {
                return Err(KvError::Backend(format!(
                    "KV pool: block {id} is already registered under hash {h:#018x}, not {hash:#018x}"
                )))
            }
            None => {}
        }
        if self.index.contains_key(&hash) {
            return Ok(());
        }
        self.index.insert(hash, id);
        self.blocks[id as usize].hash = Some(hash);
        Ok(())
    }

    /// The block registered under `hash`, with ref += 1 (off the LRU if it was cached).
    /// None when nothing is registered under it, or its reference count would overflow.
    pub fn lookup(&mut self, hash: u64) -> Option<u32> {
        let id = *self.index.get(&hash)?;
        let state = self.blocks.get(id as usize)?.state;
        match state {
            BlockState::InUse => {
                let b = &mut self.blocks[id as usize];
                b.refs = b.refs.checked_add(1)?;
            }
            BlockState::Cached => {
                self.lru_unlink(id);
                self.n_cached -= 1;
                self.n_in_use += 1;
                let b = &mut self.blocks[id as usize];
                b.refs = 1;
                b.state = BlockState::InUse;
            }
            // Unreachable while the invariants hold: a free block has no hash entry.
            BlockState::Free => return None,
        }
        Some(id)
    }

    /// One layer's K (`is_v == false`) or V slab of a block in use.
    /// Shape `(n_kv_heads, block_tokens, head_dim)`, f16 bit patterns.
    pub fn slab(&self, id: u32, layer: u32, is_v: bool) -> Result<&[u16], KvError> {
        self.used(id)?;
        self.slabs.slab(id, layer, is_v)
    }

    /// Mutable slab access for the forward's writes (same shape as [`KvPool::slab`]).
    pub fn slab_mut(&mut self, id: u32, layer: u32, is_v: bool) -> Result<&mut [u16], KvError> {
        self.used(id)?;
        self.slabs.slab_mut(id, layer, is_v)
    }

    /// One layer's K or V slab of a block in use in a q8 pool ([`Q8Slab`]).
    pub fn q8_slab(&self, id: u32, layer: u32, is_v: bool) -> Result<Q8Slab<'_>, KvError> {
        self.used(id)?;
        self.slabs.q8_slab(id, layer, is_v)
    }

    /// Mutable [`KvPool::q8_slab`], for the forward's writes.
    pub fn q8_slab_mut(&mut self, id: u32, layer: u32, is_v: bool) -> Result<Q8SlabMut<'_>, KvError> {
        self.used(id)?;
        self.slabs.q8_slab_mut(id, layer, is_v)
    }
}
