//! tl-serve: an OpenAI-compatible HTTP server over [`tl_engine::Engine`].
//!
//! axum on tokio answers HTTP; the engine steps on its own thread; each request's
//! choices stream back through channels. docs/serving.md describes the API.
#![deny(missing_docs)]

// Link every plugin crate so their inventory registrations exist.
use tl_arch_bigram as _;
use tl_arch_gemma3 as _;
use tl_arch_gpt_oss as _;
use tl_arch_llama as _;
use tl_arch_mistral as _;
use tl_arch_mixtral as _;
use tl_arch_olmoe as _;
use tl_arch_qwen2 as _;
use tl_arch_qwen3 as _;
use tl_arch_qwen3_moe as _;
use tl_kv as _;
use tl_sampling as _;

pub mod api;
mod auth;
mod extra;
mod handlers;
pub mod metrics;
pub mod page;
mod pd;
pub mod prompt;
pub mod replica;
mod server;
pub mod structured;
pub mod tools;
pub mod verify;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;
use thiserror::Error;
use tl_core::{ChatTemplate, EngineConfig, ModelRunner, Tokenizer};
use tl_engine::{Engine, EngineOptions};

/// A template for models that ship none (the tiny test models): ChatML, as SmolLM2 uses.
pub const FALLBACK_TEMPLATE: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n\
     {% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// Why the server could not start.
#[derive(Debug, Error)]
pub enum ServeError {
    /// The model failed to load.
    #[error("{path}: {reason}")]
    Model {
        /// The model path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The engine failed to start.
    #[error(transparent)]
    Engine(#[from] tl_engine::EngineError),
    /// A setting is unusable.
    #[error("{0}")]
    Config(String),
    /// Binding or serving failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Server settings.
#[derive(Clone, Debug)]
pub struct Options {
    /// Model directory or .gguf file.
    pub model: PathBuf,
    /// The name clients use in `model`; defaults to the file or directory name.
    pub model_name: Option<String>,
    /// Runner settings (threads, pool, batch budget).
    pub engine: EngineConfig,
    /// Bound on waiting sequences.
    pub max_queue: usize,
    /// Largest request body in bytes (413 beyond).
    pub max_body: usize,
    /// How long in-flight requests may run on after a shutdown signal.
    pub shutdown_grace: Duration,
    /// When set, every `/v1` route needs `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// Limits against slow, stuck or oversized clients.
    pub limits: Limits,
    /// Replica and P/D settings (docs/scale-out.md).
    pub scale: replica::ScaleOptions,
    /// Speculative decoding for requests that do not choose (`--speculate`); `None` is
    /// off. Never changes an answer, only its speed (docs/serving.md).
    pub speculate: Option<tl_engine::Speculation>,
    /// A draft model of the same vocabulary for `draft` speculation (`--speculate
    /// draft:PATH`), loaded with `engine`'s settings and its own KV pool.
    pub draft_model: Option<PathBuf>,
    /// Drafts join a step only while it holds fewer rows than this (`--spec-step-rows`;
    /// 0: the engine's default, [`tl_engine::SPEC_STEP_ROWS`]).
    pub spec_step_rows: usize,
}

/// Limits against slow, stuck or oversized clients; all on by default
/// (docs/reliability.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest request head (request line and headers) in bytes; more get 431. At least
    /// 8192 (hyper's floor).
    pub max_header_bytes: usize,
    /// Time to send a request head, and most idle time between requests on a kept-alive
    /// connection; then the connection is closed.
    pub header_timeout: Duration,
    /// Time to send the request body after its head; then 408.
    pub body_timeout: Duration,
    /// Time one request may take in all, generation included; then 504, or an error
    /// event that ends the stream, and its sequences are cancelled.
    pub request_timeout: Duration,
    /// How long a write to a client may stay blocked (it stopped reading) before the
    /// connection is closed and its sequences cancelled.
    pub write_stall: Duration,
    /// Connections open at once; past it the server stops accepting (new ones wait in
    /// the kernel's backlog) until one closes, so a flood of idle connections cannot
    /// exhaust file descriptors or memory.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_header_bytes: 32 << 10,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(600),
            write_stall: Duration::from_secs(30),
            max_connections: 512,
        }
    }
}

/// What every handler shares.
pub struct AppState {
    /// The engine.
    pub engine: Engine,
    tok: Arc<Tokenizer>,
    template: ChatTemplate,
    /// How the template's model writes tool calls (tools.rs).
    tool_format: tools::Format,
    /// The model id of /v1/models.
    pub model_id: String,
    /// `system_fingerprint`.
    pub fingerprint: String,
    /// The metrics.
    pub metrics: Arc<metrics::Metrics>,
    max_body: usize,
    created: u64,
    grace: Duration,
    bos: Option<u32>,
    api_key: Option<Vec<u8>>,
    limits: Limits,
    scale: replica::ScaleOptions,
    pd: pd::Pd,
    load: replica::Load,
}

impl AppState {
    /// Load the model, start the engine.
    pub fn load(opts: &Options) -> Result<Arc<AppState>, ServeError> {
        if opts.api_key.as_deref().is_some_and(|k| k.trim().is_empty()) {
            return Err(ServeError::Config("the API key is empty".into()));
        }
        let fail = |e: &dyn std::fmt::Display| ServeError::Model { path: opts.model.clone(), reason: e.to_string() };
        let runner = ModelRunner::load(&opts.model, &opts.engine).map_err(|e| fail(&e))?;
        let draft = match &opts.draft_model {
            None => None,
            Some(path) => {
                // The draft's K/V is never shared between sequences: no prefix cache.
                let cfg = EngineConfig { prefix_cache: tl_core::PrefixCache::Off, ..opts.engine.clone() };
                let r = ModelRunner::load(path, &cfg)
                    .map_err(|e| ServeError::Model { path: path.clone(), reason: e.to_string() })?;
                Some(r)
            }
        };
        let tok = Arc::new(Tokenizer::load(runner.config()).map_err(|e| fail(&e))?);
        let template = prompt::template_of(runner.config()).map_err(|e| fail(&e))?;
        let tool_format = tools::Format::of(&template);
        let bos = runner.config().bos_token_id;
        let fingerprint = tl_engine::fingerprint(&opts.model, &opts.engine)?;
        let metrics = Arc::new(metrics::Metrics::new());
        let observer: Arc<dyn tl_engine::Observer> = Arc::new(metrics::Feed(Arc::clone(&metrics)));
        let engine = Engine::start_with_draft(
            runner,
            draft,
            Arc::clone(&tok),
            EngineOptions {
                max_queue: opts.max_queue,
                observer: Some(observer),
                speculate: opts.speculate,
                spec_step_rows: opts.spec_step_rows,
            },
        )?;
        let model_id = opts.model_name.clone().unwrap_or_else(|| {
            let stem = if opts.model.is_file() { opts.model.file_stem() } else { opts.model.file_name() };
            stem.map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned())
        });
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
            pd: pd::Pd::new(),
            load: replica::Load::default(),
        }))
    }
}

