//! The model runner: a model directory, an architecture, a KV pool and a thread pool.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use thiserror::Error;

use crate::arch::{Architecture, BuildCtx, ForwardCtx, ForwardOutput, Model, ModelError};
use crate::batch::{ForwardBatch, Logits};
use crate::config::{ConfigError, ModelConfig};
use crate::encoder::{check_input, EncodeInput, Encoded, EncoderInfo};
use crate::engine::{EngineConfig, PrefixCache, Weights};
use crate::gguf::gguf_source;
use crate::kv::{KvBackend, KvElem, KvError, KvGeometry, KvSlabs, KvSpec, SharedPool, StateGeometry};
use crate::layout::{release_all, KvLayout, NO_BLOCK};
use crate::load;
use crate::registry::{self, RegistryError};
use crate::safetensors::SafeTensors;
use crate::weights::{DType, WeightError, WeightStore};

mod head;

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
    /// A draft head was asked of a model without one.
    #[error("{}: the checkpoint has no multi-token-prediction (MTP) head, or its architecture offers none", .0.display())]
    NoDraftHead(PathBuf),
    /// A LoRA adapter refused (unreadable, or not for this model).
    #[error(transparent)]
    Adapter(#[from] crate::adapter::AdapterError),
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
    /// The model's KV geometry (every layer); the pool's pages hold `layout`'s groups.
    geometry: KvGeometry,
    layout: KvLayout,
    /// Bytes of the recurrent-state slots the pool allocated (0 without recurrent layers).
    state_bytes: usize,
}

/// Open the weights of a model directory (model.safetensors, else model.gguf), or of a
/// `.gguf` file (read as its architecture names its tensors).
pub fn open_weights(dir: &Path) -> Result<Box<dyn WeightStore>, RunnerError> {
    if dir.is_file() && dir.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
        return Ok(Box::new(load::gguf_weights(dir)?.0));
    }
    let st = dir.join("model.safetensors");
    if st.is_file() {
        return Ok(Box::new(SafeTensors::open(&st)?));
    }
    let gguf = dir.join("model.gguf");
    if gguf.is_file() {
        return Ok(Box::new(load::gguf_weights(&gguf)?.0));
    }
    Err(RunnerError::NoWeights(dir.to_path_buf()))
}

/// Whether the int8-activation mode can change this model's numbers under `weights`:
/// some tensor is held in a format with an integer kernel (numbers.md "q8 activations").
/// Where none is (f32/f16/bf16 weights, `--weights f32`), every layer runs the exact path
/// in either mode, bit for bit. Conservative: any such tensor counts, projection or not.
pub fn activations_matter(model: &Path, weights: &Weights) -> Result<bool, RunnerError> {
    let store = match weights {
        Weights::F32 => return Ok(false),
        Weights::Int4 { .. } => return Ok(true),
        Weights::Native => open_weights(model)?,
    };
    let int8 = |dtype: DType| match dtype {
        DType::U8 => true, // tl's packed int4
        DType::Other(name) => tl_quant::Format::from_ggml_name(&name).is_some_and(tl_quant::Format::has_int8_kernel),
        DType::F32 | DType::F16 | DType::BF16 => false,
    };
    Ok(store.names().iter().any(|n| store.info(n).is_some_and(|i| int8(i.dtype))))
}

/// Pages in the pool: `n_blocks` blocks of every layer (G pages each) when given, else
/// what the memory budget buys, at most what `max_seqs` full contexts would hold.
fn pool_blocks(
    page: &KvGeometry,
    groups: usize,
    elem: KvElem,
    cfg: &ModelConfig,
    engine: &EngineConfig,
) -> Result<u32, RunnerError> {
    if let Some(n) = engine.kv.n_blocks {
        return Ok((n as usize).saturating_mul(groups).min(u32::MAX as usize) as u32);
    }
    let per_block = page.block_bytes_of(elem).ok_or_else(|| KvError::Overflow { what: "block size".into() })?.max(1);
    let ctx = cfg.max_position_embeddings.unwrap_or(4096);
    let b = page.block_tokens.max(1) as usize;
    let wanted = engine.max_seqs.max(1).saturating_mul(ctx.div_ceil(b)).saturating_mul(groups);
    let budget = engine.kv.memory_bytes / per_block;
    Ok(wanted.min(budget).clamp(1, u32::MAX as usize) as u32)
}

