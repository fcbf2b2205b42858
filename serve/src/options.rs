//! The server's settings and why it could not start. A leaf: the state, the routes and
//! the binaries all read these.

use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;
use tl_core::EngineConfig;

use crate::reasoning::ReasoningFormat;

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
    pub scale: ScaleOptions,
    /// Speculative decoding for requests that do not choose (`--speculate`); `None` is
    /// off. Never changes an answer, only its speed (docs/serving.md).
    pub speculate: Option<tl_engine::Speculation>,
    /// A draft model of the same vocabulary for `draft` speculation (`--speculate
    /// draft:PATH`), loaded with `engine`'s settings and its own KV pool.
    pub draft_model: Option<PathBuf>,
    /// Drafts join a step only while it holds fewer rows than this (`--spec-step-rows`;
    /// 0: the engine's default, [`tl_engine::SPEC_STEP_ROWS`]).
    pub spec_step_rows: usize,
    /// A draft model's draft ends at a token it gives less than this probability
    /// (`--spec-p-min`, default [`tl_engine::SPEC_P_MIN`]; 0: never).
    pub spec_p_min: f32,
    /// Choose each draft's length from measured costs (`EngineOptions::spec_costs`;
    /// `--spec-fixed-k` turns it off).
    pub spec_costs: bool,
    /// How a thinking model's reasoning is returned (`--reasoning-format`).
    pub reasoning_format: ReasoningFormat,
    /// Prompt caches on disk (`--kv-disk DIR --kv-disk-max-gib N`): full prefix blocks
    /// kept under DIR, by fingerprint, found again after an eviction or a restart.
    pub kv_disk: Option<KvDisk>,
    /// How `/v1/embeddings` and `/v1/rerank` pool hidden states (`--pooling`); `None`:
    /// as the model's files say, else last-token (pooling.rs).
    pub pooling: Option<tl_engine::Pooling>,
    /// LoRA adapters loaded at start (`--lora NAME=PATH[@SCALE]`, lora.rs).
    pub loras: Vec<crate::lora::LoraSpec>,
    /// The most adapters kept loaded (`--max-loras`; 0: no bound): the least recently used
    /// is unloaded to load another, and loaded again when next asked for.
    pub max_loras: usize,
}

/// Where the disk cache keeps blocks and how much it may keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvDisk {
    /// The root directory (one subdirectory per fingerprint and KV element type).
    pub dir: PathBuf,
    /// The bound on this model's files, in bytes.
    pub max_bytes: u64,
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

/// How a failed or refused KV fetch on the decode side ends (vLLM's
/// `kv_load_failure_policy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FetchFailure {
    /// The request fails with 502 `kv_transfer_failed`.
    #[default]
    Fail,
    /// The decode server prefills the prompt itself (from its own prefix cache).
    Recompute,
}

impl std::str::FromStr for FetchFailure {
    type Err = String;
    fn from_str(s: &str) -> Result<FetchFailure, String> {
        match s {
            "fail" => Ok(FetchFailure::Fail),
            "recompute" => Ok(FetchFailure::Recompute),
            _ => Err(format!("pd-fetch-failure: {s:?} is not fail or recompute")),
        }
    }
}

/// Replica and P/D settings.
#[derive(Clone, Debug)]
pub struct ScaleOptions {
    /// The host other servers (a decode server fetching KV) should use for this one;
    /// `None`: the listening address (127.0.0.1 when it listens on every interface).
    pub advertise_host: Option<String>,
    /// How long a prefill's KV is held for its decode server.
    pub pd_lease: Duration,
    /// What a decode server does when the KV fetch fails.
    pub pd_fetch_failure: FetchFailure,
    /// Most time a KV fetch may take.
    pub pd_fetch_timeout: Duration,
}

impl Default for ScaleOptions {
    fn default() -> ScaleOptions {
        ScaleOptions {
            advertise_host: None,
            pd_lease: Duration::from_secs(30),
            pd_fetch_failure: FetchFailure::Fail,
            pd_fetch_timeout: Duration::from_secs(10),
        }
    }
}