/// Every route. With an API key, every `/v1` path (unknown ones included), `/tokenize` and
/// `/detokenize` answer 401 without `Authorization: Bearer <key>`; `/health` and
/// `/metrics` stay open.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(handlers::chat))
        .route("/v1/completions", post(handlers::completions))
        .route("/v1/models", get(handlers::models))
        .route("/v1/models/{id}", get(extra::model))
        .route("/tokenize", post(extra::tokenize))
        .route("/detokenize", post(extra::detokenize))
        .route("/health", get(replica::health))
        .route("/load", get(replica::load))
        .route("/v1/kv/{id}", get(pd::kv))
        .route("/metrics", get(handlers::metrics))
        .merge(page::routes())
        .fallback(handlers::not_found)
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state), replica::track_load))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state), auth::require_key))
        .with_state(state)
}

/// Serve on `listener` until `signal` resolves; then stop accepting, let in-flight
/// requests finish for the grace period (the engine drops what is left), and return
/// once every connection is closed and the engine thread has exited. The [`Limits`]
/// apply to every connection.
pub async fn run(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    signal: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    state.pd.set_addr(state.scale.advertise_host.as_deref(), listener.local_addr()?);
    replica::spawn_lease_expiry(&state);
    server::serve(listener, Arc::clone(&state), signal).await?;
    let st = Arc::clone(&state);
    // join blocks until the engine thread exits; keep it off the async workers.
    let _ = tokio::task::spawn_blocking(move || st.engine.join()).await;
    Ok(())
}
