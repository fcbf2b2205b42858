//! The KV backend extension point: the block pool the forward writes K and V into.
//!
//! Layout (docs/spec/kv.md): fixed-size blocks of `block_tokens` (B) positions. Each
//! block has, per layer, one K slab and one V slab of `n_kv_heads * B * head_dim` values.
//! Position `j` of a sequence lives in block `table[j / B]`, slot `j % B`; its K for KV
//! head `h` starts at element `(h * B + slot) * head_dim` of that layer's K slab.
//!
//! The values are f16 bit patterns ([`KvElem::F16`], `KvSlabs::slab`) or, for a q8
//! backend ([`KvElem::Q8`], `KvSlabs::q8_slab`), signed 8-bit codes with one f16 scale
//! per row (KV head and slot) at index `h * B + slot`: see [`quantize_q8`].

use std::any::Any;
use std::sync::{Arc, Mutex};

use thiserror::Error;

/// The shape of one KV block, fixed by the model (and the chosen block size).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KvGeometry {
    /// Transformer layers.
    pub n_layers: u32,
    /// Key/value heads per layer.
    pub n_kv_heads: u32,
    /// Size of one head.
    pub head_dim: u32,
    /// Token positions per block (B).
    pub block_tokens: u32,
}

impl KvGeometry {
    /// Elements (f16 values) in one slab: `n_kv_heads * block_tokens * head_dim`, or
    /// `None` when that overflows.
    pub fn slab_elems(&self) -> Option<usize> {
        (self.n_kv_heads as usize).checked_mul(self.block_tokens as usize)?.checked_mul(self.head_dim as usize)
    }

    /// Bytes one block takes (K and V slabs of every layer), or `None` on overflow.
    pub fn block_bytes(&self) -> Option<usize> {
        self.slab_elems()?
            .checked_mul(2)? // K and V
            .checked_mul(self.n_layers as usize)?
            .checked_mul(2) // f16
    }

    /// Bytes one block takes when its values are `elem`, or `None` on overflow.
    pub fn block_bytes_of(&self, elem: KvElem) -> Option<usize> {
        let rows = (self.n_kv_heads as usize).checked_mul(self.block_tokens as usize)?;
        rows.checked_mul(elem.row_bytes(self.head_dim as usize)?)?
            .checked_mul(2)? // K and V
            .checked_mul(self.n_layers as usize)
    }

    /// Element offset of (kv head `h`, slot) inside one slab.
    pub fn offset(&self, head: usize, slot: usize) -> usize {
        (head * self.block_tokens as usize + slot) * self.head_dim as usize
    }
}

/// The shape of one recurrent-state slot (docs/spec/kv.md, "Recurrent state beside the
/// pages"): the state of every recurrent layer of one sequence after one position, f32,
/// layer-major.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StateGeometry {
    /// Recurrent layers R (their model indices are the layout's state group).
    pub n_layers: u32,
    /// f32 values of one layer's state F (the architecture's, from the config alone).
    pub floats: u32,
}

impl StateGeometry {
    /// f32 values in one slot, `R * F`, or `None` on overflow.
    pub fn slot_floats(&self) -> Option<usize> {
        (self.n_layers as usize).checked_mul(self.floats as usize)
    }

    /// Bytes of one slot, or `None` on overflow.
    pub fn slot_bytes(&self) -> Option<usize> {
        self.slot_floats()?.checked_mul(4)
    }
}

/// The element type a pool stores K and V in (docs/spec/kv.md, "Other element types").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvElem {
    /// IEEE half values as `u16` bit patterns (`"f16-slab"`, the default).
    F16,
    /// Signed 8-bit codes with one f16 scale per (position, KV head) row (`"q8-slab"`).
    Q8,
}

impl KvElem {
    /// The envelope's dtype code (docs/formats/kv-block.md): 1 f16, 2 q8.
    pub fn code(self) -> u32 {
        match self {
            KvElem::F16 => 1,
            KvElem::Q8 => 2,
        }
    }

    /// The element type of an envelope dtype code, if it names one.
    pub fn from_code(code: u32) -> Option<KvElem> {
        match code {
            1 => Some(KvElem::F16),
            2 => Some(KvElem::Q8),
            _ => None,
        }
    }