/// State slots for a hybrid model: what `max_seqs` sequences hold at their peak (the
/// previous step's last row, a prefill step's snapshot rows and its last row), and, with
/// the prefix cache on, as many cached snapshots as the KV memory budget buys again; a
/// given block count (tests, tools) gets a slot per block row, as tables allocated whole
/// with a snapshot on every row hold.
fn state_slots(layout: &KvLayout, g: StateGeometry, engine: &EngineConfig) -> u32 {
    if let Some(n) = engine.kv.n_blocks {
        return n.max(1);
    }
    let b = engine.kv.block_tokens.max(1) as usize;
    let per_step = engine.prefill_chunk.max(1).div_ceil(b * layout.snapshot_every()) + 3;
    let live = engine.max_seqs.max(1).saturating_mul(per_step);
    let slot = g.slot_bytes().unwrap_or(usize::MAX).max(1);
    let cached = if engine.prefix_cache == PrefixCache::On { engine.kv.memory_bytes / slot } else { 0 };
    live.saturating_add(cached).clamp(1, u32::MAX as usize) as u32
}

/// The KV geometry of every layer, the page layout and the recurrent layers a decoder's
/// architecture declares.
fn kv_plan(
    arch: &dyn Architecture,
    config: &ModelConfig,
    cfg: &EngineConfig,
) -> Result<(KvGeometry, KvLayout, Option<crate::arch::Recurrent>), RunnerError> {
    let model_geometry = arch.kv_geometry(config, cfg.kv.block_tokens)?;
    let recurrent = arch.recurrent(config)?;
    let shared = arch.kv_shared(config)?;
    let layout = match arch.kv_windows(config)? {
        Some(w) if w.len() != model_geometry.n_layers as usize => {
            return Err(RunnerError::Other(format!(
                "the architecture gave {} layer windows for {} layers",
                w.len(),
                model_geometry.n_layers
            )))
        }
        Some(w) => {
            KvLayout::with_shared(&w, recurrent.as_ref().map_or(&[], |r| &r.layers), shared.as_deref().unwrap_or(&[]))?
        }
        None => match (&recurrent, &shared) {
            (None, None) => KvLayout::uniform(model_geometry.n_layers),
            (r, s) => KvLayout::with_shared(
                &vec![None; model_geometry.n_layers as usize],
                r.as_ref().map_or(&[], |r| &r.layers),
                s.as_deref().unwrap_or(&[]),
            )?,
        },
    };
    Ok((model_geometry, layout, recurrent))
}

impl ModelRunner {
    /// Load `dir` (config.json + weights) with the architecture named by `tl_arch` and the
    /// KV backend named in `cfg.kv.backend`. `dir` may also be a `.gguf` file, or a
    /// directory holding `model.gguf` (config from its metadata when config.json is absent).
    pub fn load(dir: &Path, cfg: &EngineConfig) -> Result<Self, RunnerError> {
        crate::weights::bound_heap();
        let built = if let Some(file) = gguf_source(dir) {
            let (store, json) = load::open_gguf(&file)?;
            let (config, arch) = load::gguf_config(&store, json)?;
            Self::build(config, arch.as_ref(), &store, cfg)
        } else {
            let (config, arch) = load::load_config(dir)?;
            let weights = open_weights(dir)?;
            Self::build(config, arch.as_ref(), weights.as_ref(), cfg)
        };
        crate::weights::steady_heap();
        built
    }

    /// Build a runner from an already parsed config (its typed part is not parsed again)
    /// and an open weight store.
    pub fn from_parts(config: ModelConfig, weights: &dyn WeightStore, cfg: &EngineConfig) -> Result<Self, RunnerError> {
        crate::weights::bound_heap();
        let arch = load::architecture(&config)?;
        let built = Self::build(config, arch.as_ref(), weights, cfg);
        crate::weights::steady_heap();
        built
    }

