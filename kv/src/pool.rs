//! The pool: configuration, slabs and block bookkeeping (kv.md, "Block states").

use std::collections::HashMap;
use std::fmt;

use tl_core::{KvError, KvGeometry};

/// `KvCfg::dtype` for IEEE half values stored as `u16` (the only dtype this pool holds).
pub const DTYPE_F16: i32 = 1;
/// `KvCfg::format` for this pool's slab layout and export envelope version 1.
pub const FORMAT_F16_SLAB: u32 = 1;

/// "No block" in the intrusive LRU links; never a valid id, since ids are `< n_blocks`.
pub(crate) const NIL: u32 = u32::MAX;

/// How to build a [`KvPool`] (the seed's fields).
///
/// `dtype` must be [`DTYPE_F16`] (1) and `format` [`FORMAT_F16_SLAB`] (1); anything else
/// is refused by [`KvPool::new`], so a future fp8 pool cannot be mistaken for this one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvCfg {
    /// Blocks in the pool (> 0).
    pub n_blocks: u32,
    /// Token positions per block, B (> 0).
    pub block_tokens: u32,
    /// Transformer layers (> 0).
    pub n_layers: u32,
    /// Key/value heads per layer (> 0).
    pub n_kv_heads: u32,
    /// Size of one head (> 0).
    pub head_dim: u32,
    /// Element type: only [`DTYPE_F16`] is accepted.
    pub dtype: i32,
    /// Slab layout and envelope version: only [`FORMAT_F16_SLAB`] is accepted.
    pub format: u32,
}

impl KvCfg {
    /// An f16 configuration of `n_blocks` blocks of `geometry`.
    pub fn f16(geometry: KvGeometry, n_blocks: u32) -> KvCfg {
        KvCfg {
            n_blocks,
            block_tokens: geometry.block_tokens,
            n_layers: geometry.n_layers,
            n_kv_heads: geometry.n_kv_heads,
            head_dim: geometry.head_dim,
            dtype: DTYPE_F16,
            format: FORMAT_F16_SLAB,
        }
    }

    /// The block geometry part of the configuration.
    pub fn geometry(&self) -> KvGeometry {
        KvGeometry {
            n_layers: self.n_layers,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
            block_tokens: self.block_tokens,
        }
    }
}

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

/// The bounded f16 KV block pool (kv.md).
///
/// Slab contents of a freshly allocated block are whatever its last user left (zeros at
/// first): the forward writes a slot before `fill` covers it, so clearing would only cost.
pub struct KvPool {
    pub(crate) cfg: KvCfg,
    pub(crate) geometry: KvGeometry,
    pub(crate) prefix_cache: bool,
    pub(crate) slab_elems: usize,
    // (n_blocks, n_layers, 2 [K, V], n_kv_heads, block_tokens, head_dim) f16 bit patterns
    pub(crate) data: Vec<u16>,
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
            .field("cfg", &self.cfg)
            .field("prefix_cache", &self.prefix_cache)
            .field("n_free", &self.free.len())
            .field("n_cached", &self.n_cached)
            .field("n_in_use", &self.n_in_use)
            .finish_non_exhaustive()
    }
}

/// Checked sizes of a geometry: (elements per slab, bytes per block).
fn sizes(g: &KvGeometry) -> Result<(usize, usize), KvError> {
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
    let block = g.block_bytes().ok_or_else(|| KvError::Overflow { what: "block bytes".into() })?;
    Ok((slab, block))
}

