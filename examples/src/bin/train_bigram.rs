//! train_bigram: train a byte bigram on a text file and write a model directory.
//!
//! Counts byte pairs, adds one to every count (Laplace smoothing), and stores each row's
//! log-probabilities `ln((count + 1) / (row total + V))` as the `[V, V]` logits table.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use safetensors::tensor::{Dtype, TensorView};
use tl_examples::{fail, parse_or_exit};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Precision {
    F32,
    F16,
}

/// Train a byte bigram model directory from a text file.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// The training text.
    #[arg(long)]
    text: PathBuf,
    /// The model directory to write.
    #[arg(long)]
    out: PathBuf,
    /// Stored precision of the table.
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    dtype: Precision,
}

const V: usize = 256;

fn run(cli: Cli) -> anyhow::Result<()> {
    let text = std::fs::read(&cli.text).with_context(|| format!("{}", cli.text.display()))?;
    anyhow::ensure!(text.len() >= 2, "{}: need at least two bytes of text", cli.text.display());
    let mut counts = vec![0u64; V * V]; // (current byte, next byte)
    for pair in text.windows(2) {
        counts[pair[0] as usize * V + pair[1] as usize] += 1;
    }
    let mut table = vec![0f32; V * V]; // (current, next) log-probabilities
    for row in 0..V {
        let total: u64 = counts[row * V..(row + 1) * V].iter().sum();
        let denom = (total + V as u64) as f64;
        for col in 0..V {
            table[row * V + col] = ((counts[row * V + col] + 1) as f64 / denom).ln() as f32;
        }
    }
    let (dtype, bytes): (Dtype, Vec<u8>) = match cli.dtype {
        Precision::F32 => (Dtype::F32, table.iter().flat_map(|x| x.to_le_bytes()).collect()),
        Precision::F16 => (Dtype::F16, table.iter().flat_map(|&x| tl_quant::f32_to_f16(x).to_le_bytes()).collect()),
    };
    std::fs::create_dir_all(&cli.out).with_context(|| format!("{}", cli.out.display()))?;
    let view = TensorView::new(dtype, vec![V, V], &bytes)?;
    let path = cli.out.join("model.safetensors");
    safetensors::serialize_to_file([("bigram.logits", view)], None, &path)
        .with_context(|| format!("{}", path.display()))?;
    let config = serde_json::json!({
        "tl_arch": "bigram",
        "tl_tokenizer": "byte",
        "vocab_size": V,
    });
    let path = cli.out.join("config.json");
    std::fs::write(&path, serde_json::to_string_pretty(&config)? + "\n")
        .with_context(|| format!("{}", path.display()))?;
    eprintln!("wrote {} ({} bytes of text)", cli.out.display(), text.len());
    Ok(())
}

fn main() -> ExitCode {
    match run(parse_or_exit::<Cli>()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}
