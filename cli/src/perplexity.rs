//! `tl perplexity` (and the deprecated `perplexity` alias): how well a model predicts a text file.
//!
//! `tl perplexity MODEL --file TEXT [--window N] [--max-windows K] [--weights f32|native|int4]`
//! The text is tokenized whole and cut into windows of N tokens; each window runs as one
//! fresh sequence, and every token after the first of its window is scored against the
//! model's prediction from the tokens before it. Perplexity = exp(mean negative log
//! likelihood). The logits of every position come from the final hidden states times the
//! LM head (the embedding matrix when tied), which stays floating point under int4.
//! `--score-from N` scores only the predictions made from position N of each window on,
//! as llama.cpp's llama-perplexity does with N = its context / 2 (so the two tools' numbers
//! compare: scripts/q8_perplexity.sh).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use tl_core::Tokenizer;
use tl_families::flags::{fail, parse_or_exit, EngineArgs, ModelArg};

/// Measure a model's perplexity on a text file.
#[derive(clap::Parser, Debug, Clone)]
#[command(name = "perplexity", version, about)]
pub struct PerplexityArgs {
    /// The model (MODEL or --model).
    #[command(flatten)]
    pub model: ModelArg,
    /// The text file to score.
    #[arg(long)]
    pub file: PathBuf,
    /// Tokens per window (each window is scored from scratch).
    #[arg(long, default_value_t = 512)]
    pub window: usize,
    /// Score at most this many windows (0 = all).
    #[arg(long, default_value_t = 0)]
    pub max_windows: usize,
    /// Score only the predictions from this position of each window on (llama-perplexity
    /// scores from its context / 2); 0 scores every token after the first.
    #[arg(long, default_value_t = 0)]
    pub score_from: usize,
    /// Score under a LoRA adapter.
    #[command(flatten)]
    pub lora: crate::LoraArg,
    /// The engine flags every model-loading command shares.
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Negative log likelihood of `next` under each row of `logits` `(T, V)`, summed.
fn nll(logits: &[f32], vocab: usize, next: &[u32]) -> f64 {
    let mut total = 0.0;
    for (row, &t) in logits.chunks(vocab).zip(next) {
        let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
        let sum: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
        total += max + sum.ln() - row[t as usize] as f64;
    }
    total
}

fn run(cli: &PerplexityArgs) -> anyhow::Result<()> {
    anyhow::ensure!(cli.window >= 2, "--window {}: need at least 2 tokens", cli.window);
    anyhow::ensure!(
        cli.score_from + 1 < cli.window,
        "--score-from {}: must leave a prediction in a window of {}",
        cli.score_from,
        cli.window
    );
    let text = std::fs::read_to_string(&cli.file).with_context(|| cli.file.display().to_string())?;
    let load = Instant::now();
    let model = cli.model.path()?;
    let mut runner = crate::load(&cli.engine, model)?;
    let adapter = cli.lora.load(&runner)?;
    let applied = adapter.as_ref().map(|(a, s)| tl_core::Applied { adapter: a, scale: *s });
    let load = load.elapsed();
    let cfg = runner.config().clone();
    if let Some(max) = cfg.max_position_embeddings {
        anyhow::ensure!(cli.window <= max, "--window {}: the model's context is {max} tokens", cli.window);
    }
    let tok = Tokenizer::load(&cfg).with_context(|| model.display().to_string())?;
    let ids = tok.encode(&text)?;
    anyhow::ensure!(ids.len() >= 2, "{}: fewer than 2 tokens to score", cli.file.display());

    let v = cfg.vocab_size;
    let mut windows: Vec<&[u32]> = ids.chunks(cli.window).filter(|w| w.len() >= cli.score_from + 2).collect();
    if cli.max_windows > 0 {
        windows.truncate(cli.max_windows);
    }
    let (mut total, mut scored, mut fed) = (0.0f64, 0usize, 0usize);
    let mut forward = Duration::ZERO;
    for w in &windows {
        let t0 = Instant::now();
        let logits = runner.score_with(w, applied)?; // (T, V)
        forward += t0.elapsed();
        fed += w.len();
        // Rows `score_from ..` predict tokens `score_from + 1 ..`; the last position
        // predicts past the window.
        let (from, rows) = (cli.score_from, w.len() - 1 - cli.score_from);
        total += nll(&logits.data[from * v..(from + rows) * v], v, &w[from + 1..]);
        scored += rows;
    }
    let ppl = (total / scored as f64).exp();
    let quant = &cli.engine.weights;
    println!(
        "perplexity {ppl:.4} over {scored} tokens ({} windows of up to {}), {quant}; forward {:.1} tok/s; load {:.1} s",
        windows.len(),
        cli.window,
        fed as f64 / forward.as_secs_f64().max(1e-9),
        load.as_secs_f64()
    );
    Ok(())
}

impl PerplexityArgs {
    /// Run the command.
    pub fn run(&self) -> anyhow::Result<()> {
        run(self)
    }
}

/// The `perplexity` alias binary's main.
pub fn main() -> ExitCode {
    match parse_or_exit::<PerplexityArgs>().run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}
