//! `tl run` (and the deprecated `chat` alias): a conversation with a model that has a
//! chat template.
//!
//! `tl run MODEL [PROMPT] [--system TEXT] [--max-tokens N] [sampling flags] [--seed S]`
//! With PROMPT: one turn, the answer streamed to stdout, then exit. Without: type a
//! message and press Enter; the answer streams back. An empty line or Ctrl-D
//! ends the conversation. The conversation stays in the KV cache between turns: each
//! turn renders the whole conversation with the template, keeps the cached tokens it
//! shares with that rendering, and prefills only the rest (the new turn).
//!
//! `--session FILE` saves the conversation and its KV after every turn and resumes them
//! when FILE exists (crate::session): the resumed conversation is not prefilled
//! again. A session KV that fails a check (another model, a damaged or mismatched
//! `.kvb`) is refused and the conversation recomputed from its messages. Sampling
//! starts a fresh stream of `--seed` in each process.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use tl_core::{registry, ChatTemplate, Message, Tokenizer};
use tl_families::flags::{fail, parse_or_exit, EngineArgs, ModelArg};

use crate::{session, SamplingArgs};

/// Chat with a tl model: one turn (PROMPT given) or a conversation on stdin.
#[derive(clap::Parser, Debug, Clone)]
#[command(name = "run", version, about)]
pub struct RunArgs {
    /// The model (MODEL or --model).
    #[command(flatten)]
    pub model: ModelArg,
    /// One user turn to answer, then exit (without it: a conversation on stdin).
    #[arg(value_name = "PROMPT")]
    pub prompt: Option<String>,
    /// A system turn that opens the conversation.
    #[arg(long)]
    pub system: Option<String>,
    /// Most tokens per answer.
    #[arg(long, default_value_t = 512)]
    pub max_tokens: usize,
    /// The sampling flags.
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// A LoRA adapter to run under (a session saved under one resumes only under it).
    #[command(flatten)]
    pub lora: crate::LoraArg,
    /// Save the conversation and its KV here after every turn, and resume from it.
    #[arg(long)]
    pub session: Option<PathBuf>,
    /// The engine flags every model-loading command shares.
    #[command(flatten)]
    pub engine: EngineArgs,
}

impl RunArgs {
    /// The model path and the one-shot prompt. `tl run --model M "Hi"` puts "Hi" where
    /// MODEL would go: with `--model` given, a lone positional is the prompt.
    pub fn model_and_prompt(&self) -> anyhow::Result<(&Path, Option<&str>)> {
        match (self.model.model_flag.as_slice(), &self.model.model_pos, &self.prompt) {
            ([m], Some(p), None) => Ok((m, p.to_str())),
            _ => Ok((self.model.path()?, self.prompt.as_deref())),
        }
    }

    /// The engine configuration the model is loaded with.
    pub fn engine_config(&self) -> anyhow::Result<tl_core::EngineConfig> {
        self.engine.engine()
    }

    /// Answer the prompt, or hold the conversation on stdin.
    pub fn run(&self) -> anyhow::Result<()> {
        run(self)
    }
}

/// The `chat` alias binary's main.
pub fn main() -> ExitCode {
    match parse_or_exit::<RunArgs>().run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// Length of the common prefix of two id runs.
fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn run(cli: &RunArgs) -> anyhow::Result<()> {
    let (model, one_shot) = cli.model_and_prompt()?;
    let params = cli.sampling.params();
    let mut sampler = (registry::sampler(&cli.sampling.sampler)?.make)();
    let mut runner = crate::load(&cli.engine, model)?;
    let cfg = runner.config().clone();
    let tok = Tokenizer::load(&cfg).with_context(|| format!("{}", model.display()))?;
    let tmpl = ChatTemplate::load(&cfg)?.ok_or_else(|| {
        anyhow::anyhow!("{}: the model has no chat template (tl generate runs a plain prompt)", model.display())
    })?;
    let context = cfg.max_position_embeddings.unwrap_or(usize::MAX);
    let mut rng = tl_sampling::stream(cli.sampling.seed, tl_sampling::PURPOSE_SAMPLE);

    let opening: Vec<Message> = cli.system.iter().map(|s| Message::new("system", s.as_str())).collect();
    let mut messages = opening.clone();
    let adapter = cli.lora.load(&runner)?;
    let under = |s: tl_core::Sequence| match &adapter {
        Some((a, scale)) => s.with_adapter(std::sync::Arc::clone(a), *scale),
        None => s,
    };
    let mut seq = under(runner.sequence());
    // Another model, weight mode, KV element type or adapter has other K/V for the same ids.
    let model_key = match &cli.session {
        Some(_) => {
            let lora = adapter.as_ref().map(|(a, s)| format!("-lora{:016x}@{s}", a.digest())).unwrap_or_default();
            format!("{}-{}{lora}", tl_engine::fingerprint(model, runner.engine())?, runner.engine().kv.backend)
        }
        None => String::new(),
    };
    if let Some(resumed) = cli.session.as_deref().map(|p| session::load(p, &model_key)).transpose()?.flatten() {
        messages = resumed.messages;
        match resumed.kv.and_then(|(tokens, env)| runner.resume(tokens, &env).map_err(|e| e.to_string())) {
            Ok(s) => {
                eprintln!("[resumed {} messages, {} cached tokens]", messages.len(), s.tokens().len());
                seq = under(s);
            }
            Err(why) => {
                eprintln!("[resumed {} messages; the saved KV was refused ({why}): recomputing]", messages.len())
            }
        }
    }
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    let mut turns = 0;
    loop {
        let mut line = String::new();
        match one_shot {
            // One turn: the prompt as given (newlines and all), no "> " before the answer.
            Some(p) if turns == 0 => line.push_str(p),
            Some(_) => break,
            None => {
                write!(out, "> ")?;
                out.flush()?;
                if stdin.lock().read_line(&mut line)? == 0 {
                    writeln!(out)?; // Ctrl-D: end the prompt line
                    break;
                }
            }
        }
        turns += 1;
        let line = line.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            anyhow::ensure!(one_shot.is_none(), "the prompt is empty");
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
