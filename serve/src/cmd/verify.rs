//! `verify` / `tl verify`: show that a seeded request's answer depends on nothing but the request.
//!
//! `verify --model PATH (--prompt TEXT | --messages JSON | --request FILE) [--seed 1]
//! [--max-tokens 32] [--temperature T --top-p P --top-k K --min-p M --repetition-penalty R
//! --presence-penalty P --frequency-penalty F --stop S] [--threads N] [--batches 2,4,..]
//! [--chunks 1,7,64] [--co-seed 0] [--lora NAME=PATH[@SCALE]]...`: the request alone (the
//! reference), then in batches with random co-requests, with other prefill chunkings, with
//! 1..N threads, after prefix-cache hits, under preemption, with speculative decoding and,
//! with `--lora`, in a step with co-requests under other adapters. One line per
//! condition: `identical`, `DIFFERS at` where it first departs (token index, the two ids,
//! the logprob difference), or `not exercised (why)` when the condition did not happen (a
//! prompt no longer than a chunk, nothing preempted, nothing drafted, nothing cached); the
//! last line counts the three.
//!
//! `verify --model PATH --replay FILE [--lora NAME=PATH[@SCALE]]...`: rerun a saved `{"request", "response"}` pair of
//! `serve` (same `system_fingerprint`) and compare the `choices` bytes (a `/v1/messages`
//! answer: its content blocks and stop reason).
//!
//! Exit status: 0 nothing differs (a condition not exercised is no difference), 1 a
//! difference, 2 an error (one line on stderr).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{json, Value};
use tl_families::flags::{EngineArgs, ModelArg};

use crate::verify::replay::Replay;
use crate::verify::{summary, Outcome, Setup, Verdict, Verifier, VerifyError};

/// Prove a tl model's answers do not depend on batching, chunking, threads, the prefix
/// cache or preemption.
#[derive(clap::Parser, Debug, Clone)]
#[command(name = "verify", version, about)]
pub struct VerifyArgs {
    /// The model (MODEL or --model).
    #[command(flatten)]
    pub model: ModelArg,
    /// A completion prompt (special tokens parsed, as /v1/completions does).
    #[arg(long, conflicts_with_all = ["messages", "request", "replay"])]
    pub prompt: Option<String>,
    /// Chat messages as JSON, e.g. '[{"role": "user", "content": "Hi"}]'.
    #[arg(long, conflicts_with_all = ["request", "replay"])]
    pub messages: Option<String>,
    /// A serve request body (JSON file): any field serve reads; flags given beside it win.
    #[arg(long, conflicts_with = "replay")]
    pub request: Option<PathBuf>,
    /// A saved {"request": ..., "response": ...} pair of serve to reproduce.
    #[arg(long)]
    pub replay: Option<PathBuf>,
    /// With --replay of an embeddings or rerank request: the pooling the server ran with
    /// (`serve --pooling`); default, as serve: what the model's files declare.
    #[arg(long, requires = "replay")]
    pub pooling: Option<tl_engine::Pooling>,
    /// A LoRA adapter, as serve's `--lora` (repeatable). The target runs under the one the
    /// request names (`model` or `lora`), else the first; a condition runs it among
    /// co-requests under the others, its own at half scale and none. With --replay: the
    /// server's adapters.
    #[arg(long = "lora", value_name = "NAME=PATH[@SCALE]")]
    pub loras: Vec<crate::lora::LoraSpec>,
    /// The seed.
    #[arg(long)]
    pub seed: Option<i64>,
    /// Most tokens to generate (default 32 unless the request body says).
    #[arg(long)]
    pub max_tokens: Option<i64>,
    /// Sampling temperature [0, 2].
    #[arg(long)]
    pub temperature: Option<f64>,
    /// Nucleus mass (0, 1].
    #[arg(long)]
    pub top_p: Option<f64>,
    /// Keep the k best (0 = off).
    #[arg(long)]
    pub top_k: Option<i64>,
    /// Min-p [0, 1].
    #[arg(long)]
    pub min_p: Option<f64>,
    /// Hugging Face repetition penalty (0, 10].
    #[arg(long)]
    pub repetition_penalty: Option<f64>,
    /// OpenAI presence penalty [-2, 2].
    #[arg(long)]
    pub presence_penalty: Option<f64>,
    /// OpenAI frequency penalty [-2, 2].
    #[arg(long)]
    pub frequency_penalty: Option<f64>,
    /// A stop string (repeatable, at most 4).
    #[arg(long)]
    pub stop: Vec<String>,
    /// Batch sizes to try, comma-separated.
    #[arg(long, default_value = "2,4,8,16,32,64", value_delimiter = ',')]
    pub batches: Vec<usize>,
    /// Step budgets (max_batch_tokens = prefill chunk) to try, comma-separated.
    #[arg(long, default_value = "1,7,64", value_delimiter = ',')]
    pub chunks: Vec<usize>,
    /// Seed of the random co-requests.
    #[arg(long, default_value_t = 0)]
    pub co_seed: u64,
    /// The reference's step budget.
    #[arg(long, default_value_t = 512)]
    pub max_batch_tokens: usize,
    /// The reference's longest prefill piece.
    #[arg(long, default_value_t = 256)]
    pub prefill_chunk: usize,
    /// The engine flags (replay: as serve ran). `--threads` is the reference's; the
    /// conditions also try 1..N. Each condition sizes its own KV pool.
    /// The engine flags every model-loading command shares.
    #[command(flatten)]
    pub engine: EngineArgs,
}

