//! verify: show that a seeded request's answer depends on nothing but the request.
//!
//! `verify --model PATH (--prompt TEXT | --messages JSON | --request FILE) [--seed 1]
//! [--max-tokens 32] [--temperature T --top-p P --top-k K --min-p M --repetition-penalty R
//! --presence-penalty P --frequency-penalty F --stop S] [--threads N] [--batches 2,4,..]
//! [--chunks 1,7,64] [--co-seed 0]`: the request alone (the reference), then in batches
//! with random co-requests, with other prefill chunkings, with 1..N threads, after
//! prefix-cache hits, under preemption and with speculative decoding. One line per
//! condition: `identical`, `DIFFERS at` where it first departs (token index, the two ids,
//! the logprob difference), or `not exercised (why)` when the condition did not happen (a
//! prompt no longer than a chunk, nothing preempted, nothing drafted, nothing cached); the
//! last line counts the three.
//!
//! `verify --model PATH --replay FILE`: rerun a saved `{"request", "response"}` pair of
//! `serve` (same `system_fingerprint`) and compare the `choices` bytes (a `/v1/messages`
//! answer: its content blocks and stop reason).
//!
//! Exit status: 0 nothing differs (a condition not exercised is no difference), 1 a
//! difference, 2 an error (one line on stderr).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use serde_json::{json, Value};
use tl_core::{EngineConfig, KvConfig, Weights};
use tl_serve::verify::replay::Replay;
use tl_serve::verify::{summary, Outcome, Setup, Verdict, Verifier, VerifyError};

/// Prove a tl model's answers do not depend on batching, chunking, threads, the prefix
/// cache or preemption.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// Model directory (config.json + weights) or a .gguf file.
    #[arg(long)]
    model: PathBuf,
    /// A completion prompt (special tokens parsed, as /v1/completions does).
    #[arg(long, conflicts_with_all = ["messages", "request", "replay"])]
    prompt: Option<String>,
    /// Chat messages as JSON, e.g. '[{"role": "user", "content": "Hi"}]'.
    #[arg(long, conflicts_with_all = ["request", "replay"])]
    messages: Option<String>,
    /// A serve request body (JSON file): any field serve reads; flags given beside it win.
    #[arg(long, conflicts_with = "replay")]
    request: Option<PathBuf>,
    /// A saved {"request": ..., "response": ...} pair of serve to reproduce.
    #[arg(long)]
    replay: Option<PathBuf>,
    /// With --replay of an embeddings or rerank request: the pooling the server ran with
    /// (`serve --pooling`); default, as serve: what the model's files declare.
    #[arg(long, requires = "replay")]
    pooling: Option<tl_engine::Pooling>,
    /// The seed.
    #[arg(long)]
    seed: Option<i64>,
    /// Most tokens to generate (default 32 unless the request body says).
    #[arg(long)]
    max_tokens: Option<i64>,
    /// Sampling temperature [0, 2].
    #[arg(long)]
    temperature: Option<f64>,
    /// Nucleus mass (0, 1].
    #[arg(long)]
    top_p: Option<f64>,
    /// Keep the k best (0 = off).
    #[arg(long)]
    top_k: Option<i64>,
    /// Min-p [0, 1].
    #[arg(long)]
    min_p: Option<f64>,
    /// Hugging Face repetition penalty (0, 10].
    #[arg(long)]
    repetition_penalty: Option<f64>,
    /// OpenAI presence penalty [-2, 2].
    #[arg(long)]
    presence_penalty: Option<f64>,
    /// OpenAI frequency penalty [-2, 2].
    #[arg(long)]
    frequency_penalty: Option<f64>,
    /// A stop string (repeatable, at most 4).
    #[arg(long)]
    stop: Vec<String>,
    /// Forward threads of the reference; conditions also try 1..N (0 = one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Batch sizes to try, comma-separated.
    #[arg(long, default_value = "2,4,8,16,32,64", value_delimiter = ',')]
    batches: Vec<usize>,
    /// Step budgets (max_batch_tokens = prefill chunk) to try, comma-separated.
    #[arg(long, default_value = "1,7,64", value_delimiter = ',')]
    chunks: Vec<usize>,
    /// Seed of the random co-requests.
    #[arg(long, default_value_t = 0)]
    co_seed: u64,
    /// Token positions per KV block (every run uses the same).
    #[arg(long, default_value_t = 16)]
    block_tokens: u32,
    /// The reference's step budget.
    #[arg(long, default_value_t = 512)]
    max_batch_tokens: usize,
    /// The reference's longest prefill piece.
    #[arg(long, default_value_t = 256)]
    prefill_chunk: usize,
    /// How weights are held: native, f32, int4 or int4:G (replay: as serve ran).
    #[arg(long, default_value = "native")]
    weights: String,
    /// How projections treat their input rows: exact or q8 (replay: as serve ran).
    #[arg(long, default_value = "exact")]
    activations: String,
}

