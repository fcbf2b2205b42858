//! `serve` / `tl serve`: an OpenAI-compatible server for a tl model.
//!
//! `serve --model PATH [--host 127.0.0.1] [--port 8080] [engine flags: --threads N --kv
//! f16-slab|q8-slab --kv-blocks N | --kv-memory MIB ...] [--max-batch-tokens N] [--max-seqs N]
//! [--max-queue N] [--api-key KEY] [--advertise-host HOST] [--pd-lease SECS]
//! [--pd-fetch-failure fail|recompute]`
//! The API key may come from the environment variable `TL_API_KEY` instead (kept out of
//! the process list).
//! Binds first and answers 503 while the model loads; prints `listening on
//! http://HOST:PORT` once ready; SIGTERM or Ctrl-C stops it
//! (in-flight requests get `--shutdown-grace` seconds) with exit status 0.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use tl_families::flags::{EngineArgs, ModelArg};

use crate::{AppState, Options};

/// Serve a tl model over the OpenAI API.
#[derive(clap::Parser, Debug, Clone)]
#[command(name = "serve", version, about)]
pub struct ServeArgs {
    /// The model (MODEL or --model).
    #[command(flatten)]
    pub model: ModelArg,
    /// The model name clients send; defaults to the file or directory name (one model only).
    #[arg(long)]
    pub model_name: Option<String>,
    /// Serve every .gguf file and model directory in DIR too (each by its file or directory name).
    #[arg(long, value_name = "DIR")]
    pub models_dir: Option<PathBuf>,
    /// With several models: unload one after this many seconds without a request (0: never).
    #[arg(long, default_value_t = 0, value_name = "SECS")]
    pub keep_alive: u64,
    /// With several models: the most loaded at once; loading another unloads the least
    /// recently used idle one (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub models_max: usize,
    /// With several models: the most MiB the loaded models may hold together (weights and
    /// KV pools); loading another unloads least recently used idle ones (0: no limit).
    #[arg(long, default_value_t = 0, value_name = "MIB")]
    pub models_memory: u64,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port; 0 picks a free one (printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Most tokens in one step.
    #[arg(long, default_value_t = 512)]
    pub max_batch_tokens: usize,
    /// Most sequences running at once.
    #[arg(long, default_value_t = 64)]
    pub max_seqs: usize,
    /// Longest prefill piece per sequence and step.
    #[arg(long, default_value_t = 256)]
    pub prefill_chunk: usize,
    /// Most sequences waiting; more get 503 with Retry-After.
    #[arg(long, default_value_t = 256)]
    pub max_queue: usize,
    /// Largest request body in bytes; more get 413.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_body: usize,
    /// Seconds in-flight requests may run on after SIGTERM / Ctrl-C.
    #[arg(long, default_value_t = 10)]
    pub shutdown_grace: u64,
    /// Require `Authorization: Bearer KEY` on every /v1 route.
    #[arg(long, env = "TL_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Largest request head (request line and headers) in bytes; more get 431.
    #[arg(long, default_value_t = 32 << 10)]
    pub max_header_bytes: usize,
    /// Seconds a client may take to send a request head, or idle between requests.
    #[arg(long, default_value_t = 30)]
    pub header_timeout: u64,
    /// Seconds a client may take to send a request body; then 408.
    #[arg(long, default_value_t = 30)]
    pub body_timeout: u64,
    /// Seconds one request may take, generation included; then 504 or a stream error.
    #[arg(long, default_value_t = 600)]
    pub request_timeout: u64,
    /// Seconds a write may stay blocked on a client that stopped reading; then the
    /// connection is closed and its sequences cancelled.
    #[arg(long, default_value_t = 30)]
    pub write_stall: u64,
    /// Connections open at once; more wait in the backlog until one closes.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// The host other servers should use for this one (a decode server fetching KV);
    /// default: the listening host (127.0.0.1 when listening on every interface).
    #[arg(long)]
    pub advertise_host: Option<String>,
    /// Seconds a prefill's KV is held for its decode server (then released).
    #[arg(long, default_value_t = 30)]
    pub pd_lease: u64,
    /// What a decode server does when the KV fetch fails: fail (502) or recompute.
    #[arg(long, default_value = "fail")]
    pub pd_fetch_failure: crate::replica::FetchFailure,
    /// Seconds a KV fetch from a prefill server may take.
    #[arg(long, default_value_t = 10)]
    pub pd_fetch_timeout: u64,
    /// Speculative decoding for requests that do not choose: off, ngram or ngram:K
    /// (prompt lookup, K drafted tokens per step, 1..=16), draft:PATH[:K] (a draft
    /// model of the same vocabulary), or mtp[:K] (the model's own multi-token-prediction
    /// head, e.g. Qwen3.5's; refused for a model without one). Output never changes.
    #[arg(long, env = "TL_SPECULATE", default_value = "off")]
    pub speculate: String,
    /// Drafts join a step only while it holds fewer rows (tokens) than this: past ~8 rows a
    /// CPU step pays for every row, so under load plain decoding is faster. 0: the default (8).
    #[arg(long, default_value_t = 0)]
    pub spec_step_rows: usize,
    /// A draft model's draft ends at the first token it gives less than this probability
    /// (0: draft every token asked for). Unsure tokens are cheaper left to plain decoding:
    /// a draft model's forward costs about a third of the model's step on a CPU.
    #[arg(long, default_value_t = tl_engine::SPEC_P_MIN)]
    pub spec_p_min: f32,
    /// Draft the K asked for on every step (under the adaptive pause rule) instead of the
    /// length this server's measured step costs and each request's acceptance make
    /// fastest, none where plain decoding is faster.
    #[arg(long)]
    pub spec_fixed_k: bool,
    /// How a thinking model's reasoning (`<think>`) is returned: deepseek (apart, as
    /// `reasoning_content`) or none (left in the answer).
    #[arg(long, default_value = "deepseek")]
    pub reasoning_format: crate::reasoning::ReasoningFormat,
    /// How /v1/embeddings and /v1/rerank pool the final hidden states: last, mean or cls.
    /// Default: what the model's sentence-transformers files (modules.json,
    /// 1_Pooling/config.json) declare, else last (with L2 normalisation).
    #[arg(long)]
    pub pooling: Option<tl_engine::Pooling>,
    /// A LoRA adapter requests may run under (repeatable): NAME=PATH or NAME=PATH@SCALE,
    /// PATH a PEFT directory or a GGUF adapter. A request picks it by `model: NAME`, or by
    /// llama.cpp's `lora: [{"id", "scale"}]` (ids in the order given here).
    #[arg(long = "lora", value_name = "NAME=PATH[@SCALE]")]
    pub loras: Vec<crate::lora::LoraSpec>,
    /// The most adapters kept loaded at once (0: no bound): the least recently used is
    /// unloaded to load another, and loaded again from its path when next asked for.
    #[arg(long, default_value_t = 0)]
    pub max_loras: usize,
    /// Keep full prompt-prefix KV blocks in this directory too (one subdirectory per
    /// model fingerprint and KV element type), so they are found again after an eviction
    /// or a restart. Bad files are refused and recomputed.
    #[arg(long)]
    pub kv_disk: Option<PathBuf>,
    /// The most GiB of block files --kv-disk keeps for this model (oldest out first).
    #[arg(long, default_value_t = 4.0)]
    pub kv_disk_max_gib: f64,
    /// The engine flags every model-loading command shares.
    #[command(flatten)]
    pub engine: EngineArgs,
}

impl ServeArgs {
    /// What the server is started with: the engine configuration (the shared engine flags
    /// plus this command's batch limits) and every other option.
    pub fn options(&self) -> anyhow::Result<Options> {
        self.options_for(self.model.path()?)
    }

