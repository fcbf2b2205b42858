//! serve: an OpenAI-compatible server for a tl model.
//!
//! `serve --model PATH [--host 127.0.0.1] [--port 8080] [--threads N] [--kv f16-slab|q8-slab]
//! [--kv-blocks N | --kv-memory MIB] [--max-batch-tokens N] [--max-seqs N] [--max-queue N] [--api-key KEY]
//! [--advertise-host HOST] [--pd-lease SECS] [--pd-fetch-failure fail|recompute]`
//! The API key may come from the environment variable `TL_API_KEY` instead (kept out of
//! the process list).
//! Binds first and answers 503 while the model loads; prints `listening on
//! http://HOST:PORT` once ready; SIGTERM or Ctrl-C stops it
//! (in-flight requests get `--shutdown-grace` seconds) with exit status 0.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tl_core::{EngineConfig, KvConfig, Weights};
use tl_serve::{AppState, Options};

/// Serve a tl model over the OpenAI API.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// Model directory (config.json + weights) or a .gguf file.
    #[arg(long)]
    model: PathBuf,
    /// The model name clients send; defaults to the file or directory name.
    #[arg(long)]
    model_name: Option<String>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port; 0 picks a free one (printed).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Worker threads for the forward; 0 = one per core.
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// KV pool size in blocks (overrides --kv-memory).
    #[arg(long)]
    kv_blocks: Option<u32>,
    /// KV pool memory budget in MiB.
    #[arg(long, default_value_t = 256)]
    kv_memory: usize,
    /// Token positions per KV block.
    #[arg(long, default_value_t = 16)]
    block_tokens: u32,
    /// The registered KV backend: "f16-slab" (the default) or "q8-slab" (8-bit values
    /// with an f16 scale per position and head, about half the memory).
    #[arg(long, default_value = "f16-slab")]
    kv: String,
    /// Most tokens in one step.
    #[arg(long, default_value_t = 512)]
    max_batch_tokens: usize,
    /// Most sequences running at once.
    #[arg(long, default_value_t = 64)]
    max_seqs: usize,
    /// Longest prefill piece per sequence and step.
    #[arg(long, default_value_t = 256)]
    prefill_chunk: usize,
    /// Most sequences waiting; more get 503 with Retry-After.
    #[arg(long, default_value_t = 256)]
    max_queue: usize,
    /// Largest request body in bytes; more get 413.
    #[arg(long, default_value_t = 1 << 20)]
    max_body: usize,
    /// Seconds in-flight requests may run on after SIGTERM / Ctrl-C.
    #[arg(long, default_value_t = 10)]
    shutdown_grace: u64,
    /// Require `Authorization: Bearer KEY` on every /v1 route (or set TL_API_KEY).
    #[arg(long)]
    api_key: Option<String>,
    /// Largest request head (request line and headers) in bytes; more get 431.
    #[arg(long, default_value_t = 32 << 10)]
    max_header_bytes: usize,
    /// Seconds a client may take to send a request head, or idle between requests.
    #[arg(long, default_value_t = 30)]
    header_timeout: u64,
    /// Seconds a client may take to send a request body; then 408.
    #[arg(long, default_value_t = 30)]
    body_timeout: u64,
    /// Seconds one request may take, generation included; then 504 or a stream error.
    #[arg(long, default_value_t = 600)]
    request_timeout: u64,
    /// Seconds a write may stay blocked on a client that stopped reading; then the
    /// connection is closed and its sequences cancelled.
    #[arg(long, default_value_t = 30)]
    write_stall: u64,
    /// Connections open at once; more wait in the backlog until one closes.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// How weights are held: native, f32, int4 or int4:G.
    #[arg(long, default_value = "native")]
    weights: String,
    /// How projections treat their input rows: exact (the default) or q8 (int8 rows for
    /// the Q8_0/Q4_0/Q4_1/Q4_K/Q5_K/Q6_K/int4 weights; still the same bits in any batch).
    #[arg(long, default_value = "exact")]
    activations: String,
    /// The host other servers should use for this one (a decode server fetching KV);
    /// default: the listening host (127.0.0.1 when listening on every interface).
    #[arg(long)]
    advertise_host: Option<String>,
    /// Seconds a prefill's KV is held for its decode server (then released).
    #[arg(long, default_value_t = 30)]
    pd_lease: u64,
    /// What a decode server does when the KV fetch fails: fail (502) or recompute.
    #[arg(long, default_value = "fail")]
    pd_fetch_failure: tl_serve::replica::FetchFailure,
    /// Seconds a KV fetch from a prefill server may take.
    #[arg(long, default_value_t = 10)]
    pd_fetch_timeout: u64,
    /// Speculative decoding for requests that do not choose: off, ngram or ngram:K
    /// (prompt lookup, K drafted tokens per step, 1..=16), or draft:PATH[:K] (a draft
    /// model of the same vocabulary). Output never changes.
    #[arg(long, default_value = "off")]
    speculate: String,
    /// Drafts join a step only while it holds fewer rows (tokens) than this: past ~8 rows a
    /// CPU step pays for every row, so under load plain decoding is faster. 0: the default (8).
    #[arg(long, default_value_t = 0)]
    spec_step_rows: usize,
    /// How a thinking model's reasoning (`<think>`) is returned: deepseek (apart, as
    /// `reasoning_content`) or none (left in the answer).
    #[arg(long, default_value = "deepseek")]
    reasoning_format: tl_serve::reasoning::ReasoningFormat,
    /// How /v1/embeddings and /v1/rerank pool the final hidden states: last, mean or cls.
    /// Default: what the model's sentence-transformers files (modules.json,
    /// 1_Pooling/config.json) declare, else last (with L2 normalisation).
    #[arg(long)]
    pooling: Option<tl_engine::Pooling>,
    /// Keep full prompt-prefix KV blocks in this directory too (one subdirectory per
    /// model fingerprint and KV element type), so they are found again after an eviction
    /// or a restart. Bad files are refused and recomputed.
    #[arg(long)]
    kv_disk: Option<PathBuf>,
    /// The most GiB of block files --kv-disk keeps for this model (oldest out first).
    #[arg(long, default_value_t = 4.0)]
    kv_disk_max_gib: f64,
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
    fn register() -> Result<Signals, String> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let err = |e: std::io::Error| format!("signal handler: {e}");
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