    fn build(
        config: ModelConfig,
        arch: &dyn Architecture,
        weights: &dyn WeightStore,
        cfg: &EngineConfig,
    ) -> Result<Self, RunnerError> {
        // A nested checkpoint's text model, named as its text-only checkpoint (crate::nested).
        let text_weights;
        let weights: &dyn WeightStore = match config.nested {
            Some(reg) => {
                text_weights = crate::nested::TextWeights::new(weights, reg)?;
                &text_weights
            }
            None => weights,
        };
        let encoder = arch.is_encoder(&config);
        let (model_geometry, layout, recurrent) = if encoder {
            // An encoder keeps nothing between calls: the smallest pool the backend
            // builds stands in for the KV pool the runner's interface hands out.
            let g = KvGeometry { n_layers: 1, n_kv_heads: 1, head_dim: 1, block_tokens: cfg.kv.block_tokens.max(1) };
            (g, KvLayout::uniform(1), None)
        } else {
            kv_plan(arch, &config, cfg)?
        };
        let b = cfg.kv.block_tokens.max(1) as usize;
        let layout = layout.with_snapshots(cfg.kv.state_snapshot_tokens / b);
        // Pool pages hold one group's layers (all of them without windows).
        let geometry = layout.page_geometry(model_geometry);
        let make = registry::kv_backend(&cfg.kv.backend)?.make;
        let prefix_cache = cfg.prefix_cache == PrefixCache::On;
        // A memory budget buys blocks by the backend's bytes per block (a q8 pool holds
        // about twice the f16 positions); a one-block pool tells its element type.
        let elem = match cfg.kv.n_blocks {
            _ if encoder => KvElem::F16, // unused: one block
            Some(_) => KvElem::F16,      // unused: the block count is given
            None => make(&KvSpec { geometry, n_blocks: 1, prefix_cache, state: None })?.elem(),
        };
        let n_blocks = if encoder { 1 } else { pool_blocks(&geometry, layout.n_page_groups(), elem, &config, cfg)? };
        let state = recurrent.map(|r| {
            let g = StateGeometry { n_layers: r.layers.len() as u32, floats: r.floats };
            (g, state_slots(&layout, g, cfg))
        });
        let spec = KvSpec { geometry, n_blocks, prefix_cache, state };
        let pool: Box<dyn KvBackend> = make(&spec)?;
        if state.is_some() && pool.state_geometry() != state.map(|s| s.0) {
            return Err(RunnerError::Other(format!(
                "KV backend {:?} holds no recurrent-state slots of {:?}, which this hybrid model needs",
                cfg.kv.backend,
                state.map(|s| s.0)
            )));
        }
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
        if encoder != model.encoder().is_some() {
            return Err(RunnerError::Other(format!(
                "architecture {:?} declares encoder = {encoder} but built a model that {} an encoder",
                config.arch,
                if encoder { "is not" } else { "is" }
            )));
        }
        Ok(ModelRunner {
            config,
            engine: cfg.clone(),
            model,
            pool: Arc::new(Mutex::new(pool)),
            threads,
            geometry: model_geometry,
            layout,
            state_bytes: state.map_or(0, |(g, n)| g.slot_bytes().unwrap_or(0).saturating_mul(n as usize)),
        })
    }

    /// Read the LoRA adapter at `path` (a PEFT directory or a GGUF adapter file) and bind
    /// it to this model under `name`: every module it adapts must be one the model
    /// offers ([`Model::adaptable`]), with matching shapes; else refused, naming the tensor.
    pub fn load_adapter(&self, name: &str, path: &Path) -> Result<crate::adapter::Adapter, RunnerError> {
        Ok(self.adapter_loader().load(name, path)?)
    }

    /// What loads adapters for this model once the runner has been handed to an engine
    /// (a server loading adapters at run time).
    pub fn adapter_loader(&self) -> crate::adapter_read::AdapterLoader {
        crate::adapter_read::AdapterLoader { config: self.config.clone(), targets: self.model.adaptable() }
    }

    /// Run one step; one row of logits per sequence (its last token).
    pub fn forward(&mut self, batch: &ForwardBatch) -> Result<Logits, RunnerError> {
        Ok(self.step(batch, false, false, None)?.logits)
    }

    /// Run one step; one row of logits per token of the step, in batch order. Each row
    /// has the bits that token's row has in any other batch or chunking.
    pub fn forward_all(&mut self, batch: &ForwardBatch) -> Result<Logits, RunnerError> {
        Ok(self.step(batch, false, true, None)?.logits)
    }

    /// Run one step; logits for the last `tails[i]` tokens of sequence `i` (each in
    /// `1..=len`), in batch order: `tails.iter().sum()` rows. Each row has the bits that
    /// token's row has in any other batch or chunking (a speculative verify step).
    pub fn forward_tails(&mut self, batch: &ForwardBatch, tails: &[usize]) -> Result<Logits, RunnerError> {
        if tails.len() != batch.seqs.len() {
            return Err(RunnerError::BadBatch(format!("{} tails for {} sequences", tails.len(), batch.seqs.len())));
        }
        for (i, (&t, s)) in tails.iter().zip(&batch.seqs).enumerate() {
            if t == 0 || t > s.tokens.len() {
                return Err(RunnerError::BadBatch(format!(
                    "sequence {i}: {t} logit rows asked of {} tokens",
                    s.tokens.len()
                )));
            }
        }
        Ok(self.step(batch, false, false, Some(tails))?.logits)
    }

