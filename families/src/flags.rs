//! The engine flags every tl command that loads a model takes (one definition, flattened
//! into each command's own flags with `#[command(flatten)]`), their environment-variable
//! fallbacks, and command-line parsing that fails in one line.

use std::ffi::OsString;

use clap::Parser;
use tl_core::{EngineConfig, KvConfig, Weights};

/// How the engine holds and runs a model: weights, activations, threads and the KV pool.
/// Each flag may come from the environment instead (`TL_THREADS=2`, ...); a flag given on
/// the command line wins.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
#[command(next_help_heading = "Engine")]
pub struct EngineArgs {
    /// Worker threads for the forward; 0 = one per core.
    #[arg(long, env = "TL_THREADS", default_value_t = 0)]
    pub threads: usize,
    /// How weights are held: "native" (as stored in the file, the default), "f32" (widened,
    /// the reference; same results bit for bit), "int4" (projections quantized at load,
    /// group 32) or "int4:G".
    #[arg(long, env = "TL_WEIGHTS", default_value = "native")]
    pub weights: String,
    /// How projections treat their input rows: "exact" (f32, the default) or "q8" (rows
    /// quantized to int8 in blocks of 32 for the Q8_0/Q4_0/Q4_1/Q4_K/Q5_K/Q6_K/int4 weights:
    /// faster, not the exact numbers, still the same bits in any batch; docs/spec/numbers.md).
    #[arg(long, env = "TL_ACTIVATIONS", default_value = "exact")]
    pub activations: String,
    /// The registered KV backend: "f16-slab" (the default) or "q8-slab" (8-bit values
    /// with an f16 scale per position and KV head, about half the memory).
    #[arg(long, env = "TL_KV", default_value = "f16-slab")]
    pub kv: String,
    /// KV pool memory budget in MiB [default: 256].
    #[arg(long, env = "TL_KV_MEMORY")]
    pub kv_memory: Option<usize>,
    /// KV pool size in blocks (overrides --kv-memory).
    #[arg(long, env = "TL_KV_BLOCKS")]
    pub kv_blocks: Option<u32>,
    /// Token positions per KV block.
    #[arg(long, env = "TL_BLOCK_TOKENS", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub block_tokens: u32,
}

impl EngineArgs {
    /// The engine configuration these flags describe; the fields they do not set (the
    /// scheduler's batch limits) are [`EngineConfig::default`]'s, for the command to set.
    pub fn engine(&self) -> anyhow::Result<EngineConfig> {
        let weights = self.weights.parse::<Weights>().map_err(|e| anyhow::anyhow!("--{e}"))?;
        let activations = self.activations.parse().map_err(|e| anyhow::anyhow!("--{e}"))?;
        // Checked here, before any loading, so a misspelt backend is the first line out.
        tl_core::registry::kv_backend(&self.kv).map_err(|e| anyhow::anyhow!("--kv: {e}"))?;
        let kv = KvConfig {
            backend: self.kv.clone(),
            block_tokens: self.block_tokens,
            n_blocks: self.kv_blocks,
            memory_bytes: self.kv_memory.map_or(KvConfig::default().memory_bytes, |mib| mib << 20),
            ..KvConfig::default()
        };
        Ok(EngineConfig { threads: self.threads, weights, activations, kv, ..EngineConfig::default() })
    }

    /// Size Candle's own thread pool from `--threads`. Candle's elementwise ops on large
    /// tensors run on Candle's process-wide pool, sized from `CANDLE_NUM_THREADS` at first
    /// use; the runner's rayon pool only bounds our kernels. Call it from `main` before any
    /// tensor exists and while the process has one thread, so setting the variable is
    /// race-free.
    pub fn size_candle_pool(&self) {
        if self.threads > 0 && std::env::var_os("CANDLE_NUM_THREADS").is_none() {
            std::env::set_var("CANDLE_NUM_THREADS", self.threads.to_string());
        }
    }

    /// Refuse the KV pool flags, for a command that sizes each run's pool itself: an
    /// ignored flag would look like it was applied.
    pub fn refuse_pool_size(&self, command: &str) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.kv_memory.is_none() && self.kv_blocks.is_none(),
            "--kv-memory / --kv-blocks: {command} sizes each run's KV pool itself"
        );
        Ok(())
    }
}

/// What a failed parse means for the process: print help or version and succeed, or print
/// one line and exit with status 2 (clap's own status for usage errors).
pub enum Parsed<T> {
    /// The flags parsed.
    Ok(T),
    /// `--help` or `--version` was printed: exit 0.
    Shown,
    /// A usage error, already printed as one line: exit 2.
    Bad,
}

/// Parse `args` (the program name first); a bad flag prints its first line (plus `--help`
/// advice) on stderr: clap's full message with usage is several lines, and the project's
/// binaries fail in one.
pub fn parse<T: Parser>(args: impl IntoIterator<Item = impl Into<OsString> + Clone>) -> Parsed<T> {
    match T::try_parse_from(args) {
        Ok(t) => Parsed::Ok(t),
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return Parsed::Shown;
            }
            eprintln!("{} (try --help)", first_line(&e.to_string()));
            Parsed::Bad
        }
    }
}

/// Parse the process's arguments; exit 0 after help or version, 2 after a usage error.
pub fn parse_or_exit<T: Parser>() -> T {
    match parse::<T>(std::env::args_os()) {
        Parsed::Ok(t) => t,
        Parsed::Shown => std::process::exit(0),
        Parsed::Bad => std::process::exit(2),
    }
}

/// The first line of an error message (clap's carry usage and advice after it).
pub fn first_line(text: &str) -> &str {
    text.lines().find(|l| !l.trim().is_empty()).unwrap_or("bad arguments")
}

/// Print an error chain on one line (`error: outer: inner`) and return a failing exit code.
pub fn fail(e: anyhow::Error) -> std::process::ExitCode {
    eprintln!("error: {}", format!("{e:#}").replace('\n', " "));
    std::process::ExitCode::FAILURE
}

/// The model a command runs: a positional `MODEL` (`tl run M`) or `--model M` (the old
/// binaries' spelling, kept so their scripts still work). Only `serve` takes several
/// (`tl serve A --model B --model C`); every other command refuses more than one.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct ModelArg {
    /// Model directory (config.json + weights), a .gguf file, a catalog name (`tl list
    /// --catalog`) or hf:ORG/REPO[:QUANT|/FILE] (`tl` pulls it on first use with --yes).
    #[arg(value_name = "MODEL", required_unless_present = "model_flag")]
    pub model_pos: Option<std::path::PathBuf>,
    /// The same as MODEL, as a flag (repeatable for `serve`).
    #[arg(long = "model", id = "model_flag", value_name = "MODEL", action = clap::ArgAction::Append)]
    pub model_flag: Vec<std::path::PathBuf>,
}

impl ModelArg {
    /// The model path; both spellings at once, or several models, is an error (which one
    /// was meant?).
    pub fn path(&self) -> anyhow::Result<&std::path::Path> {
        match (&self.model_pos, self.model_flag.as_slice()) {
            (Some(p), []) | (None, [p]) => Ok(p),
            (Some(_), [_]) => anyhow::bail!("give the model once: MODEL or --model, not both"),
            (None, []) => anyhow::bail!("no model: give MODEL or --model"),
            _ => anyhow::bail!("give one model (only `serve` runs several)"),
        }
    }

    /// Every model named, MODEL first (for `serve`).
    pub fn all(&self) -> Vec<&std::path::Path> {
        self.model_pos.iter().chain(&self.model_flag).map(|p| p.as_path()).collect()
    }
}