impl VerifyArgs {
    /// The reference run's engine configuration: the shared engine flags (threads 0 read
    /// as one per core), this command's step budget and prefill piece. With `--replay` the
    /// KV pool flags apply as serve's do; the conditions size their pools themselves.
    pub fn reference(&self) -> anyhow::Result<tl_core::EngineConfig> {
        let mut cfg = self.engine.engine()?;
        if self.replay.is_none() {
            self.engine.refuse_pool_size("verify")?;
        }
        cfg.threads = match cfg.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        cfg.max_batch_tokens = self.max_batch_tokens;
        cfg.prefill_chunk = self.prefill_chunk;
        Ok(cfg)
    }

    /// Run it: `Ok(true)` nothing differs, `Ok(false)` a difference; an error is one line.
    pub fn run(&self) -> anyhow::Result<bool> {
        let cfg = self.reference()?;
        let model = self.model.path()?.to_path_buf();
        self.engine.size_candle_pool();
        match &self.replay {
            Some(file) => replay(self, model, cfg, file),
            None => conditions(self, model, cfg).map_err(|e| anyhow::anyhow!("{e}")),
        }
    }
}

/// The `verify` binary (and `tl verify`): exit 0 nothing differs, 1 a difference, 2 an
/// error (one line on stderr).
pub fn main() -> ExitCode {
    let args: VerifyArgs = tl_families::flags::parse_or_exit();
    exit_code(args.run())
}

/// Verify's exit status for a run's outcome (2 for errors: 1 means "differs").
pub fn exit_code(out: anyhow::Result<bool>) -> ExitCode {
    match out {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            let _ = tl_families::flags::fail(e);
            ExitCode::from(2)
        }
    }
}

/// The request body the flags describe (over `--request`'s when given).
fn body(cli: &VerifyArgs) -> Result<Value, String> {
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

fn replay(cli: &VerifyArgs, model: PathBuf, engine: tl_core::EngineConfig, file: &Path) -> anyhow::Result<bool> {
    let r = Replay::open(file).map_err(|e| anyhow::anyhow!("{e}"))?;
    let opts = crate::Options {
        model,
        model_name: None,
        engine,
        max_queue: 16,
        max_body: usize::MAX >> 1,
        shutdown_grace: Duration::ZERO,
        api_key: None,
        limits: crate::Limits::default(),
        scale: crate::replica::ScaleOptions::default(),
        speculate: None,
        draft_model: None,
        spec_step_rows: 0,
        spec_p_min: tl_engine::SPEC_P_MIN,
        spec_costs: false,
        reasoning_format: Default::default(),
        kv_disk: None,
        loras: cli.loras.clone(),
        max_loras: 0,
        pooling: cli.pooling,
    };
    let out = r.run(file, opts).map_err(|e| anyhow::anyhow!("{e}"))?;
    match &out.outcome {
        Outcome::Identical => {
            println!("replay {}: identical ({}, fingerprint {})", file.display(), out.summary, r.fingerprint)
        }
        Outcome::Differs(d) => println!("replay {}: DEPARTS at {d} ({})", file.display(), out.summary),
        Outcome::NotExercised(why) => println!("replay {}: not exercised ({why})", file.display()),
    }
    Ok(!out.outcome.differs())
}

fn conditions(cli: &VerifyArgs, model: PathBuf, cfg: tl_core::EngineConfig) -> Result<bool, VerifyError> {
    let n = cfg.threads;
    let setup = Setup {
        model,
        threads: n,
        weights: cfg.weights,
        activations: cfg.activations,
        block_tokens: cfg.kv.block_tokens,
        kv_backend: cfg.kv.backend.clone(),
        max_batch_tokens: cfg.max_batch_tokens,
        prefill_chunk: cfg.prefill_chunk,
    };
    let body = body(cli).map_err(VerifyError::Request)?;
    let mut v = Verifier::new(setup, &body, cli.co_seed, &cli.loras)?;
    let (plen, seed, max) = (v.request().prompt.len(), v.request().seed as i64, v.request().max_tokens);
    let under = v.request().adapter.as_ref().map(|a| format!(", adapter {}@{}", a.adapter.name(), a.scale));
    let r = v.reference()?;
    println!(
        "reference: alone, {n} thread{}{}: {plen} prompt tokens, seed {seed}, {} of max {max} tokens, finish {}",
        if n == 1 { "" } else { "s" },
        under.unwrap_or_default(),
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
    if let Some(verdict) = v.among_adapters()? {
        show(verdict);
    }
    println!("{}", summary(&verdicts));
    Ok(!verdicts.iter().any(|v| v.outcome.differs()))
}