    /// Bytes of one row of `head_dim` values: `2 * D` for f16, `D + 2` (the codes and
    /// the f16 scale) for q8; `None` on overflow.
    pub fn row_bytes(self, head_dim: usize) -> Option<usize> {
        match self {
            KvElem::F16 => head_dim.checked_mul(2),
            KvElem::Q8 => head_dim.checked_add(2),
        }
    }
}

impl std::fmt::Display for KvElem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KvElem::F16 => "f16",
            KvElem::Q8 => "q8",
        })
    }
}

/// One q8 slab of a block and layer: `codes` `(n_kv_heads, B, D)` and `scales`
/// `(n_kv_heads, B)` f16 bit patterns; the value of code `c` in row `r` is
/// `c as f32 * f16_to_f32(scales[r])`, exact in f32 (at most 8 + 11 significant bits).
#[derive(Clone, Copy, Debug, Default)]
pub struct Q8Slab<'a> {
    /// The codes, each in `-127..=127`.
    pub codes: &'a [i8],
    /// One f16 scale per row.
    pub scales: &'a [u16],
}

/// Mutable [`Q8Slab`], for the forward's writes.
#[derive(Debug)]
pub struct Q8SlabMut<'a> {
    /// The codes.
    pub codes: &'a mut [i8],
    /// One f16 scale per row.
    pub scales: &'a mut [u16],
}

/// Quantize one row `x` into `codes` (the first `x.len()` of them) and return its f16
/// scale's bits: `scale = f16(max|x| / 127)` (the division in f32, then rounded to
/// nearest-even f16), `q = clamp(rint(x / s), -127, 127)` with `s` the STORED scale
/// widened to f32, the division in f32 and `rint` half to even.
///
/// Edge rules: a stored scale of zero (an all-zero row, or one so small the scale
/// underflows f16) gives all-zero codes; a NaN `x / s` gives code 0. A row whose max
/// overflows f16 stores an infinite scale, and its values read back as NaN, as an f16
/// cache would hold infinities: such a row is outside any model's working range.
pub fn quantize_q8(x: &[f32], codes: &mut [i8]) -> u16 {
    let max = x.iter().fold(0.0f32, |m, &v| if v.abs() > m { v.abs() } else { m });
    let bits = tl_quant::f32_to_f16(max / 127.0);
    let s = tl_quant::f16_to_f32(bits);
    for (c, &v) in codes.iter_mut().zip(x) {
        *c = if s == 0.0 {
            0
        } else {
            // `as` saturates and maps NaN to 0; the clamp keeps -128 out.
            ((v / s).round_ties_even() as i8).clamp(-127, 127)
        };
    }
    bits
}

/// What a backend is built from (the runner derives it from the model's geometry and
/// [`crate::engine::KvConfig`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvSpec {
    /// Block geometry.
    pub geometry: KvGeometry,
    /// Blocks in the pool; allocated once, never grown.
    pub n_blocks: u32,
    /// Keep released full, registered blocks findable (the prefix cache).
    pub prefix_cache: bool,
    /// Recurrent-state slots beside the pages, for a hybrid model: their geometry and how
    /// many (allocated once, like the pages); `None` for a model of attention layers only.
    pub state: Option<(StateGeometry, u32)>,
}