    /// Every model this server serves: MODEL, each --model and --models-dir's entries.
    pub fn models(&self) -> anyhow::Result<Vec<PathBuf>> {
        let mut all: Vec<PathBuf> = self.model.all().into_iter().map(Path::to_path_buf).collect();
        if let Some(dir) = &self.models_dir {
            all.extend(crate::multi::models_in(dir)?);
        }
        Ok(all)
    }

    /// The options of one model (the shared flags, `model` set).
    pub fn options_for(&self, model: &Path) -> anyhow::Result<Options> {
        let mut engine = self.engine.engine()?;
        engine.max_batch_tokens = self.max_batch_tokens;
        engine.max_seqs = self.max_seqs;
        engine.prefill_chunk = self.prefill_chunk;
        let (speculate, draft_model) = speculate_flag(&self.speculate)?;
        Ok(Options {
            model: model.to_path_buf(),
            model_name: self.model_name.clone(),
            engine,
            max_queue: self.max_queue,
            max_body: self.max_body,
            shutdown_grace: Duration::from_secs(self.shutdown_grace),
            api_key: self.api_key.clone(),
            limits: crate::Limits {
                max_header_bytes: self.max_header_bytes,
                header_timeout: Duration::from_secs(self.header_timeout),
                body_timeout: Duration::from_secs(self.body_timeout),
                request_timeout: Duration::from_secs(self.request_timeout),
                write_stall: Duration::from_secs(self.write_stall),
                max_connections: self.max_connections as usize,
            },
            scale: crate::replica::ScaleOptions {
                advertise_host: self.advertise_host.clone(),
                pd_lease: Duration::from_secs(self.pd_lease),
                pd_fetch_failure: self.pd_fetch_failure,
                pd_fetch_timeout: Duration::from_secs(self.pd_fetch_timeout),
            },
            speculate: Some(speculate),
            draft_model,
            spec_step_rows: self.spec_step_rows,
            spec_p_min: self.spec_p_min,
            spec_costs: !self.spec_fixed_k,
            reasoning_format: self.reasoning_format,
            pooling: self.pooling,
            loras: self.loras.clone(),
            max_loras: self.max_loras,
            kv_disk: self.kv_disk.clone().map(|dir| crate::KvDisk {
                dir,
                max_bytes: (self.kv_disk_max_gib.max(0.0) * (1u64 << 30) as f64) as u64,
            }),
        })
    }

