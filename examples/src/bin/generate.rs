//! generate: run any tl model on a prompt and stream the continuation to stdout.
//!
//! `generate --model DIR --prompt TEXT [--max-tokens N] [sampling flags] [--seed S]`
//! A final line on stderr gives prompt and generated token counts and prefill/decode
//! speeds. The same seed gives the same tokens.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use tl_core::{registry, Tokenizer};
use tl_examples::{fail, parse_or_exit, EngineArgs, SamplingArgs};

/// Generate text with a tl model.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// Model directory (config.json + weights).
    #[arg(long)]
    model: PathBuf,
    /// The prompt text.
    #[arg(long, default_value = "")]
    prompt: String,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    engine: EngineArgs,
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let params = cli.sampling.params();
    let mut sampler = (registry::sampler(&cli.sampling.sampler)?.make)();
    let mut runner = cli.engine.load(&cli.model)?;
    let cfg = runner.config().clone();
    let tok = Tokenizer::load(&cfg).with_context(|| format!("{}", cli.model.display()))?;
    let mut prompt = tok.encode(&cli.prompt)?;
    if prompt.is_empty() {
        prompt.extend(cfg.bos_token_id);
    }
    anyhow::ensure!(!prompt.is_empty(), "empty prompt and the model has no bos_token_id to start from");

    let mut rng = tl_sampling::stream(cli.sampling.seed, tl_sampling::PURPOSE_SAMPLE);
    let mut seq = runner.sequence();
    let t0 = Instant::now();
    let mut logits = runner.feed(&mut seq, &prompt)?;
    let prefill = t0.elapsed();

    let mut out = std::io::stdout().lock();
    let mut stream = tok.stream();
    let mut output: Vec<u32> = Vec::new();
    let t1 = Instant::now();
    for step in 0..cli.max_tokens {
        let (id, _logprob) = sampler.sample(&logits, &params, &prompt, &output, &mut rng)?;
        if cfg.eos_token_ids.contains(&id) {
            break;
        }
        output.push(id);
        write!(out, "{}", stream.push(id)?)?;
        out.flush()?;
        if step + 1 < cli.max_tokens {
            logits = runner.feed(&mut seq, &[id])?;
        }
    }
    write!(out, "{}", stream.finish())?;
    writeln!(out)?;
    let decode = t1.elapsed();
    let rate = |n: usize, d: std::time::Duration| n as f64 / d.as_secs_f64().max(1e-9);
    eprintln!(
        "[prompt {} tokens, generated {} tokens; prefill {:.1} tok/s, decode {:.1} tok/s]",
        prompt.len(),
        output.len(),
        rate(prompt.len(), prefill),
        rate(output.len(), decode)
    );
    Ok(())
}

fn main() -> ExitCode {
    match run(parse_or_exit::<Cli>()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}
