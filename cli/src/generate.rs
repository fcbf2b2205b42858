//! `tl generate` (and the deprecated `generate` alias): run any tl model on a prompt and stream the continuation to stdout.
//!
//! `tl generate MODEL --prompt TEXT [--max-tokens N] [sampling flags] [--seed S]`
//! `--chat` wraps the prompt as one user turn of the model's chat template (`--system`
//! adds a system turn); `--stop TEXT` (repeatable) ends the output before that text.
//! A final line on stderr gives prompt and generated token counts and prefill/decode
//! speeds. The same seed gives the same tokens.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use tl_core::{registry, ChatTemplate, Message, Tokenizer};
use tl_families::flags::{fail, parse_or_exit, EngineArgs, ModelArg};

use crate::SamplingArgs;

/// Generate text with a tl model.
#[derive(clap::Parser, Debug, Clone)]
#[command(name = "generate", version, about)]
pub struct GenerateArgs {
    /// The model (MODEL or --model).
    #[command(flatten)]
    pub model: ModelArg,
    /// The prompt text.
    #[arg(long, default_value = "")]
    pub prompt: String,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// Render the prompt as one user turn with the model's chat template.
    #[arg(long)]
    pub chat: bool,
    /// With --chat: a system turn before the user's.
    #[arg(long)]
    pub system: Option<String>,
    /// Stop before this text (repeatable); it is not printed.
    #[arg(long)]
    pub stop: Vec<String>,
    /// The sampling flags.
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// A LoRA adapter to run under.
    #[command(flatten)]
    pub lora: crate::LoraArg,
    /// The engine flags every model-loading command shares.
    #[command(flatten)]
    pub engine: EngineArgs,
}

impl GenerateArgs {
    /// The engine configuration the model is loaded with.
    pub fn engine_config(&self) -> anyhow::Result<tl_core::EngineConfig> {
        self.engine.engine()
    }

    /// Generate, streaming to stdout.
    pub fn run(&self) -> anyhow::Result<()> {
        run(self)
    }
}

/// The `generate` alias binary's main.
pub fn main() -> ExitCode {
    match parse_or_exit::<GenerateArgs>().run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

fn run(cli: &GenerateArgs) -> anyhow::Result<()> {
    anyhow::ensure!(cli.chat || cli.system.is_none(), "--system needs --chat");
    let params = cli.sampling.params();
    let mut sampler = (registry::sampler(&cli.sampling.sampler)?.make)();
    let model = cli.model.path()?;
    let mut runner = crate::load(&cli.engine, model)?;
    let cfg = runner.config().clone();
    let tok = Tokenizer::load(&cfg).with_context(|| format!("{}", model.display()))?;
    let mut prompt = if cli.chat {
        let tmpl = ChatTemplate::load(&cfg)?
            .ok_or_else(|| anyhow::anyhow!("{}: the model has no chat template", model.display()))?;
        let mut turns: Vec<Message> = cli.system.iter().map(|s| Message::new("system", s.as_str())).collect();
        turns.push(Message::new("user", cli.prompt.as_str()));
        // The template writes any BOS itself, so no special tokens are added here.
        tok.encode(&tmpl.render(&turns, true)?)?
    } else {
        tok.encode_with_special(&cli.prompt)?
    };
    if prompt.is_empty() {
        prompt.extend(cfg.bos_token_id);
    }
    anyhow::ensure!(!prompt.is_empty(), "empty prompt and the model has no bos_token_id to start from");

    let mut rng = tl_sampling::stream(cli.sampling.seed, tl_sampling::PURPOSE_SAMPLE);
    let mut seq = cli.lora.sequence(&runner)?;
    let t0 = Instant::now();
    let mut logits = runner.feed(&mut seq, &prompt)?;
    let prefill = t0.elapsed();

    let mut out = std::io::stdout().lock();
    let mut stream = tok.stream();
    let mut stops = StopText::new(&cli.stop);
    let mut output: Vec<u32> = Vec::new();
    let t1 = Instant::now();
    for step in 0..cli.max_tokens {
        let (id, _logprob) = sampler.sample(&logits, &params, &prompt, &output, &mut rng)?;
        if cfg.eos_token_ids.contains(&id) {
            break;
        }
        output.push(id);
        let (text, stopped) = stops.push(&stream.push(id)?);
        write!(out, "{text}")?;
        out.flush()?;
        if stopped {
            break;
        }
        if step + 1 < cli.max_tokens {
            logits = runner.feed(&mut seq, &[id])?;
        }
    }
    if !stops.stopped {
        let (text, _) = stops.push(&stream.finish());
        write!(out, "{text}{}", stops.flush())?;
    }
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

/// Holds back output that could be the start of a stop string, and cuts the output
/// where a stop string appears.
struct StopText<'a> {
    stops: &'a [String],
    held: String, // text not yet printed: a suffix that a stop string may begin with
    stopped: bool,
}

impl<'a> StopText<'a> {
    fn new(stops: &'a [String]) -> Self {
        StopText { stops, held: String::new(), stopped: false }
    }

    /// Add text; returns what can be printed now and whether a stop string appeared.
    fn push(&mut self, text: &str) -> (String, bool) {
        self.held.push_str(text);
        if let Some(cut) = self.stops.iter().filter(|s| !s.is_empty()).filter_map(|s| self.held.find(s.as_str())).min()
        {
            self.stopped = true;
            let out = self.held[..cut].to_string();
            self.held.clear();
            return (out, true);
        }
        // Keep the longest suffix that is a proper prefix of some stop string.
        let keep = (1..=self.held.len())
            .rev()
            .filter(|&n| self.held.is_char_boundary(self.held.len() - n))
            .find(|&n| {
                let tail = &self.held[self.held.len() - n..];
                self.stops.iter().any(|s| s.len() > n && s.starts_with(tail))
            })
            .unwrap_or(0);
        let out = self.held[..self.held.len() - keep].to_string();
        self.held.drain(..self.held.len() - keep);
        (out, false)
    }

    /// Whatever is still held back (the output ended without a stop string).
    fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}