/// Every way a KV pool operation can fail. Messages name the block id or the field.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum KvError {
    /// A pool of zero blocks or zero block_tokens, or a geometry with a zero field.
    #[error("KV pool: {field} must be > 0")]
    ZeroCapacity {
        /// The field that was zero.
        field: &'static str,
    },
    /// Slab or pool sizes overflow the address space.
    #[error("KV pool: size overflows ({what})")]
    Overflow {
        /// What overflowed.
        what: String,
    },
    /// All-or-nothing allocation failed.
    #[error("KV pool: asked for {requested} blocks, only {available} free or evictable")]
    OutOfBlocks {
        /// Blocks asked for.
        requested: usize,
        /// Free plus cached blocks.
        available: usize,
    },
    /// An id outside `0..n_blocks`.
    #[error("KV pool: block id {id} out of range (pool has {n_blocks} blocks)")]
    BadId {
        /// The id.
        id: u32,
        /// Pool size.
        n_blocks: u32,
    },
    /// The operation needs a block in use (ref >= 1), and this one is free or cached.
    #[error("KV pool: block {id} is not in use")]
    NotInUse {
        /// The id.
        id: u32,
    },
    /// `set_fill` past the block size.
    #[error("KV pool: fill {fill} for block {id} exceeds block_tokens {block_tokens}")]
    FillTooLarge {
        /// The id.
        id: u32,
        /// The fill asked for.
        fill: u32,
        /// B.
        block_tokens: u32,
    },
    /// `register` on a block that is not full.
    #[error("KV pool: block {id} has fill {fill} of {block_tokens}; only full blocks register")]
    NotFull {
        /// The id.
        id: u32,
        /// Its fill.
        fill: u32,
        /// B.
        block_tokens: u32,
    },
    /// A layer index past `n_layers`.
    #[error("KV pool: layer {layer} out of range (model has {n_layers})")]
    BadLayer {
        /// The layer.
        layer: u32,
        /// Layers in the geometry.
        n_layers: u32,
    },
    /// An export envelope that cannot be imported.
    #[error("KV import: {reason}")]
    BadEnvelope {
        /// What is wrong: magic, version, geometry, checksum, truncation.
        reason: String,
    },
    /// Slab access of one element type on a pool of another (`slab` on a q8 pool, say).
    #[error("KV pool: asked for {asked} slabs of a pool that stores {stored}")]
    WrongElem {
        /// The element type asked for.
        asked: KvElem,
        /// The pool's.
        stored: KvElem,
    },
    /// A recurrent-state operation on a pool that holds no state slots (a backend
    /// written before hybrid models, or a pool built for an attention-only model).
    #[error("KV pool: this pool holds no recurrent-state slots (needed by a hybrid model's {what})")]
    NoState {
        /// What asked for them.
        what: &'static str,
    },
    /// A state slot id that is not one (a page id, or past the slots).
    #[error("KV pool: {id} is not a recurrent-state slot")]
    BadSlot {
        /// The id.
        id: u32,
    },
    /// A backend-specific failure.
    #[error("KV backend: {0}")]
    Backend(String),
}

/// What a forward reads and writes: the geometry and the K/V slabs of a block and layer.
///
/// This is all a model sees of the pool ([`crate::arch::ForwardCtx`]), so a backend that
/// stores slabs differently (one allocation per block, another memory, counters) only
/// implements this and can reuse a pool manager such as tl-kv's `KvPool::with_slabs`.
/// Implementations return `Err` (never panic) on a bad id or layer.
pub trait KvSlabs: Send {
    /// The block geometry.
    fn geometry(&self) -> KvGeometry;
    /// One layer's K (`is_v == false`) or V slab of a block:
    /// `(n_kv_heads, block_tokens, head_dim)` f16 bit patterns.
    fn slab(&self, id: u32, layer: u32, is_v: bool) -> Result<&[u16], KvError>;
    /// Mutable slab access, for the forward's writes.
    fn slab_mut(&mut self, id: u32, layer: u32, is_v: bool) -> Result<&mut [u16], KvError>;
    /// The element type: which of `slab` and `q8_slab` serves the values. Defaults to
    /// f16, so a backend written before q8 existed keeps compiling and working.
    fn elem(&self) -> KvElem {
        KvElem::F16
    }
    /// One layer's K or V slab of a q8 pool ([`Q8Slab`]); an f16 pool has none.
    fn q8_slab(&self, id: u32, layer: u32, is_v: bool) -> Result<Q8Slab<'_>, KvError> {
        let _ = (id, layer, is_v);
        Err(KvError::WrongElem { asked: KvElem::Q8, stored: self.elem() })
    }
    /// Mutable [`KvSlabs::q8_slab`], for the forward's writes.
    fn q8_slab_mut(&mut self, id: u32, layer: u32, is_v: bool) -> Result<Q8SlabMut<'_>, KvError> {
        let _ = (id, layer, is_v);
        Err(KvError::WrongElem { asked: KvElem::Q8, stored: self.elem() })
    }
    /// Recurrent-state slot `slot`'s values of state layer `layer` (`StateGeometry::floats`
    /// f32, as the forward left them). A pool without state slots has none.
    fn state(&self, slot: u32, layer: u32) -> Result<&[f32], KvError> {
        let _ = (slot, layer);
        Err(KvError::NoState { what: "forward" })
    }
    /// Mutable [`KvSlabs::state`], for the forward's writes.
    fn state_mut(&mut self, slot: u32, layer: u32) -> Result<&mut [f32], KvError> {
        let _ = (slot, layer);
        Err(KvError::NoState { what: "forward" })
    }
    /// Copy state layer `layer` of slot `from` into slot `to` (a row's start: the state
    /// after the previous row's last position becomes the new row's live state; the
    /// forward runs layer by layer, so it copies one layer at a time).
    fn copy_state(&mut self, from: u32, to: u32, layer: u32) -> Result<(), KvError> {
        let _ = (from, to, layer);
        Err(KvError::NoState { what: "forward" })
    }
    /// The state slots' geometry, if this pool has any.
    fn state_geometry(&self) -> Option<StateGeometry> {
        None
    }
    /// Check that `id` and `layer` are slabs this pool can serve, whatever its element
    /// type (the forward's plan asks before it writes anything).
    fn check_slab(&self, id: u32, layer: u32) -> Result<(), KvError> {
        match self.elem() {
            KvElem::F16 => self.slab(id, layer, false).map(|_| ()),
            KvElem::Q8 => self.q8_slab(id, layer, false).map(|_| ()),
        }
    }
}

