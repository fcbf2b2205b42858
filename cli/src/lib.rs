//! tl-cli: `tl`, the front door. One binary whose subcommands do what the nine separate
//! binaries did (`run` is `chat` with a one-shot PROMPT, `generate`, `serve`, `verify`,
//! `bench`, `probe`, `convert`, `perplexity`) plus `info MODEL` and shell completions.
//!
//! Every subcommand that loads a model flattens the one definition of the engine flags,
//! [`tl_families::flags::EngineArgs`] (with `TL_*` environment fallbacks). The old binary
//! names stay for one release as deprecated aliases: each is a `main` that calls the same
//! command's `main` here (or in tl_serve::cmd), so scripts that call them keep working.
#![deny(missing_docs)]

pub mod bench;
mod bench_encoder;
pub mod convert;
pub mod embed;
pub mod generate;
pub mod info;
pub mod perplexity;
pub mod probe;
pub mod pull;
pub mod run;
pub mod session;

use std::path::Path;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use tl_core::{EngineConfig, ModelRunner, SamplingParams};
use tl_families::flags::{fail, EngineArgs, Parsed};

/// Run open LLMs on this machine: chat, generate, serve the OpenAI API, prove determinism,
/// measure speed.
#[derive(Parser, Debug)]
#[command(name = "tl", version, propagate_version = true)]
pub struct Tl {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Download a MODEL that is not on disk without asking.
    #[arg(long, short = 'y', global = true)]
    pub yes: bool,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Chat with a model: answer PROMPT, or hold a conversation on stdin (was `chat`).
    Run(run::RunArgs),
    /// Continue a prompt, streaming to stdout (was `generate`).
    Generate(generate::GenerateArgs),
    /// Serve the OpenAI (and Anthropic Messages) API over HTTP (was `serve`).
    Serve(Box<tl_serve::cmd::serve::ServeArgs>),
    /// Show a seeded answer depends on nothing but the request (was `verify`).
    Verify(Box<tl_serve::cmd::verify::VerifyArgs>),
    /// Measure prefill and decode speed (was `bench`).
    Bench(bench::BenchArgs),
    /// Measure this machine's read bandwidth and FMA peak (was `probe`).
    Probe(probe::ProbeArgs),
    /// Convert a GGUF file to a Hugging Face model directory (was `convert`).
    Convert(convert::ConvertArgs),
    /// Measure a model's perplexity on a text file (was `perplexity`).
    Perplexity(perplexity::PerplexityArgs),
    /// Embed the lines of a file with an encoder model (all-MiniLM, bge, e5), to JSONL.
    Embed(embed::EmbedArgs),
    /// What a model is: architecture, tensor formats, context, chat template, memory.
    Info(info::InfoArgs),
    /// Download models by name: a catalog name (`tl list --catalog`) or hf:ORG/REPO[:QUANT].
    Pull(pull::PullArgs),
    /// List the models on disk (tl's cache and Hugging Face's).
    List(pull::ListArgs),
    /// Remove pulled models.
    Rm(pull::RmArgs),
    /// Print a shell completion script: `tl completions bash > /etc/bash_completion.d/tl`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

impl Command {
    /// The engine configuration the subcommand hands the engine (before a command's own
    /// measurement-specific sizing: bench's and verify's KV pools), or `None` for the
    /// subcommands that load no model.
    pub fn engine_config(&self) -> Option<anyhow::Result<EngineConfig>> {
        Some(match self {
            Command::Run(a) => a.engine_config(),
            Command::Generate(a) => a.engine_config(),
            Command::Serve(a) => a.options().map(|o| o.engine),
            Command::Verify(a) => a.reference(),
            Command::Bench(a) => a.engine_config(),
            Command::Perplexity(a) => a.engine.engine(),
            Command::Embed(a) => a.engine_config(),
            Command::Info(a) => a.engine.engine(),
            Command::Probe(_)
            | Command::Convert(_)
            | Command::Pull(_)
            | Command::List(_)
            | Command::Rm(_)
            | Command::Completions { .. } => return None,
        })
    }

    /// The MODEL argument of the subcommands that load one.
    pub fn model_arg(&mut self) -> Option<&mut tl_families::flags::ModelArg> {
        Some(match self {
            Command::Run(a) => &mut a.model,
            Command::Generate(a) => &mut a.model,
            Command::Serve(a) => &mut a.model,
            Command::Verify(a) => &mut a.model,
            Command::Bench(a) => &mut a.model,
            Command::Perplexity(a) => &mut a.model,
            Command::Embed(a) => &mut a.model,
            Command::Info(a) => &mut a.model,
            _ => return None,
        })
    }