    /// Run one step, also returning every token's final hidden state.
    pub fn forward_hidden(&mut self, batch: &ForwardBatch) -> Result<ForwardOutput, RunnerError> {
        self.step(batch, true, false, None)
    }

    /// [`ModelRunner::forward_tails`] (or, with `tails` `None`, [`ModelRunner::forward`])
    /// that also returns every token's final hidden state: a serving step in which an
    /// embedding sequence pools its rows beside sequences that sample (or verify drafts).
    pub fn forward_tails_hidden(
        &mut self,
        batch: &ForwardBatch,
        tails: Option<&[usize]>,
    ) -> Result<ForwardOutput, RunnerError> {
        if let Some(t) = tails {
            if t.len() != batch.seqs.len() || t.iter().zip(&batch.seqs).any(|(&t, s)| t == 0 || t > s.tokens.len()) {
                return Err(RunnerError::BadBatch(format!("{} tails for {} sequences", t.len(), batch.seqs.len())));
            }
        }
        self.step(batch, true, false, tails)
    }

    /// [`ModelRunner::forward_tails_hidden`] (hidden states only with `want_hidden`) that
    /// also keeps, for a model with recurrent layers, each sequence's state after its
    /// last positions in the slots `spares` names ([`ForwardCtx::spares`]): a verify step
    /// that may roll the state back to any of them.
    pub fn forward_spares(
        &mut self,
        batch: &ForwardBatch,
        tails: Option<&[usize]>,
        want_hidden: bool,
        spares: &[&[u32]],
    ) -> Result<ForwardOutput, RunnerError> {
        if let Some(t) = tails {
            if t.len() != batch.seqs.len() || t.iter().zip(&batch.seqs).any(|(&t, s)| t == 0 || t > s.tokens.len()) {
                return Err(RunnerError::BadBatch(format!("{} tails for {} sequences", t.len(), batch.seqs.len())));
            }
        }
        if spares.len() > batch.seqs.len() {
            return Err(RunnerError::BadBatch(format!(
                "spares for {} of {} sequences",
                spares.len(),
                batch.seqs.len()
            )));
        }
        self.run_step(batch, (want_hidden, false, tails), spares, &[])
    }

    fn step(
        &self,
        batch: &ForwardBatch,
        want_hidden: bool,
        all_logits: bool,
        tails: Option<&[usize]>,
    ) -> Result<ForwardOutput, RunnerError> {
        self.run_step(batch, (want_hidden, all_logits, tails), &[], &[])
    }