/// The request body the flags describe (over `--request`'s when given).
fn body(cli: &Cli) -> Result<Value, String> {
    let mut b = match &cli.request {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: cannot read it: {e}", p.display()))?;
            let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", p.display()))?;
            if !v.is_object() {
                return Err(format!("{}: a request body must be a JSON object", p.display()));
            }
            v
        }
        None => json!({}),
    };
    if let Some(p) = &cli.prompt {
        b["prompt"] = json!(p);
    }
    if let Some(m) = &cli.messages {
        b["messages"] = serde_json::from_str(m).map_err(|e| format!("--messages: not JSON: {e}"))?;
    }
    if b.get("prompt").is_none() && b.get("messages").is_none() {
        return Err("give --prompt, --messages or --request (or --replay)".into());
    }
    let mut set = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            b[k] = v;
        }
    };
    set("seed", cli.seed.map(|s| json!(s)));
    set("max_tokens", cli.max_tokens.map(|s| json!(s)));
    set("temperature", cli.temperature.map(|s| json!(s)));
    set("top_p", cli.top_p.map(|s| json!(s)));
    set("top_k", cli.top_k.map(|s| json!(s)));
    set("min_p", cli.min_p.map(|s| json!(s)));
    set("repetition_penalty", cli.repetition_penalty.map(|s| json!(s)));
    set("presence_penalty", cli.presence_penalty.map(|s| json!(s)));
    set("frequency_penalty", cli.frequency_penalty.map(|s| json!(s)));
    set("stop", (!cli.stop.is_empty()).then(|| json!(cli.stop)));
    if b.get("seed").is_none() {
        b["seed"] = json!(1);
    }
    if b.get("max_tokens").is_none() && b.get("max_completion_tokens").is_none() {
        b["max_tokens"] = json!(32);
    }
    b["stream"] = json!(false);
    Ok(b)
}

fn threads(cli: &Cli) -> usize {
    match cli.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// `--activations`, parsed.
fn activations(cli: &Cli) -> Result<tl_core::Activations, String> {
    cli.activations.parse().map_err(|e| format!("--{e}"))
}

fn replay(cli: &Cli, weights: Weights, file: &std::path::Path) -> Result<bool, String> {
    let r = Replay::open(file).map_err(|e| e.to_string())?;
    let opts = tl_serve::Options {
        model: cli.model.clone(),
        model_name: None,
        engine: EngineConfig {
            threads: threads(cli),
            weights,
            activations: activations(cli)?,
            kv: KvConfig { block_tokens: cli.block_tokens, ..KvConfig::default() },
            ..EngineConfig::default()
        },
        max_queue: 16,
        max_body: usize::MAX >> 1,
        shutdown_grace: Duration::ZERO,
        api_key: None,
        limits: tl_serve::Limits::default(),
        scale: tl_serve::replica::ScaleOptions::default(),
        speculate: None,
        draft_model: None,
        spec_step_rows: 0,
        reasoning_format: Default::default(),
        kv_disk: None,
        pooling: cli.pooling,
    };
    let out = r.run(file, opts).map_err(|e| e.to_string())?;
    match &out.outcome {
        Outcome::Identical => {
            println!("replay {}: identical ({}, fingerprint {})", file.display(), out.summary, r.fingerprint)
        }
        Outcome::Differs(d) => println!("replay {}: DEPARTS at {d} ({})", file.display(), out.summary),
        Outcome::NotExercised(why) => println!("replay {}: not exercised ({why})", file.display()),
    }
    Ok(!out.outcome.differs())
}

fn conditions(cli: &Cli, weights: Weights) -> Result<bool, VerifyError> {
    let n = threads(cli);
    let setup = Setup {
        model: cli.model.clone(),
        threads: n,
        weights,
        activations: activations(cli).map_err(VerifyError::Request)?,
        block_tokens: cli.block_tokens,
        max_batch_tokens: cli.max_batch_tokens,
        prefill_chunk: cli.prefill_chunk,
    };
    let body = body(cli).map_err(VerifyError::Request)?;
    let mut v = Verifier::new(setup, &body, cli.co_seed)?;
    let (plen, seed, max) = (v.request().prompt.len(), v.request().seed as i64, v.request().max_tokens);
    let r = v.reference()?;
    println!(
        "reference: alone, {n} thread{}: {plen} prompt tokens, seed {seed}, {} of max {max} tokens, finish {}",
        if n == 1 { "" } else { "s" },
        r.tokens.len(),
        r.finish.as_str()
    );
    let mut verdicts: Vec<Verdict> = Vec::new();
    let mut show = |v: Verdict| {
        println!("{v}");
        verdicts.push(v);
    };
    for &b in cli.batches.iter().filter(|&&b| b >= 2) {
        show(v.batch(b)?);
    }
    for &c in &cli.chunks {
        show(v.chunking(c)?);
    }
    for t in 1..n {
        show(v.threads(t)?);
    }
    show(v.prefix_hit(false)?);
    show(v.prefix_hit(true)?);
    show(v.preemption()?);
    show(v.speculation(4)?);
    println!("{}", summary(&verdicts));
    Ok(!verdicts.iter().any(|v| v.outcome.differs()))
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
            eprintln!("{} (try --help)", e.to_string().lines().next().unwrap_or("bad arguments"));
            return ExitCode::from(2);
        }
    };
    let out = cli.weights.parse::<Weights>().map_err(|e| format!("--{e}")).and_then(|w| match &cli.replay {
        Some(file) => replay(&cli, w, file),
        None => conditions(&cli, w).map_err(|e| e.to_string()),
    });
    match out {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {}", e.replace('\n', " "));
            ExitCode::from(2)
        }
    }
}