/// How many blocks of `geometry` fit in `bytes` of slab memory (capped at `u32::MAX`).
///
/// Errors on a geometry [`KvPool::new`] would refuse, and when the budget is below one
/// block (a zero-block pool is refused anyway, so better to say why here).
pub fn n_blocks_for_budget(bytes: usize, geometry: &KvGeometry) -> Result<u32, KvError> {
    let (_, block) = sizes(geometry)?;
    let n = bytes / block;
    if n == 0 {
        return Err(KvError::ZeroCapacity { field: "memory budget (smaller than one block)" });
    }
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

impl KvPool {
    /// A pool with prefix caching on (released registered blocks stay findable).
    pub fn new(cfg: KvCfg) -> Result<KvPool, KvError> {
        KvPool::with_prefix_cache(cfg, true)
    }

    /// A pool with prefix caching on or off; all slab memory is allocated here, once.
    pub fn with_prefix_cache(cfg: KvCfg, prefix_cache: bool) -> Result<KvPool, KvError> {
        if cfg.n_blocks == 0 {
            return Err(KvError::ZeroCapacity { field: "n_blocks" });
        }
        if cfg.dtype != DTYPE_F16 {
            return Err(KvError::Backend(format!(
                "f16-slab: unsupported dtype {} (only {DTYPE_F16} = f16)",
                cfg.dtype
            )));
        }
        if cfg.format != FORMAT_F16_SLAB {
            return Err(KvError::Backend(format!(
                "f16-slab: unsupported format {} (only {FORMAT_F16_SLAB})",
                cfg.format
            )));
        }
        let geometry = cfg.geometry();
        let (slab_elems, block_bytes) = sizes(&geometry)?;
        let total_bytes = block_bytes
            .checked_mul(cfg.n_blocks as usize)
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(|| KvError::Overflow { what: format!("pool of {} blocks", cfg.n_blocks) })?;
        let elems = total_bytes / 2;
        let n = cfg.n_blocks as usize;
        // try_reserve: an impossible budget is an Err for the caller, not an abort.
        let oom = |what: &str| KvError::Backend(format!("f16-slab: cannot allocate {what}"));
        let mut data = Vec::new();
        data.try_reserve_exact(elems).map_err(|_| oom(&format!("{total_bytes} bytes of slabs")))?;
        data.resize(elems, 0u16);
        let mut blocks = Vec::new();
        blocks.try_reserve_exact(n).map_err(|_| oom("block table"))?;
        blocks.resize(n, Block { refs: 0, fill: 0, hash: None, state: BlockState::Free, prev: NIL, next: NIL });
        let mut free = Vec::new();
        free.try_reserve_exact(n).map_err(|_| oom("free list"))?;
        // Reversed so that the first allocations hand out 0, 1, 2, ...
        free.extend((0..cfg.n_blocks).rev());
        Ok(KvPool {
            cfg,
            geometry,
            prefix_cache,
            slab_elems,
            data,
            blocks,
            free,
            lru_head: NIL,
            lru_tail: NIL,
            index: HashMap::new(),
            n_cached: 0,
            n_in_use: 0,
        })
    }

    /// The configuration the pool was built from.
    pub fn cfg(&self) -> &KvCfg {
        &self.cfg
    }

    /// The block geometry.
    pub fn geometry(&self) -> KvGeometry {
        self.geometry
    }

    /// Blocks in the pool.
    pub fn n_blocks(&self) -> u32 {
        self.cfg.n_blocks
    }

    /// Whether released registered blocks are kept findable (cached).
    pub fn prefix_cache(&self) -> bool {
        self.prefix_cache
    }

    /// Bytes of K/V slab memory, allocated once in `new` (bookkeeping adds ~32 per block).
    pub fn size_bytes(&self) -> usize {
        self.data.len() * 2
    }

    /// f16 elements in one slab: `n_kv_heads * block_tokens * head_dim`.
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
        self.blocks.get(id as usize).ok_or(KvError::BadId { id, n_blocks: self.cfg.n_blocks })
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
            .ok_or_else(|| KvError::Backend(format!("f16-slab: reference count of block {id} overflows")))?;
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
                "f16-slab: block {id} is registered; its fill stays {bt}, cannot set {n}"
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
                    "f16-slab: block {id} is already registered under hash {h:#018x}, not {hash:#018x}"
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

    /// Element range of one slab; the id and layer are checked, the block must be in use.
    fn slab_range(&self, id: u32, layer: u32, is_v: bool) -> Result<std::ops::Range<usize>, KvError> {
        self.used(id)?;
        if layer >= self.geometry.n_layers {
            return Err(KvError::BadLayer { layer, n_layers: self.geometry.n_layers });
        }
        // Cannot overflow: the whole pool's size was checked in `new`.
        let slab = (id as usize * self.geometry.n_layers as usize + layer as usize) * 2 + usize::from(is_v);
        let start = slab * self.slab_elems;
        Ok(start..start + self.slab_elems)
    }

    /// One layer's K (`is_v == false`) or V slab of a block in use.
    /// Shape `(n_kv_heads, block_tokens, head_dim)`, f16 bit patterns.
    pub fn slab(&self, id: u32, layer: u32, is_v: bool) -> Result<&[u16], KvError> {
        let r = self.slab_range(id, layer, is_v)?;
        Ok(&self.data[r])
    }

    /// Mutable slab access for the forward's writes (same shape as [`KvPool::slab`]).
    pub fn slab_mut(&mut self, id: u32, layer: u32, is_v: bool) -> Result<&mut [u16], KvError> {
        let r = self.slab_range(id, layer, is_v)?;
        Ok(&mut self.data[r])
    }

    /// All slabs of a block, layer-major, K before V: `(n_layers, 2, slab_elems)`.
    pub(crate) fn block_data(&self, id: u32) -> &[u16] {
        let per = self.slab_elems * 2 * self.geometry.n_layers as usize;
        let start = id as usize * per;
        &self.data[start..start + per]
    }

    pub(crate) fn block_data_mut(&mut self, id: u32) -> &mut [u16] {
        let per = self.slab_elems * 2 * self.geometry.n_layers as usize;
        let start = id as usize * per;
        &mut self.data[start..start + per]
    }
}
