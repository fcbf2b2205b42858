//! The model runner: a model directory, an architecture, a KV pool and a thread pool.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use thiserror::Error;

use crate::arch::{BuildCtx, ForwardCtx, ForwardOutput, Model, ModelError};
use crate::batch::{ForwardBatch, Logits};
use crate::config::{ConfigError, ModelConfig};
use crate::gguf::{gguf_source, Gguf};
use crate::kv::{KvBackend, KvError, KvGeometry, KvSpec, SharedPool};
use crate::registry::{self, RegistryError};
use crate::safetensors::SafeTensors;
use crate::weights::{WeightError, WeightStore};

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
    /// Blocks in the pool; `None` sizes the pool from `memory_bytes`.
    pub n_blocks: Option<u32>,
    /// Memory budget for the pool when `n_blocks` is `None`.
    pub memory_bytes: usize,
}

impl Default for KvConfig {
    fn default() -> Self {
        KvConfig { backend: "f16-slab".into(), block_tokens: 16, n_blocks: None, memory_bytes: 256 << 20 }
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
        }
    }
}

/// Why the runner could not load or run.
#[derive(Debug, Error)]
pub enum RunnerError {
    /// config.json refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A weight file refused.
    #[error(transparent)]
    Weights(#[from] WeightError),
    /// An unknown plugin name.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The KV pool refused.
    #[error(transparent)]
    Kv(#[from] KvError),
    /// The model failed to build or run.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A batch the runner refuses before touching the pool.
    #[error("bad batch: {0}")]
    BadBatch(String),
    /// No weights file in the model directory.
    #[error("{}: no model.safetensors or model.gguf in the model directory", .0.display())]
    NoWeights(PathBuf),
    /// Anything else (thread pool creation, a poisoned lock).
    #[error("{0}")]
    Other(String),
}

/// Loads a model directory and runs forward steps over a shared KV pool.
pub struct ModelRunner {
    config: ModelConfig,
    engine: EngineConfig,
    model: Box<dyn Model>,
    pool: SharedPool,
    threads: rayon::ThreadPool,
}

/// Open the weights of a model directory (model.safetensors, else model.gguf), or of a
/// `.gguf` file.
pub fn open_weights(dir: &Path) -> Result<Box<dyn WeightStore>, RunnerError> {
    if dir.is_file() && dir.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
        return Ok(Box::new(Gguf::open(dir)?));
    }
    let st = dir.join("model.safetensors");
    if st.is_file() {
        return Ok(Box::new(SafeTensors::open(&st)?));
    }
    let gguf = dir.join("model.gguf");
    if gguf.is_file() {
        return Ok(Box::new(Gguf::open(&gguf)?));
    }
    Err(RunnerError::NoWeights(dir.to_path_buf()))
}

fn pool_blocks(geometry: &KvGeometry, cfg: &ModelConfig, engine: &EngineConfig) -> Result<u32, RunnerError> {
    if let Some(n) = engine.kv.n_blocks {
        return Ok(n);
    }
    let per_block = geometry.block_bytes().ok_or_else(|| KvError::Overflow { what: "block size".into() })?.max(1);
    let ctx = cfg.max_position_embeddings.unwrap_or(4096);
    let b = geometry.block_tokens.max(1) as usize;
    let wanted = engine.max_seqs.max(1).saturating_mul(ctx.div_ceil(b));
    let budget = engine.kv.memory_bytes / per_block;
    Ok(wanted.min(budget).clamp(1, u32::MAX as usize) as u32)
}

impl ModelRunner {
    /// Load `dir` (config.json + weights) with the architecture named by `tl_arch` and the
    /// KV backend named in `cfg.kv.backend`. `dir` may also be a `.gguf` file, or a
    /// directory holding `model.gguf` (config from its metadata when config.json is absent).
    pub fn load(dir: &Path, cfg: &EngineConfig) -> Result<Self, RunnerError> {
        if let Some(file) = gguf_source(dir) {
            let store = Gguf::open(&file)?;
            let config = store.model_config()?;
            return Self::from_parts(config, &store, cfg);
        }
        let config = ModelConfig::load(dir)?;
        let weights = open_weights(dir)?;
        Self::from_parts(config, weights.as_ref(), cfg)
    }

    /// Build a runner from an already parsed config and an open weight store.
    pub fn from_parts(config: ModelConfig, weights: &dyn WeightStore, cfg: &EngineConfig) -> Result<Self, RunnerError> {
        let arch = (registry::architecture(&config.arch)?.make)();
        let geometry = arch.kv_geometry(&config, cfg.kv.block_tokens)?;
        let n_blocks = pool_blocks(&geometry, &config, cfg)?;
        let spec = KvSpec { geometry, n_blocks, prefix_cache: cfg.prefix_cache == PrefixCache::On };
        let pool: Box<dyn KvBackend> = (registry::kv_backend(&cfg.kv.backend)?.make)(&spec)?;
        if pool.geometry() != geometry {
            return Err(RunnerError::Other(format!(
                "KV backend {:?} built geometry {:?}, the model needs {:?}",
                cfg.kv.backend,
                pool.geometry(),
                geometry
            )));
        }
        let threads = rayon::ThreadPoolBuilder::new()
            .num_threads(cfg.threads)
            .build()
            .map_err(|e| RunnerError::Other(format!("thread pool: {e}")))?;
        let device = candle_core::Device::Cpu;
        let model =
            threads.install(|| arch.build(BuildCtx { config: &config, weights, engine: cfg, device: &device }))?;
        Ok(ModelRunner { config, engine: cfg.clone(), model, pool: Arc::new(Mutex::new(pool)), threads })
    }