/// The block pool: the slabs plus their management (reference counts, fill, the prefix
/// index and its eviction, export/import), which the runner and schedulers use.
///
/// Implementations must return `Err` (never panic) on a bad id, layer or state. The
/// default implementation is tl-kv's `KvPool`, registered as `"f16-slab"`. A backend is
/// `Any`, so a caller that knows the concrete type can downcast the pool
/// (`(&**pool as &dyn Any).downcast_ref::<T>()`).
pub trait KvBackend: KvSlabs + Any {
    /// Blocks in the pool.
    fn n_blocks(&self) -> u32;
    /// Take `n` blocks, all or nothing; each comes back with ref 1 and fill 0.
    fn alloc(&mut self, n: usize) -> Result<Vec<u32>, KvError>;
    /// Take `n` recurrent-state slots, all or nothing, each with ref 1 and fill 0 (its
    /// values whatever the last user left: the forward writes before it reads). Slot ids
    /// are never page ids; every other operation (retain, release, fill, register,
    /// lookup) takes either. A pool without slots refuses.
    fn alloc_slots(&mut self, n: usize) -> Result<Vec<u32>, KvError> {
        let _ = n;
        Err(KvError::NoState { what: "sequence" })
    }
    /// Free state slots (0 without slots).
    fn n_free_slots(&self) -> usize {
        0
    }
    /// ref += 1 on a block in use.
    fn retain(&mut self, id: u32) -> Result<(), KvError>;
    /// ref -= 1; at 0 the block becomes cached (registered, prefix cache on) or free.
    fn release(&mut self, id: u32) -> Result<(), KvError>;
    /// Reference count of a block (0 when free or cached).
    fn refs(&self, id: u32) -> Result<u32, KvError>;
    /// How many slots of a block hold data.
    fn fill(&self, id: u32) -> Result<u32, KvError>;
    /// Set how many slots hold data (`n <= block_tokens`).
    fn set_fill(&mut self, id: u32, n: u32) -> Result<(), KvError>;
    /// Make a full block findable under `hash`.
    fn register(&mut self, id: u32, hash: u64) -> Result<(), KvError>;
    /// The block registered under `hash`, with ref += 1, or none.
    fn lookup(&mut self, hash: u64) -> Option<u32>;
    /// Free blocks.
    fn n_free(&self) -> usize;
    /// Cached blocks (ref 0, registered, evictable).
    fn n_cached(&self) -> usize;
    /// Blocks with ref >= 1.
    fn n_in_use(&self) -> usize;
    /// Serialize blocks into a self-describing envelope.
    fn export(&self, ids: &[u32]) -> Result<Vec<u8>, KvError>;
    /// Allocate fresh blocks and fill them from an envelope.
    fn import(&mut self, buf: &[u8]) -> Result<Vec<u32>, KvError>;
}

/// The pool shared between the runner and whoever schedules blocks.
pub type SharedPool = Arc<Mutex<Box<dyn KvBackend>>>;

/// A KV backend registration: `inventory::submit!(KvRegistration { name, make })`.
pub struct KvRegistration {
    /// The name `EngineConfig.kv.backend` selects it by.
    pub name: &'static str,
    /// Build a pool of the given geometry and size.
    pub make: fn(&KvSpec) -> Result<Box<dyn KvBackend>, KvError>,
}

inventory::collect!(KvRegistration);
