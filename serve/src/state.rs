//! [`AppState`]: what every handler shares, loaded once at start. It lives here, not in
//! lib.rs, so a handler's module imports it without importing the crate root.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use tl_core::{ChatTemplate, EngineConfig, ModelRunner, Tokenizer};
use tl_engine::{Engine, EngineOptions};

use crate::metrics;
use crate::options::{Limits, Options, ScaleOptions, ServeError};
use crate::pd_node::Pd;
use crate::prompt;
use crate::reasoning::ReasoningFormat;
use crate::tools;

/// In-flight generation requests (vLLM's `server_load_metrics`): +1 when a completion
/// request arrives, -1 once its answer is ready (a JSON body) or its stream is sent or
/// dropped.
#[derive(Default)]
pub struct Load(pub(crate) AtomicUsize);

/// The model id clients send: `--model-name`, else the file's stem or the directory's name
/// (for a snapshot in Hugging Face's cache, `models--ORG--REPO/snapshots/COMMIT`, REPO).
pub(crate) fn model_id(opts: &Options) -> String {
    let hub_repo = || {
        let parent = opts.model.parent()?;
        let repo = parent.parent()?.file_name()?.to_str()?.strip_prefix("models--")?;
        (parent.file_name()? == "snapshots").then(|| repo.rsplit("--").next().unwrap_or(repo).to_string())
    };
    if opts.model.is_dir() {
        if let (None, Some(repo)) = (&opts.model_name, hub_repo()) {
            return repo;
        }
    }
    opts.model_name.clone().unwrap_or_else(|| {
        let stem = if opts.model.is_file() { opts.model.file_stem() } else { opts.model.file_name() };
        stem.map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned())
    })
}

/// What every handler shares.
pub struct AppState {
    /// The engine.
    pub engine: Engine,
    pub(crate) tok: Arc<Tokenizer>,
    pub(crate) template: ChatTemplate,
    /// How the template's model writes tool calls (tools.rs).
    pub(crate) tool_format: tools::Format,
    /// The model id of /v1/models.
    pub model_id: String,
    /// `system_fingerprint`.
    pub fingerprint: String,
    /// The metrics.
    pub metrics: Arc<metrics::Metrics>,
    pub(crate) max_body: usize,
    pub(crate) created: u64,
    pub(crate) grace: Duration,
    pub(crate) bos: Option<u32>,
    pub(crate) api_key: Option<Vec<u8>>,
    pub(crate) limits: Limits,
    pub(crate) scale: ScaleOptions,
    pub(crate) pd: Pd,
    pub(crate) load: Load,
    /// How a thinking model's reasoning is returned (reasoning.rs).
    pub(crate) reasoning: ReasoningFormat,
    /// Finished Responses answers, for `previous_response_id` (responses.rs).
    pub(crate) responses: crate::response_store::Store,
    /// How embeddings pool, and whether the model has a reranking head (pooling.rs).
    pub(crate) pooling: crate::pooling::ModelPooling,
    /// An encoder model's tokenizer and declaration (encoder.rs); `None` for a decoder.
    pub(crate) encoder: Option<crate::encoder_text::EncoderText>,
    /// Bytes the model holds: its weights (as the architecture reports them, else the
    /// files' size) plus its KV pool (and a draft model's); the multi-model front's budget.
    pub memory_bytes: u64,
    /// The LoRA adapters requests may run under (lora.rs).
    pub loras: crate::lora::Loras,
}

/// Bytes of a file, or of every file under a directory.
pub(crate) fn disk_bytes(p: &std::path::Path) -> u64 {
    match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => std::fs::read_dir(p).map_or(0, |rd| rd.flatten().map(|e| disk_bytes(&e.path())).sum()),
        Ok(m) => m.len(),
        Err(_) => 0,
    }
}

