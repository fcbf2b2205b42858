//! A model's own draft head ([`Architecture::draft_head`]: Qwen3.5's multi-token
//! prediction) as a runner of its own: the head's model over its own KV pool (its
//! attention layers' K/V per sequence, apart from the target's), so the engine drafts with
//! it as it drafts with a second model (engine/src/mtp.rs).

use std::path::Path;
use std::sync::{Arc, Mutex};

use super::{pool_blocks, ModelRunner, RunnerError};
use crate::arch::{Architecture, BuildCtx, ForwardOutput};
use crate::batch::ForwardBatch;
use crate::config::ModelConfig;
use crate::engine::EngineConfig;
use crate::gguf::gguf_source;
use crate::kv::{KvBackend, KvElem, KvSpec};
use crate::layout::KvLayout;
use crate::load;
use crate::registry;
use crate::weights::WeightStore;

impl ModelRunner {
    /// Load the draft head of the model at `dir` (a model directory or `.gguf` file, as
    /// [`ModelRunner::load`] reads it), with its own KV pool of `cfg.kv`'s backend and
    /// block size (`cfg.kv.n_blocks` blocks when given, else what the memory budget buys).
    /// A model without a head is [`RunnerError::NoDraftHead`].
    pub fn load_draft_head(dir: &Path, cfg: &EngineConfig) -> Result<ModelRunner, RunnerError> {
        crate::weights::bound_heap();
        let built = if let Some(file) = gguf_source(dir) {
            let (store, json) = load::open_gguf(&file)?;
            let (config, arch) = load::gguf_config(&store, json)?;
            Self::build_head(config, arch.as_ref(), &store, cfg)
        } else {
            let (config, arch) = load::load_config(dir)?;
            let weights = super::open_weights(dir)?;
            Self::build_head(config, arch.as_ref(), weights.as_ref(), cfg)
        };
        crate::weights::steady_heap();
        built
    }

    fn build_head(
        config: ModelConfig,
        arch: &dyn Architecture,
        weights: &dyn WeightStore,
        cfg: &EngineConfig,
    ) -> Result<ModelRunner, RunnerError> {
        let threads = rayon::ThreadPoolBuilder::new()
            .num_threads(cfg.threads)
            .build()
            .map_err(|e| RunnerError::Other(format!("thread pool: {e}")))?;
        let device = candle_core::Device::Cpu;
        let ctx = BuildCtx { config: &config, weights, engine: cfg, device: &device };
        let head = threads
            .install(|| arch.draft_head(ctx))?
            .ok_or_else(|| RunnerError::NoDraftHead(weights.path().to_path_buf()))?;
        let geometry = head.kv;
        if geometry.block_tokens != cfg.kv.block_tokens || geometry.n_layers == 0 {
            return Err(RunnerError::Other(format!(
                "the draft head's KV geometry {geometry:?} does not fit blocks of {} tokens",
                cfg.kv.block_tokens
            )));
        }
        let layout = KvLayout::uniform(geometry.n_layers);
        let make = registry::kv_backend(&cfg.kv.backend)?.make;
        let elem = match cfg.kv.n_blocks {
            Some(_) => KvElem::F16, // unused: the block count is given
            None => make(&KvSpec { geometry, n_blocks: 1, prefix_cache: false, state: None })?.elem(),
        };
        let n_blocks = pool_blocks(&geometry, 1, elem, &config, cfg)?;
        // No prefix cache: the head's K/V of a position depends on the target's hidden
        // state there, which a cached block of tokens does not carry.
        let pool: Box<dyn KvBackend> = make(&KvSpec { geometry, n_blocks, prefix_cache: false, state: None })?;
        if pool.geometry() != geometry {
            return Err(RunnerError::Other(format!(
                "KV backend {:?} built geometry {:?}, the draft head needs {:?}",
                cfg.kv.backend,
                pool.geometry(),
                geometry
            )));
        }
        Ok(ModelRunner {
            config,
            engine: cfg.clone(),
            model: head.model,
            pool: Arc::new(Mutex::new(pool)),
            threads,
            geometry,
            layout,
            state_bytes: 0,
        })
    }

    /// One step of a draft head: `given` `(N, hidden_size)` holds, per token of the batch
    /// in batch order, the target's final hidden state at the position before it. Returns
    /// each sequence's last token's logits and every token's final hidden state (the head's
    /// own, which the next chained draft is given).
    pub fn forward_given(&mut self, batch: &ForwardBatch, given: &[f32]) -> Result<ForwardOutput, RunnerError> {
        let want = batch.n_tokens().saturating_mul(self.hidden_size());
        if given.len() != want {
            return Err(RunnerError::BadBatch(format!(
                "{} given values for {} tokens of hidden size {}",
                given.len(),
                batch.n_tokens(),
                self.hidden_size()
            )));
        }
        self.run_step(batch, (true, false, None), &[], given)
    }
}