    fn run_step(
        &self,
        batch: &ForwardBatch,
        (want_hidden, all_logits, tails): (bool, bool, Option<&[usize]>),
        spares: &[&[u32]],
        given: &[f32],
    ) -> Result<ForwardOutput, RunnerError> {
        if self.model.encoder().is_some() {
            return Err(RunnerError::BadBatch("the model is an encoder: it answers encode, not forward steps".into()));
        }
        let mut guard = self.pool.lock().map_err(|_| RunnerError::Other("KV pool lock poisoned".into()))?;
        let kv: &mut dyn KvBackend = guard.as_mut();
        self.check_batch(batch, kv)?;
        self.check_spares(batch, kv, spares)?;
        let model = self.model.as_ref();
        let slabs: &mut dyn KvSlabs = &mut *kv;
        let mut ctx = ForwardCtx { kv: slabs, want_hidden, all_logits, tails, layout: &self.layout, spares, given };
        let out = self.threads.install(|| model.forward(batch, &mut ctx))?;
        let rows = match tails {
            _ if all_logits => batch.n_tokens(),
            Some(t) => t.iter().sum(),
            None => batch.seqs.len(),
        };
        if out.logits.vocab != self.config.vocab_size || out.logits.data.len() != rows * out.logits.vocab {
            return Err(RunnerError::Other(format!(
                "the model returned {} logits of rows of {}, expected {rows} rows of {}",
                out.logits.data.len(),
                out.logits.vocab,
                self.config.vocab_size
            )));
        }
        // Record how many slots of each written block now hold data (kv.md's fill), so
        // a prefix cache can register full blocks.
        let b = kv.geometry().block_tokens as usize;
        let n = self.layout.n_groups();
        for s in &batch.seqs {
            let end = s.start + s.tokens.len();
            for (r, row) in s.blocks.chunks_exact(n).enumerate().take(end.div_ceil(b)).skip(s.start / b) {
                let upto = (end - r * b).min(b) as u32;
                for &id in row.iter().filter(|&&id| id != NO_BLOCK) {
                    if kv.fill(id)? < upto {
                        kv.set_fill(id, upto)?;
                    }
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
            let n = self.layout.n_groups();
            if s.blocks.len() < needed * n {
                return bad(format!(
                    "sequence {i}: {} blocks ({n} per row) hold {} positions, the step reaches position {}",
                    s.blocks.len(),
                    s.blocks.len() / n * b,
                    end - 1
                ));
            }
            for (e, &id) in s.blocks[..needed * n].iter().enumerate() {
                // A windowed group's page may be given back once the step's first query
                // (and so every later one) no longer sees it.
                if id == NO_BLOCK && e / n < self.layout.first_live_row(e % n, s.start, b) {
                    continue;
                }
                // A state column's rows inside the step need no slot but the last (the
                // running state): a row without one keeps no snapshot (kv.md).
                if id == NO_BLOCK
                    && Some(e % n) == self.layout.state_column()
                    && e / n >= s.start / b
                    && e / n + 1 != needed
                {
                    continue;
                }
                if id == NO_BLOCK || kv.refs(id)? == 0 {
                    return bad(format!("sequence {i}: block {id} is not allocated (ref 0)"));
                }
            }
            for &id in s.blocks[s.start / b * n..needed * n].iter().filter(|&&id| id != NO_BLOCK) {
                if written.contains(&id) {
                    return bad(format!("block {id} is written by two sequences of the step"));
                }
                written.push(id);
            }
        }
        Ok(())
    }

    /// Spare state slots must be allocated slots, fewer than the sequence's step tokens,
    /// and written by nothing else in the step.
    fn check_spares(&self, batch: &ForwardBatch, kv: &dyn KvBackend, spares: &[&[u32]]) -> Result<(), RunnerError> {
        let bad = |s: String| Err(RunnerError::BadBatch(s));
        if spares.iter().all(|s| s.is_empty()) {
            return Ok(());
        }
        if self.layout.state_column().is_none() {
            return bad("spare state slots for a model without recurrent layers".into());
        }
        let mut seen: Vec<u32> = Vec::new();
        for (i, (sp, s)) in spares.iter().zip(&batch.seqs).enumerate() {
            if sp.len() >= s.tokens.len() {
                return bad(format!("sequence {i}: {} spare slots for a step of {} tokens", sp.len(), s.tokens.len()));
            }
            for &id in sp.iter() {
                if id == NO_BLOCK || kv.refs(id)? == 0 || s.blocks.contains(&id) || seen.contains(&id) {
                    return bad(format!("sequence {i}: spare slot {id} is not a free-standing allocated slot"));
                }
                seen.push(id);
            }
        }
        Ok(())
    }

    /// What the model declares as an encoder, or `None` for a decoder.
    pub fn encoder_info(&self) -> Option<&EncoderInfo> {
        self.model.encoder().map(|e| e.info())
    }

    /// Encode whole inputs with an encoder model (docs/spec/encoders.md): one [`Encoded`]
    /// per input, in order, hidden states only with `want_hidden`. Each input's outputs
    /// are the same bits alone or beside any others, on any number of threads. Refused
    /// before the model runs: a decoder, no inputs, an empty input, one longer than
    /// [`EncoderInfo::max_tokens`], an id out of the vocabulary, a bad type id.
    pub fn encode(&self, inputs: &[EncodeInput<'_>], want_hidden: bool) -> Result<Vec<Encoded>, RunnerError> {
        let enc = self
            .model
            .encoder()
            .ok_or_else(|| RunnerError::BadBatch(format!("{}: not an encoder model", self.config.arch)))?;
        let info = enc.info();
        if inputs.is_empty() {
            return Err(RunnerError::BadBatch("encode: no inputs".into()));
        }
        for (i, input) in inputs.iter().enumerate() {
            if let Some(why) = check_input(input, info, self.config.vocab_size) {
                return Err(RunnerError::BadBatch(format!("input {i}: {why}")));
            }
        }
        let out = self.threads.install(|| enc.encode(inputs, want_hidden))?;
        // The architecture's promise, checked so a mistake is an error, not a wrong answer.
        let bad = out.len() != inputs.len()
            || out.iter().zip(inputs).any(|(o, input)| {
                o.hidden.as_ref().map(Vec::len) != want_hidden.then(|| input.ids.len() * info.hidden_size)
                    || o.vector.as_ref().map(Vec::len) != info.vector
                    || o.scores.as_ref().map(Vec::len) != info.scores
            });
        if bad {
            return Err(RunnerError::Other(format!(
                "{}: the encoder's outputs do not have the shapes it declared ({info:?})",
                self.config.arch
            )));
        }
        Ok(out)
    }

    /// Run `tokens` as one sequence in temporary blocks, give the blocks back, and return
    /// the final hidden states `(T, d)` and the last token's logits.
    pub fn run_once(&mut self, tokens: &[u32]) -> Result<(Vec<f32>, Vec<f32>), RunnerError> {
        if tokens.is_empty() {
            return Err(RunnerError::BadBatch("run_once: no tokens".into()));
        }
        let blocks = self.alloc_table(tokens.len())?;
        let out = self.step(&ForwardBatch::single(tokens, 0, &blocks), true, false, None);
        release_all(self.lock()?.as_mut(), blocks)?;
        let out = out?;
        let hidden = out.hidden.ok_or_else(|| RunnerError::Other("the model returned no hidden states".into()))?;
        Ok((hidden, out.logits.data))
    }

    /// Run `tokens` as one sequence in temporary blocks, give the blocks back, and return
    /// the logits of every position `(T, V)` (row `t` predicts token `t + 1`).
    pub fn score(&mut self, tokens: &[u32]) -> Result<Logits, RunnerError> {
        self.score_with(tokens, None)
    }

    /// [`ModelRunner::score`] under `adapter` (a LoRA adapter and its scale).
    pub fn score_with(
        &mut self,
        tokens: &[u32],
        adapter: Option<crate::adapter::Applied<'_>>,
    ) -> Result<Logits, RunnerError> {
        if tokens.is_empty() {
            return Err(RunnerError::BadBatch("score: no tokens".into()));
        }
        let blocks = self.alloc_table(tokens.len())?;
        let mut batch = ForwardBatch::single(tokens, 0, &blocks);
        batch.seqs[0].adapter = adapter;
        let out = self.step(&batch, false, true, None);
        release_all(self.lock()?.as_mut(), blocks)?;
        Ok(out?.logits)
    }

    /// The KV block geometry the model runs with (every layer, KV heads, head size, B);
    /// a pool page holds one group of [`ModelRunner::kv_layout`]'s layers.
    pub fn kv_geometry(&self) -> Result<KvGeometry, RunnerError> {
        Ok(self.geometry)
    }

    /// Which page of a block-table row holds which layer, and the groups' windows.
    pub fn kv_layout(&self) -> &KvLayout {
        &self.layout
    }

    /// Block-table entries for `positions` positions: G entries (pages, and a hybrid
    /// model's state slot) per `B` positions.
    pub fn table_len(&self, positions: usize) -> usize {
        positions.div_ceil(self.block_tokens().max(1)) * self.layout.n_groups()
    }

    /// A fresh block table for `positions` positions: every entry allocated (pages, and
    /// state slots for a hybrid model's state column).
    pub fn alloc_table(&self, positions: usize) -> Result<Vec<u32>, RunnerError> {
        let mut table = Vec::new();
        self.layout.alloc_entries(self.lock()?.as_mut(), &mut table, self.table_len(positions))?;
        Ok(table)
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
        let per_block = pool
            .geometry()
            .block_bytes_of(pool.elem())
            .ok_or_else(|| KvError::Overflow { what: "block size".into() })?;
        Ok(per_block.saturating_mul(pool.n_blocks() as usize))
    }

    /// Bytes the recurrent-state slots reserve (a hybrid model's; 0 otherwise), allocated
    /// once at load beside the KV pool's pages.
    pub fn state_pool_bytes(&self) -> usize {
        self.state_bytes
    }

    /// Hidden size of the rows `run_once` returns.
    pub fn hidden_size(&self) -> usize {
        self.model.hidden_size()
    }
}