impl AppState {
    /// Load the model, start the engine.
    pub fn load(opts: &Options) -> Result<Arc<AppState>, ServeError> {
        if opts.api_key.as_deref().is_some_and(|k| k.trim().is_empty()) {
            return Err(ServeError::Config("the API key is empty".into()));
        }
        let fail = |e: &dyn std::fmt::Display| ServeError::Model { path: opts.model.clone(), reason: e.to_string() };
        let runner = ModelRunner::load(&opts.model, &opts.engine).map_err(|e| fail(&e))?;
        let held = |r: &ModelRunner, path: &std::path::Path| {
            let w = r.weight_bytes().map_or_else(|| disk_bytes(path), |b| b as u64);
            w + r.kv_pool_bytes().unwrap_or(0) as u64
        };
        let mut memory_bytes = held(&runner, &opts.model);
        let draft = match &opts.draft_model {
            None => None,
            Some(path) => {
                // The draft's K/V is never shared between sequences: no prefix cache.
                let cfg = EngineConfig { prefix_cache: tl_core::PrefixCache::Off, ..opts.engine.clone() };
                let r = ModelRunner::load(path, &cfg)
                    .map_err(|e| ServeError::Model { path: path.clone(), reason: e.to_string() })?;
                memory_bytes += held(&r, path);
                Some(r)
            }
        };
        // `--speculate mtp`: the model's own multi-token-prediction head, refused (naming the
        // file) when the checkpoint has none.
        let head = match opts.speculate {
            Some(tl_engine::Speculation::Mtp { .. }) => {
                Some(ModelRunner::load_draft_head(&opts.model, &opts.engine).map_err(|e| fail(&e))?)
            }
            _ => None,
        };
        let pooling = crate::pooling::ModelPooling::of(&opts.model, opts.pooling);
        let loras = crate::lora::Loras::new(runner.adapter_loader(), &opts.loras, opts.max_loras)
            .map_err(|reason| ServeError::Model { path: opts.model.clone(), reason })?;
        let encoder = match runner.encoder_info() {
            Some(&info) => {
                let texts = tl_core::encoder_text::Texts::load(runner.config()).map_err(|e| fail(&e))?;
                Some(crate::encoder_text::EncoderText { texts, info })
            }
            None => None,
        };
        let tok = Arc::new(Tokenizer::load(runner.config()).map_err(|e| fail(&e))?);
        let template = prompt::template_of(runner.config()).map_err(|e| fail(&e))?;
        let tool_format = tools::Format::of(&template);
        let bos = runner.config().bos_token_id;
        let fingerprint = tl_engine::fingerprint(&opts.model, &opts.engine)?;
        let metrics = Arc::new(metrics::Metrics::new());
        let observer: Arc<dyn tl_engine::Observer> = Arc::new(metrics::Feed(Arc::clone(&metrics)));
        let engine = Engine::start_with_drafters(
            runner,
            (draft, head),
            Arc::clone(&tok),
            EngineOptions {
                max_queue: opts.max_queue,
                observer: Some(observer),
                speculate: opts.speculate,
                spec_step_rows: opts.spec_step_rows,
                spec_p_min: opts.spec_p_min,
                spec_costs: opts.spec_costs,
                disk_cache: opts.kv_disk.as_ref().map(|d| tl_engine::DiskCacheConfig {
                    dir: d.dir.clone(),
                    max_bytes: d.max_bytes,
                    fingerprint: fingerprint.clone(),
                }),
            },
        )?;
        let model_id = model_id(opts);
        let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Ok(Arc::new(AppState {
            engine,
            tok,
            template,
            tool_format,
            model_id,
            fingerprint,
            metrics,
            max_body: opts.max_body,
            created,
            grace: opts.shutdown_grace,
            bos,
            api_key: opts.api_key.as_ref().map(|k| k.as_bytes().to_vec()),
            limits: opts.limits,
            scale: opts.scale.clone(),
            pd: Pd::new(),
            load: Load::default(),
            reasoning: opts.reasoning_format,
            responses: crate::response_store::Store::default(),
            pooling,
            encoder,
            memory_bytes,
            loras,
        }))
    }
}

impl AppState {
    /// A token's text (lossy UTF-8) and its bytes, for logprobs.
    pub(crate) fn token_text(&self, id: u32) -> (String, Vec<u8>) {
        let bytes = self.tok.decode_bytes(&[id]).unwrap_or_default();
        (String::from_utf8_lossy(&bytes).into_owned(), bytes)
    }
}