    /// Run one step; one row of logits per sequence (its last token).
    pub fn forward(&mut self, batch: &ForwardBatch) -> Result<Logits, RunnerError> {
        Ok(self.step(batch, false)?.logits)
    }

    /// Run one step, also returning every token's final hidden state.
    pub fn forward_hidden(&mut self, batch: &ForwardBatch) -> Result<ForwardOutput, RunnerError> {
        self.step(batch, true)
    }

    fn step(&self, batch: &ForwardBatch, want_hidden: bool) -> Result<ForwardOutput, RunnerError> {
        let mut guard = self.pool.lock().map_err(|_| RunnerError::Other("KV pool lock poisoned".into()))?;
        let kv: &mut dyn KvBackend = guard.as_mut();
        self.check_batch(batch, kv)?;
        let model = self.model.as_ref();
        let out = self.threads.install(|| model.forward(batch, &mut ForwardCtx { kv, want_hidden }))?;
        // Record how many slots of each written block now hold data (kv.md's fill), so
        // a prefix cache can register full blocks.
        let b = kv.geometry().block_tokens as usize;
        for s in &batch.seqs {
            let end = s.start + s.tokens.len();
            for (k, &id) in s.blocks.iter().enumerate().take(end.div_ceil(b)).skip(s.start / b) {
                let upto = (end - k * b).min(b) as u32;
                if kv.fill(id)? < upto {
                    kv.set_fill(id, upto)?;
                }
            }
        }
        Ok(out)
    }

    /// Refuse a batch before any slab is touched: every rule here is one the forward
    /// relies on, so a scheduler's mistake surfaces as an `Err`, never as corrupt KV.
    fn check_batch(&self, batch: &ForwardBatch, kv: &dyn KvBackend) -> Result<(), RunnerError> {
        let bad = |s: String| Err(RunnerError::BadBatch(s));
        if batch.seqs.is_empty() {
            return bad("no sequences".into());
        }
        let b = kv.geometry().block_tokens as usize;
        let vocab = self.config.vocab_size;
        let mut written: Vec<u32> = Vec::new();
        for (i, s) in batch.seqs.iter().enumerate() {
            if s.tokens.is_empty() {
                return bad(format!("sequence {i} has no tokens"));
            }
            if let Some(&t) = s.tokens.iter().find(|&&t| t as usize >= vocab) {
                return bad(format!("sequence {i}: token id {t} >= vocab_size {vocab}"));
            }
            let end = s.start.saturating_add(s.tokens.len());
            if let Some(max) = self.config.max_position_embeddings {
                if end > max {
                    return bad(format!(
                        "sequence {i}: positions {}..{end} pass max_position_embeddings {max}",
                        s.start
                    ));
                }
            }
            let needed = end.div_ceil(b);
            if s.blocks.len() < needed {
                return bad(format!(
                    "sequence {i}: {} blocks hold {} positions, the step reaches position {}",
                    s.blocks.len(),
                    s.blocks.len() * b,
                    end - 1
                ));
            }
            for &id in &s.blocks[..needed] {
                if kv.refs(id)? == 0 {
                    return bad(format!("sequence {i}: block {id} is not allocated (ref 0)"));
                }
            }
            for &id in &s.blocks[s.start / b..needed] {
                if written.contains(&id) {
                    return bad(format!("block {id} is written by two sequences of the step"));
                }
                written.push(id);
            }
        }
        Ok(())
    }

    /// Run `tokens` as one sequence in temporary blocks, give the blocks back, and return
    /// the final hidden states `(T, d)` and the last token's logits.
    pub fn run_once(&mut self, tokens: &[u32]) -> Result<(Vec<f32>, Vec<f32>), RunnerError> {
        if tokens.is_empty() {
            return Err(RunnerError::BadBatch("run_once: no tokens".into()));
        }
        let b = self.block_tokens();
        let blocks = self.lock()?.alloc(tokens.len().div_ceil(b))?;
        let out = self.step(&ForwardBatch::single(tokens, 0, &blocks), true);
        let mut pool = self.lock()?;
        for &id in &blocks {
            pool.release(id)?;
        }
        drop(pool);
        let out = out?;
        let hidden = out.hidden.ok_or_else(|| RunnerError::Other("the model returned no hidden states".into()))?;
        Ok((hidden, out.logits.data))
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Box<dyn KvBackend>>, RunnerError> {
        self.pool.lock().map_err(|_| RunnerError::Other("KV pool lock poisoned".into()))
    }

    /// The shared KV pool.
    pub fn pool(&self) -> SharedPool {
        Arc::clone(&self.pool)
    }

    /// Token positions per KV block.
    pub fn block_tokens(&self) -> usize {
        self.engine.kv.block_tokens as usize
    }

    /// The model's config.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The engine settings the runner was loaded with.
    pub fn engine(&self) -> &EngineConfig {
        &self.engine
    }

    /// Bytes the loaded weights take in memory, when the model reports it.
    pub fn weight_bytes(&self) -> Option<usize> {
        self.model.weight_bytes()
    }

    /// Bytes the KV pool reserves (every block's K and V slabs), allocated once at load.
    pub fn kv_pool_bytes(&self) -> Result<usize, RunnerError> {
        let pool = self.lock()?;
        let per_block = pool.geometry().block_bytes().ok_or_else(|| KvError::Overflow { what: "block size".into() })?;
        Ok(per_block.saturating_mul(pool.n_blocks() as usize))
    }

    /// Hidden size of the rows `run_once` returns.
    pub fn hidden_size(&self) -> usize {
        self.model.hidden_size()
    }
}
