//! bench: forward speed of a tl model on synthetic tokens.
//!
//! `bench --model DIR [--prompt-tokens N] [--decode-tokens N] [--batch B] [--repeats R]
//! [--threads T] [--weights f32|native|int4]` measures (a) prefill of one N-token prompt in one step,
//! (b) decode of one sequence, one token a step, after that prompt, and (c) decode of B
//! sequences together, one token each a step. Each is repeated R times after one untimed
//! warm-up; the table gives the median rate and the range.
//!
//! Token ids are synthetic (`i * 7919 % vocab`): speed does not depend on which ids run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use tl_core::{ForwardBatch, ForwardSeq, ModelRunner};
use tl_examples::{fail, parse_or_exit, EngineArgs};

/// Measure prefill and decode speed of a tl model.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// Model directory (config.json + weights) or a .gguf file.
    #[arg(long)]
    model: PathBuf,
    /// Prompt length: the prefill step, and the context each decode starts from.
    #[arg(long, default_value_t = 128)]
    prompt_tokens: usize,
    /// Decode steps per measurement.
    #[arg(long, default_value_t = 32)]
    decode_tokens: usize,
    /// Sequences decoding together in the batched measurement.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Timed repetitions of each measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    #[command(flatten)]
    engine: EngineArgs,
}

/// Synthetic prompt of sequence `s`: different ids per sequence, all below `vocab`.
fn prompt(s: usize, n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|i| ((s * n + i) * 7919 % vocab) as u32).collect()
}

/// `f` once untimed, then `repeats` times; returns each timed run's seconds.
fn timed(repeats: usize, mut f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<Vec<f64>> {
    f()?;
    let mut secs = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let t = Instant::now();
        f()?;
        secs.push(t.elapsed().as_secs_f64());
    }
    Ok(secs)
}

/// One table row: `tokens` per run over the runs' seconds, as median (min .. max) tok/s.
fn row(what: &str, tokens: usize, secs: &[f64]) {
    let mut rates: Vec<f64> = secs.iter().map(|s| tokens as f64 / s.max(1e-9)).collect();
    rates.sort_by(f64::total_cmp);
    let median = rates[rates.len() / 2];
    let ms = 1e3 / median;
    println!("{what:<30} {tokens:>7} {ms:>11.2} {median:>11.1}   ({:.1} .. {:.1})", rates[0], rates[rates.len() - 1]);
}

/// Prefill `prompts` (one step each, in order) into `tables`.
fn prefill(r: &mut ModelRunner, prompts: &[Vec<u32>], tables: &[Vec<u32>]) -> anyhow::Result<()> {
    for (p, t) in prompts.iter().zip(tables) {
        r.forward(&ForwardBatch::single(p, 0, t))?;
    }
    Ok(())
}

/// `steps` decode steps of every sequence in `tables` together, positions after `start`.
fn decode(r: &mut ModelRunner, tables: &[Vec<u32>], start: usize, steps: usize, vocab: usize) -> anyhow::Result<()> {
    let ids: Vec<[u32; 1]> = (0..tables.len()).map(|s| [(s * 7919 % vocab) as u32]).collect();
    for k in 0..steps {
        let seqs =
            tables.iter().zip(&ids).map(|(t, id)| ForwardSeq { tokens: id, start: start + k, blocks: t }).collect();
        r.forward(&ForwardBatch { seqs })?;
    }
    Ok(())
}

fn run(cli: Cli) -> anyhow::Result<()> {
    anyhow::ensure!(cli.prompt_tokens > 0, "--prompt-tokens must be at least 1");
    anyhow::ensure!(cli.batch > 0 && cli.repeats > 0, "--batch and --repeats must be at least 1");
    let (n, steps, b) = (cli.prompt_tokens, cli.decode_tokens, cli.batch);
    let mut cfg = cli.engine.engine()?;
    // Room for `b` sequences of the full length (the single-sequence runs reuse the first).
    let per_seq = (n + steps).div_ceil(cfg.kv.block_tokens.max(1) as usize);
    cfg.kv.n_blocks = Some(u32::try_from(b * per_seq).context("too many KV blocks")?);
    cfg.max_seqs = cfg.max_seqs.max(b);
    cfg.prefill_chunk = cfg.prefill_chunk.max(n);
    let t0 = Instant::now();
    let mut r = ModelRunner::load(&cli.model, &cfg).with_context(|| format!("{}", cli.model.display()))?;
    let load_s = t0.elapsed().as_secs_f64();
    let c = r.config().clone();
    if let Some(max) = c.max_position_embeddings {
        anyhow::ensure!(n + steps <= max, "prompt + decode = {} tokens pass the context of {max}", n + steps);
    }
    let vocab = c.vocab_size;
    let tables: Vec<Vec<u32>> = {
        let pool = r.pool();
        let mut pool = pool.lock().map_err(|_| anyhow::anyhow!("KV pool lock poisoned"))?;
        (0..b).map(|_| pool.alloc(per_seq)).collect::<Result<_, _>>()?
    };
    let prompts: Vec<Vec<u32>> = (0..b).map(|s| prompt(s, n, vocab)).collect();

    println!(
        "model {} ({} layers, hidden {}, vocab {vocab}); threads {}; weights {}; loaded in {load_s:.2} s",
        cli.model.display(),
        c.json().get("num_hidden_layers").and_then(|v| v.as_u64()).unwrap_or(0),
        r.hidden_size(),
        if cfg.threads == 0 { "all cores".to_string() } else { cfg.threads.to_string() },
        cli.engine.weights,
    );
    println!("{:<30} {:>7} {:>11} {:>11}   (min .. max tok/s)", "measure", "tokens", "ms/token", "tokens/s");

    let prefill_s = timed(cli.repeats, || prefill(&mut r, &prompts[..1], &tables[..1]))?;
    row(&format!("prefill 1 x {n}"), n, &prefill_s);
    if steps > 0 {
        // The first sequence's prompt is in the cache from the prefill runs; each run
        // decodes the same positions again, overwriting them.
        let single = timed(cli.repeats, || decode(&mut r, &tables[..1], n, steps, vocab))?;
        row("decode 1 seq", steps, &single);
        prefill(&mut r, &prompts, &tables)?;
        let batched = timed(cli.repeats, || decode(&mut r, &tables, n, steps, vocab))?;
        row(&format!("decode {b} seqs together"), b * steps, &batched);
    }

    let pool = r.pool();
    let mut pool = pool.lock().map_err(|_| anyhow::anyhow!("KV pool lock poisoned"))?;
    for &id in tables.iter().flatten() {
        pool.release(id)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(parse_or_exit::<Cli>()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}
