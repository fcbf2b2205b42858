//! chat: a multi-turn conversation with a model that has a chat template.
//!
//! `chat --model PATH [--system TEXT] [--max-tokens N] [sampling flags] [--seed S]`
//! Type a message and press Enter; the answer streams back. An empty line or Ctrl-D
//! ends the conversation. The conversation stays in the KV cache between turns: each
//! turn renders the whole conversation with the template, keeps the cached tokens it
//! shares with that rendering, and prefills only the rest (the new turn).
//!
//! `--session FILE` saves the conversation and its KV after every turn and resumes them
//! when FILE exists (tl_examples::session): the resumed conversation is not prefilled
//! again. A session KV that fails a check (another model, a damaged or mismatched
//! `.kvb`) is refused and the conversation recomputed from its messages. Sampling
//! starts a fresh stream of `--seed` in each process.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use tl_core::{registry, ChatTemplate, Message, Tokenizer};
use tl_examples::{fail, parse_or_exit, session, EngineArgs, SamplingArgs};

/// Chat with a tl model.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// Model directory or .gguf file.
    #[arg(long)]
    model: PathBuf,
    /// A system turn that opens the conversation.
    #[arg(long)]
    system: Option<String>,
    /// Most tokens per answer.
    #[arg(long, default_value_t = 512)]
    max_tokens: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Save the conversation and its KV here after every turn, and resume from it.
    #[arg(long)]
    session: Option<PathBuf>,
    #[command(flatten)]
    engine: EngineArgs,
}

/// Length of the common prefix of two id runs.
fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let params = cli.sampling.params();
    let mut sampler = (registry::sampler(&cli.sampling.sampler)?.make)();
    let mut runner = cli.engine.load(&cli.model)?;
    let cfg = runner.config().clone();
    let tok = Tokenizer::load(&cfg).with_context(|| format!("{}", cli.model.display()))?;
    let tmpl = ChatTemplate::load(&cfg)?
        .ok_or_else(|| anyhow::anyhow!("{}: the model has no chat template", cli.model.display()))?;
    let context = cfg.max_position_embeddings.unwrap_or(usize::MAX);
    let mut rng = tl_sampling::stream(cli.sampling.seed, tl_sampling::PURPOSE_SAMPLE);

    let opening: Vec<Message> = cli.system.iter().map(|s| Message::new("system", s.as_str())).collect();
    let mut messages = opening.clone();
    let mut seq = runner.sequence();
    // Another model, weight mode or KV element type has other K/V for the same ids.
    let model_key = match &cli.session {
        Some(_) => format!("{}-{}", tl_engine::fingerprint(&cli.model, runner.engine())?, runner.engine().kv.backend),
        None => String::new(),
    };
    if let Some(resumed) = cli.session.as_deref().map(|p| session::load(p, &model_key)).transpose()?.flatten() {
        messages = resumed.messages;
        match resumed.kv.and_then(|(tokens, env)| runner.resume(tokens, &env).map_err(|e| e.to_string())) {
            Ok(s) => {
                eprintln!("[resumed {} messages, {} cached tokens]", messages.len(), s.tokens().len());
                seq = s;
            }
            Err(why) => {
                eprintln!("[resumed {} messages; the saved KV was refused ({why}): recomputing]", messages.len())
            }
        }
    }
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    loop {
        write!(out, "> ")?;
        out.flush()?;
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            writeln!(out)?; // Ctrl-D: end the prompt line
            break;
        }
        let line = line.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            break;
        }
        messages.push(Message::new("user", line));
        let mut ids = tok.encode(&tmpl.render(&messages, true)?)?;
        if ids.len() + cli.max_tokens > context {
            eprintln!("[the conversation no longer fits the {context}-token context; starting over]");
            messages = opening.clone();
            messages.push(Message::new("user", line));
            ids = tok.encode(&tmpl.render(&messages, true)?)?;
            anyhow::ensure!(ids.len() + cli.max_tokens <= context, "the message does not fit the context");
        }
        // Reuse the cached prefix; at least the last token is fed again for fresh logits.
        let keep = common_prefix(seq.tokens(), &ids).min(ids.len() - 1);
        // A windowed model may have given back K/V the rewind needs: then less is kept.
        let keep = seq.truncate(keep)?;
        let t0 = Instant::now();
        let mut logits = runner.feed(&mut seq, &ids[keep..])?;
        let prefill = t0.elapsed();

        let mut stream = tok.stream();
        let mut answer: Vec<u32> = Vec::new();
        let t1 = Instant::now();
        for _ in 0..cli.max_tokens {
            let (id, _) = sampler.sample(&logits, &params, &ids, &answer, &mut rng)?;
            if cfg.eos_token_ids.contains(&id) {
                break;
            }
            answer.push(id);
            write!(out, "{}", stream.push(id)?)?;
            out.flush()?;
            logits = runner.feed(&mut seq, &[id])?;
        }
        writeln!(out, "{}", stream.finish())?;
        let rate = |n: usize, d: std::time::Duration| n as f64 / d.as_secs_f64().max(1e-9);
        eprintln!(
            "[reused {keep} cached tokens, prefilled {} ({:.1} tok/s), generated {} ({:.1} tok/s)]",
            ids.len() - keep,
            rate(ids.len() - keep, prefill),
            answer.len(),
            rate(answer.len(), t1.elapsed())
        );
        messages.push(Message::new("assistant", tok.decode(&answer)?));
        if let Some(path) = &cli.session {
            if let Err(e) = session::save(path, &model_key, &messages, &seq) {
                eprintln!("[session not saved: {e:#}]");
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(parse_or_exit::<Cli>()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}
