//! Engine settings: how a runner holds weights, sizes its KV pool and threads, and the
//! knobs schedulers built on it read. Plain data, no dependency on the rest of core, so
//! the architecture interface can take it without depending on the runner.

/// Whether released full blocks stay findable by prefix hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PrefixCache {
    /// Released blocks go straight back to the free list.
    Off,
    /// Released registered blocks are cached (LRU) until evicted.
    #[default]
    On,
}

/// The order a scheduler serves requests in (used by schedulers built on the runner).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SchedPolicy {
    /// First come, first served.
    #[default]
    Fcfs,
    /// Shortest prompt first.
    ShortestFirst,
}

/// How the weights are held in memory after load.
///
/// `Native` and `F32` give the same logits bit for bit on the same file: every stored
/// format widens exactly to f32 and the kernels run the same operations on the widened
/// values. `F32` is the reference; `Native` is the fast default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Weights {
    /// Everything widened to f32 at load.
    F32,
    /// Kept in the file's format (F32, F16, BF16, GGUF Q4_0/Q4_1/Q8_0 blocks, int4),
    /// repacked for the kernels and widened in registers.
    #[default]
    Native,
    /// The seven projections quantized at load to symmetric int4 in groups of `group`
    /// input columns (numbers.md, `int4-g<g>-sym`); the rest as `Native`. An int4
    /// checkpoint keeps its own group.
    Int4 {
        /// Columns per scale; even, and dividing every projection's input size.
        group: usize,
    },
}

impl std::str::FromStr for Weights {
    type Err = String;

    /// `f32`, `native`, `int4` (group 32) or `int4:G`.
    fn from_str(s: &str) -> Result<Weights, String> {
        match s {
            "f32" => Ok(Weights::F32),
            "native" => Ok(Weights::Native),
            "int4" => Ok(Weights::Int4 { group: 32 }),
            _ => match s.strip_prefix("int4:").and_then(|g| g.parse().ok()) {
                Some(group) => Ok(Weights::Int4 { group }),
                None => Err(format!("weights {s:?}: expected f32, native, int4 or int4:GROUP")),
            },
        }
    }
}

impl std::fmt::Display for Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Weights::F32 => write!(f, "f32"),
            Weights::Native => write!(f, "native"),
            Weights::Int4 { group } => write!(f, "int4:{group}"),
        }
    }
}

/// The KV pool to build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvConfig {
    /// The registered backend (`"f16-slab"` is tl-kv's).
    pub backend: String,
    /// Token positions per block.
    pub block_tokens: u32,
    /// Blocks in the pool, each `block_tokens` positions of every layer (a model of G
    /// layer groups gets G pages of one group each: the same bytes, docs/kv.md); `None`
    /// sizes the pool from `memory_bytes`.
    pub n_blocks: Option<u32>,
    /// Memory budget for the pool when `n_blocks` is `None` (a hybrid model's cached
    /// state snapshots get as much again, docs/spec/kv.md).
    pub memory_bytes: usize,
    /// A hybrid model keeps its recurrent state at most every this many positions
    /// (rounded down to whole blocks; 0 or less than a block: every block), and at the
    /// end of every step: where a prefix hit can resume, against a slot's memory.
    pub state_snapshot_tokens: usize,
}

impl Default for KvConfig {
    fn default() -> Self {
        KvConfig {
            backend: "f16-slab".into(),
            block_tokens: 16,
            n_blocks: None,
            memory_bytes: 256 << 20,
            state_snapshot_tokens: 256,
        }
    }
}

/// Engine settings. `Default` loads any valid model directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Most tokens in one step (for schedulers).
    pub max_batch_tokens: usize,
    /// Most sequences in one step (also sizes the default KV pool).
    pub max_seqs: usize,
    /// Longest prefill piece [`crate::Sequence`] feeds in one step.
    pub prefill_chunk: usize,
    /// Prefix caching in the KV pool.
    pub prefix_cache: PrefixCache,
    /// The KV pool.
    pub kv: KvConfig,
    /// Scheduling policy (for schedulers).
    pub policy: SchedPolicy,
    /// Worker threads for the forward's own kernels (projections, attention); 0 = one
    /// per core. Results do not depend on it, bit for bit. Candle's elementwise ops on
    /// large tensors use Candle's process-wide pool, sized by `CANDLE_NUM_THREADS` at
    /// first use (the example binaries set it from `--threads`).
    pub threads: usize,
    /// How the weights are held after load (f32, as stored, or int4 projections).
    pub weights: Weights,
    /// How the projections treat their input rows: exact f32 (the default, every bit of
    /// the contract) or the opt-in int8 mode (`--activations q8`, docs/spec/numbers.md
    /// "q8 activations"; still batch-, chunk- and thread-invariant).
    pub activations: tl_quant::Activations,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_batch_tokens: 2048,
            max_seqs: 8,
            prefill_chunk: 512,
            prefix_cache: PrefixCache::On,
            kv: KvConfig::default(),
            policy: SchedPolicy::Fcfs,
            threads: 0,
            weights: Weights::Native,
            activations: tl_quant::Activations::Exact,
        }
    }
}
