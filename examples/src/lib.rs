//! Shared pieces of tl's example binaries: command-line parsing that fails in one line,
//! the sampling flags, and runner loading with every plugin crate linked.
#![deny(missing_docs)]

// Link every plugin crate so their inventory registrations exist in each binary.
use tl_arch_bigram as _;
use tl_arch_gemma3 as _;
use tl_arch_gemma4 as _;
use tl_arch_gpt_oss as _;
use tl_arch_llama as _;
use tl_arch_mistral as _;
use tl_arch_mixtral as _;
use tl_arch_olmoe as _;
use tl_arch_qwen2 as _;
use tl_arch_qwen3 as _;
use tl_arch_qwen3_5 as _;
use tl_arch_qwen3_moe as _;
use tl_kv as _;
use tl_sampling as _;

pub mod session;

use std::path::Path;
use std::process::ExitCode;

use clap::Parser;
use tl_core::{EngineConfig, ModelRunner, SamplingParams, Weights};

/// Parse the command line; a bad flag prints one line (plus `--help` advice) and exits 2.
pub fn parse_or_exit<T: Parser>() -> T {
    match T::try_parse() {
        Ok(t) => t,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                std::process::exit(0);
            }
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("bad arguments");
            eprintln!("{first} (try --help)");
            std::process::exit(2);
        }
    }
}

/// Print an error chain on one line and return a failing exit code.
pub fn fail(e: anyhow::Error) -> ExitCode {
    eprintln!("error: {}", format!("{e:#}").replace('\n', " "));
    ExitCode::FAILURE
}

/// The sampling flags every generating binary takes (sampling.md's parameters).
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

/// Engine flags shared by the binaries.
#[derive(clap::Args, Debug, Clone)]
pub struct EngineArgs {
    /// Worker threads; 0 = one per core.
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// How weights are held: "native" (as stored in the file, the default), "f32" (widened,
    /// the reference; same results bit for bit), "int4" (projections quantized at load,
    /// group 32) or "int4:G".
    #[arg(long, default_value = "native")]
    pub weights: String,
    /// The registered KV backend: "f16-slab" (the default) or "q8-slab" (8-bit values
    /// with an f16 scale per position and KV head, about half the memory).
    #[arg(long, default_value = "f16-slab")]
    pub kv: String,
    /// How projections treat their input rows: "exact" (f32, the default) or "q8" (rows
    /// quantized to int8 in blocks of 32 for the Q8_0/Q4_0/Q4_1/Q4_K/Q5_K/Q6_K/int4 weights: faster, not
    /// the exact numbers, still the same bits in any batch; docs/spec/numbers.md).
    #[arg(long, default_value = "exact")]
    pub activations: String,
}

impl EngineArgs {
    /// The engine configuration these flags describe.
    pub fn engine(&self) -> anyhow::Result<EngineConfig> {
        if self.threads > 0 && std::env::var_os("CANDLE_NUM_THREADS").is_none() {
            // Candle's elementwise ops on large tensors run on Candle's own process-wide
            // pool, sized from this variable at first use; the runner's rayon pool only
            // bounds our kernels. The binaries call this before any tensor exists and
            // while the process has one thread, so setting it here is race-free.
            std::env::set_var("CANDLE_NUM_THREADS", self.threads.to_string());
        }
        let mut cfg = EngineConfig { threads: self.threads, ..EngineConfig::default() };
        cfg.kv.backend = self.kv.clone();
        cfg.weights = self.weights.parse::<Weights>().map_err(|e| anyhow::anyhow!("--{e}"))?;
        cfg.activations = self.activations.parse().map_err(|e| anyhow::anyhow!("--{e}"))?;
        Ok(cfg)
    }

    /// Load a model with these flags.
    pub fn load(&self, model: &Path) -> anyhow::Result<ModelRunner> {
        let cfg = self.engine()?;
        // Every load error already names the file or field at fault.
        Ok(ModelRunner::load(model, &cfg)?)
    }
}