    /// Run the server until SIGTERM or Ctrl-C; an error is one line for stderr.
    pub fn run(&self) -> anyhow::Result<()> {
        let models = self.models()?;
        if models.len() > 1 {
            return self.run_several(models);
        }
        let opts = self.options()?;
        self.engine.size_candle_pool();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| anyhow::anyhow!("tokio runtime: {e}"))?;
        let grace = opts.shutdown_grace;
        let addr = format!("{}:{}", self.host, self.port);
        rt.block_on(async move {
            let listener =
                tokio::net::TcpListener::bind(&addr).await.map_err(|e| anyhow::anyhow!("bind {addr}: {e}"))?;
            let local = listener.local_addr()?;
            // Bound before loading, so that health checks read 503 (not refused) meanwhile.
            let load = tokio::task::spawn_blocking(move || AppState::load(&opts));
            let state = crate::replica::while_loading(&listener, load)
                .await
                .map_err(|e| anyhow::anyhow!("loading: {e}"))?
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let info = state.engine.info();
            let signals = Signals::register()?;
            println!(
                "listening on http://{local} (model {}, {} KV blocks of {} tokens, fingerprint {})",
                state.model_id, info.n_blocks, info.block_tokens, state.fingerprint
            );
            let sig = async move {
                signals.recv().await;
                // A client holding a connection open must not keep us past the grace period.
                tokio::spawn(async move {
                    tokio::time::sleep(grace + Duration::from_secs(5)).await;
                    eprintln!("connections still open after the grace period; exiting");
                    std::process::exit(0);
                });
            };
            crate::run(listener, state, sig).await.map_err(|e| anyhow::anyhow!("{e}"))
        })
    }
}

impl ServeArgs {
    /// Several models behind one endpoint (multi.rs): nothing loads until a request names
    /// a model.
    fn run_several(&self, models: Vec<PathBuf>) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.model_name.is_none(),
            "--model-name names one model; with several, each is called by its file or directory name"
        );
        let opts: Vec<Options> = models.iter().map(|m| self.options_for(m)).collect::<anyhow::Result<_>>()?;
        let first = &opts[0];
        let multi_opts = crate::multi::MultiOptions {
            keep_alive: (self.keep_alive > 0).then(|| Duration::from_secs(self.keep_alive)),
            models_max: self.models_max,
            models_memory: (self.models_memory > 0).then_some(self.models_memory << 20),
            api_key: first.api_key.clone(),
            max_body: first.max_body,
            limits: first.limits,
            grace: first.shutdown_grace,
        };
        let multi = crate::multi::Multi::new(opts, multi_opts).map_err(|e| anyhow::anyhow!("{e}"))?;
        self.engine.size_candle_pool();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| anyhow::anyhow!("tokio runtime: {e}"))?;
        let addr = format!("{}:{}", self.host, self.port);
        rt.block_on(async move {
            let listener =
                tokio::net::TcpListener::bind(&addr).await.map_err(|e| anyhow::anyhow!("bind {addr}: {e}"))?;
            let signals = Signals::register()?;
            println!("listening on http://{} ({} models, loaded on first use)", listener.local_addr()?, models.len());
            crate::multi::run(listener, multi, async move { signals.recv().await })
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))
        })
    }
}

/// The `serve` binary (and `tl serve`'s alias): parse, run, one line on failure.
pub fn main() -> ExitCode {
    let args: ServeArgs = tl_families::flags::parse_or_exit();
    match args.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => tl_families::flags::fail(e),
    }
}

/// SIGTERM and SIGINT, registered when made: before the server says it is listening, so
/// a signal that follows that line can never take the default action (instant death,
/// streams cut) in the moment before the async handler would first be polled.
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn register() -> anyhow::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let err = |e: std::io::Error| anyhow::anyhow!("signal handler: {e}");
            Ok(Signals {
                term: signal(SignalKind::terminate()).map_err(err)?,
                int: signal(SignalKind::interrupt()).map_err(err)?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    async fn recv(mut self) {
        #[cfg(unix)]
        tokio::select! { _ = self.term.recv() => {}, _ = self.int.recv() => {} }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        eprintln!("shutting down");
    }
}

/// `--speculate`: off, ngram[:K], mtp[:K], or draft:PATH[:K] (a trailing `:K` is read as K only
/// when it is a number, so a path may hold colons).
/// `--speculate`'s mode and, for `draft:MODEL[:K]`, the draft model.
pub fn speculate_flag(s: &str) -> anyhow::Result<(tl_engine::Speculation, Option<PathBuf>)> {
    let parse = |s: &str| s.parse::<tl_engine::Speculation>().map_err(|e| anyhow::anyhow!("--{e}"));
    let Some(rest) = s.strip_prefix("draft:") else {
        return Ok((parse(s)?, None));
    };
    let (path, k) = match rest.rsplit_once(':') {
        Some((p, k)) if !k.is_empty() && k.bytes().all(|c| c.is_ascii_digit()) => (p, k),
        _ => (rest, "4"),
    };
    anyhow::ensure!(!path.is_empty(), "--speculate draft:PATH[:K]: no path");
    Ok((parse(&format!("draft:{k}"))?, Some(PathBuf::from(path))))
}