fn run(cli: Cli) -> Result<(), String> {
    if cli.threads > 0 && std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        // Candle's own pool is sized from this at first use; set before any tensor exists
        // and while the process has one thread.
        std::env::set_var("CANDLE_NUM_THREADS", cli.threads.to_string());
    }
    let weights = cli.weights.parse::<Weights>().map_err(|e| format!("--{e}"))?;
    let activations = cli.activations.parse::<tl_core::Activations>().map_err(|e| format!("--{e}"))?;
    let (speculate, draft_model) = speculate_flag(&cli.speculate)?;
    let engine = EngineConfig {
        max_batch_tokens: cli.max_batch_tokens,
        max_seqs: cli.max_seqs,
        prefill_chunk: cli.prefill_chunk,
        threads: cli.threads,
        weights,
        activations,
        kv: KvConfig {
            block_tokens: cli.block_tokens,
            n_blocks: cli.kv_blocks,
            memory_bytes: cli.kv_memory << 20,
            backend: cli.kv.clone(),
            ..KvConfig::default()
        },
        ..EngineConfig::default()
    };
    let opts = Options {
        model: cli.model,
        model_name: cli.model_name,
        engine,
        max_queue: cli.max_queue,
        max_body: cli.max_body,
        shutdown_grace: Duration::from_secs(cli.shutdown_grace),
        api_key: cli.api_key.or_else(|| std::env::var("TL_API_KEY").ok()),
        limits: tl_serve::Limits {
            max_header_bytes: cli.max_header_bytes,
            header_timeout: Duration::from_secs(cli.header_timeout),
            body_timeout: Duration::from_secs(cli.body_timeout),
            request_timeout: Duration::from_secs(cli.request_timeout),
            write_stall: Duration::from_secs(cli.write_stall),
            max_connections: cli.max_connections as usize,
        },
        scale: tl_serve::replica::ScaleOptions {
            advertise_host: cli.advertise_host.clone(),
            pd_lease: Duration::from_secs(cli.pd_lease),
            pd_fetch_failure: cli.pd_fetch_failure,
            pd_fetch_timeout: Duration::from_secs(cli.pd_fetch_timeout),
        },
        speculate: Some(speculate),
        draft_model,
        spec_step_rows: cli.spec_step_rows,
        reasoning_format: cli.reasoning_format,
        pooling: cli.pooling,
        kv_disk: cli.kv_disk.clone().map(|dir| tl_serve::KvDisk {
            dir,
            max_bytes: (cli.kv_disk_max_gib.max(0.0) * (1u64 << 30) as f64) as u64,
        }),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let grace = opts.shutdown_grace;
    rt.block_on(async move {
        let addr = format!("{}:{}", cli.host, cli.port);
        let listener = tokio::net::TcpListener::bind(&addr).await.map_err(|e| format!("bind {addr}: {e}"))?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        // Bound before loading, so that health checks read 503 (not refused) meanwhile.
        let load = tokio::task::spawn_blocking(move || AppState::load(&opts));
        let state = tl_serve::replica::while_loading(&listener, load)
            .await
            .map_err(|e| format!("loading: {e}"))?
            .map_err(|e| e.to_string())?;
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
        tl_serve::run(listener, state, sig).await.map_err(|e| e.to_string())
    })
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            let text = e.to_string();
            eprintln!("{} (try --help)", text.lines().next().unwrap_or("bad arguments"));
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", e.replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

/// `--speculate`: off, ngram[:K], or draft:PATH[:K] (a trailing `:K` is read as K only
/// when it is a number, so a path may hold colons).
fn speculate_flag(s: &str) -> Result<(tl_engine::Speculation, Option<PathBuf>), String> {
    let Some(rest) = s.strip_prefix("draft:") else {
        return Ok((s.parse().map_err(|e| format!("--{e}"))?, None));
    };
    let (path, k) = match rest.rsplit_once(':') {
        Some((p, k)) if !k.is_empty() && k.bytes().all(|c| c.is_ascii_digit()) => (p, k),
        _ => (rest, "4"),
    };
    if path.is_empty() {
        return Err("--speculate draft:PATH[:K]: no path".into());
    }
    let spec: tl_engine::Speculation = format!("draft:{k}").parse().map_err(|e| format!("--{e}"))?;
    Ok((spec, Some(PathBuf::from(path))))
}