    /// Run the subcommand; the exit status follows the old binary's (verify: 1 = differs).
    pub fn run(self) -> ExitCode {
        let done = |r: anyhow::Result<()>| r.map_or_else(fail, |()| ExitCode::SUCCESS);
        match self {
            Command::Run(a) => done(a.run()),
            Command::Generate(a) => done(a.run()),
            Command::Serve(a) => done(a.run()),
            Command::Verify(a) => tl_serve::cmd::verify::exit_code(a.run()),
            Command::Bench(a) => done(a.run()),
            Command::Probe(a) => done(a.run()),
            Command::Convert(a) => done(a.run()),
            Command::Perplexity(a) => done(a.run()),
            Command::Embed(a) => done(a.run()),
            Command::Info(a) => done(a.run()),
            Command::Pull(a) => done(a.run()),
            Command::List(a) => done(a.run()),
            Command::Rm(a) => done(a.run()),
            Command::Completions { shell } => {
                clap_complete::generate(shell, &mut Tl::command(), "tl", &mut std::io::stdout());
                ExitCode::SUCCESS
            }
        }
    }
}

/// `tl`'s main: parse (a bad flag is one line and status 2), then run.
pub fn main() -> ExitCode {
    tl_families::link();
    match tl_families::flags::parse::<Tl>(std::env::args_os()) {
        Parsed::Ok(mut tl) => {
            let several = matches!(tl.command, Command::Serve(_));
            if let Command::Serve(a) = &mut tl.command {
                if let Err(e) = pull::resolve_draft(&mut a.speculate, tl.yes) {
                    return fail(e);
                }
            }
            if let Some(m) = tl.command.model_arg() {
                if let Err(e) = pull::resolve_model(m, tl.yes, several) {
                    return fail(e);
                }
            }
            tl.command.run()
        }
        Parsed::Shown => ExitCode::SUCCESS,
        Parsed::Bad => ExitCode::from(2),
    }
}

/// Load a model with the engine flags (Candle's pool sized from `--threads` first).
pub fn load(engine: &EngineArgs, model: &Path) -> anyhow::Result<ModelRunner> {
    let cfg = engine.engine()?;
    engine.size_candle_pool();
    // Every load error already names the file or field at fault.
    Ok(ModelRunner::load(model, &cfg)?)
}

/// `--lora PATH[@SCALE]`: run under a LoRA adapter (a PEFT directory or a GGUF adapter
/// file; docs/spec/numbers.md, "Adapters"), unmerged.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LoraArg {
    /// A LoRA adapter to run under: PATH or PATH@SCALE (a PEFT directory or a GGUF
    /// adapter file made by llama.cpp's convert_lora_to_gguf.py).
    #[arg(long, value_name = "PATH[@SCALE]")]
    pub lora: Option<String>,
}

impl LoraArg {
    /// The adapter loaded for `runner` and its scale, when `--lora` is given.
    pub fn load(&self, runner: &ModelRunner) -> anyhow::Result<Option<(std::sync::Arc<tl_core::Adapter>, f32)>> {
        self.lora.as_deref().map(|arg| load_lora(runner, arg)).transpose()
    }

    /// A fresh sequence of `runner`, under the adapter when one is given.
    pub fn sequence(&self, runner: &ModelRunner) -> anyhow::Result<tl_core::Sequence> {
        Ok(match self.load(runner)? {
            Some((a, s)) => runner.sequence().with_adapter(a, s),
            None => runner.sequence(),
        })
    }
}

/// The adapter `--lora PATH[@SCALE]` names, loaded for `runner`, and its scale.
pub fn load_lora(runner: &ModelRunner, arg: &str) -> anyhow::Result<(std::sync::Arc<tl_core::Adapter>, f32)> {
    let (path, scale) = tl_serve::lora::path_and_scale(arg).map_err(|e| anyhow::anyhow!("--lora {e}"))?;
    Ok((std::sync::Arc::new(runner.load_adapter("lora", &path)?), scale))
}

/// The sampling flags every generating command takes (sampling.md's parameters).
#[derive(clap::Args, Debug, Clone)]
pub struct SamplingArgs {
    /// 0 = greedy.
    #[arg(long, default_value_t = 1.0)]
    pub temperature: f64,
    /// Keep the k most likely tokens; 0 = off.
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Nucleus mass in (0, 1]; 1 = off.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f64,
    /// Keep tokens with prob >= min_p * max prob; 0 = off.
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f64,
    /// Hugging Face repetition penalty over prompt and output; 1 = off.
    #[arg(long, default_value_t = 1.0)]
    pub repetition_penalty: f64,
    /// OpenAI presence penalty over the output; 0 = off.
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f64,
    /// OpenAI frequency penalty over the output; 0 = off.
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f64,
    /// Seed of the sampling stream: the same seed gives the same tokens.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The registered sampler to use.
    #[arg(long, default_value = "spec")]
    pub sampler: String,
}

impl SamplingArgs {
    /// The parameters these flags describe.
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repetition_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
        }
    }
}
