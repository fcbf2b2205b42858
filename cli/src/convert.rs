//! `tl convert` (and the deprecated `convert` alias): a llama.cpp GGUF file to a Hugging Face model directory that `transformers`
//! (and tl) load as is.
//!
//! `tl convert --gguf FILE --out DIR [--dtype bf16|f32]` writes
//! - config.json: the Hugging Face fields the file's architecture translates its metadata
//!   to (through the crate registered for its `general.architecture`), plus
//!   tl_arch/tl_tokenizer;
//! - model.safetensors: every tensor under its HF name, dequantized (Q/K rows back in
//!   HF order), stored as bf16 (rounded to nearest even) or f32 (exactly what tl computes
//!   with when it reads the GGUF directly);
//! - tokenizer.json: the byte-level BPE of the GGUF, keeping its pre-tokenizer (for
//!   SmolLM2, digits split one by one);
//! - tokenizer_config.json: the chat template and the special tokens. A file without a
//!   vocabulary (byte tokens) gets no tokenizer files, and its chat template, if any, goes
//!   to chat_template.jinja.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use safetensors::tensor::{Dtype, TensorView};
use serde_json::{json, Value};
use tl_core::tokenizer::gguf_tokenizer_json;
use tl_core::{Gguf, WeightStore};
use tl_families::flags::{fail, parse_or_exit};

/// Convert a GGUF file to a Hugging Face model directory.
#[derive(clap::Parser, Debug, Clone)]
#[command(name = "convert", version, about)]
pub struct ConvertArgs {
    /// The .gguf file (any registered general.architecture: llama, qwen2).
    #[arg(long)]
    pub gguf: PathBuf,
    /// The directory to write (created when missing; its files are overwritten).
    #[arg(long)]
    pub out: PathBuf,
    /// Storage type of model.safetensors: bf16 or f32.
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
}

fn write_json(path: &Path, v: &Value) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(v)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

fn run(cli: &ConvertArgs) -> anyhow::Result<()> {
    let (dtype, torch) = match cli.dtype.as_str() {
        "bf16" => (Dtype::BF16, "bfloat16"),
        "f32" => (Dtype::F32, "float32"),
        other => anyhow::bail!("--dtype {other:?}: expected bf16 or f32"),
    };
    // Tensor names and config as the file's architecture reads them.
    let (g, mut config) = tl_core::load::open_gguf(&cli.gguf)?;
    // Check it the way tl will load it before writing anything.
    tl_core::ModelConfig::from_value(config.clone(), None).with_context(|| cli.gguf.display().to_string())?;
    config["torch_dtype"] = json!(torch);
    let tokenizer = match config["tl_tokenizer"].as_str() {
        Some("hf") => Some(gguf_tokenizer_json(&g)?),
        _ => None, // byte tokens: nothing to write
    };
    std::fs::create_dir_all(&cli.out).with_context(|| format!("creating {}", cli.out.display()))?;

    // (name, shape, little-endian bytes) of every tensor with an HF name.
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for name in g.names() {
        if g.gguf_name(&name) == Some(name.as_str()) {
            continue; // no HF counterpart (transformers would not load it)
        }
        let shape = g.info(&name).map(|i| i.shape).unwrap_or_default();
        let values = g.f32(&name, &shape)?;
        let bytes: Vec<u8> = match dtype {
            Dtype::BF16 => values.iter().flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes()).collect(),
            _ => values.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        tensors.push((name, shape, bytes));
    }
    let views = tensors
        .iter()
        .map(|(n, s, b)| Ok((n.clone(), TensorView::new(dtype, s.clone(), b)?)))
        .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()?;
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    let st = cli.out.join("model.safetensors");
    safetensors::serialize_to_file(views, Some(meta), &st).with_context(|| format!("writing {}", st.display()))?;

    write_json(&cli.out.join("config.json"), &config)?;
    // serialize_to_file creates the file owner-only; give it the mode of its neighbours.
    let mode = std::fs::metadata(cli.out.join("config.json"))?.permissions();
    std::fs::set_permissions(&st, mode).with_context(|| st.display().to_string())?;
    if let Some(tokenizer) = &tokenizer {
        write_json(&cli.out.join("tokenizer.json"), tokenizer)?;
        write_json(&cli.out.join("tokenizer_config.json"), &tokenizer_config(&g, &config)?)?;
    } else if let Some(t) = g.string("tokenizer.chat_template")? {
        let path = cli.out.join("chat_template.jinja");
        std::fs::write(&path, t).with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!("wrote {} ({} tensors, {})", cli.out.display(), tensors.len(), cli.dtype);
    Ok(())
}

/// tokenizer_config.json: the special tokens by text, the chat template, and the
/// generic fast tokenizer class, which loads tokenizer.json unchanged (a class such as
/// GPT2Tokenizer may rebuild the pre-tokenizer and drop the digit split).
fn tokenizer_config(g: &Gguf, config: &Value) -> anyhow::Result<Value> {
    let tokens = g.strings("tokenizer.ggml.tokens")?.unwrap_or_default();
    let mut tc = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": false,
        "add_bos_token": matches!(g.value("tokenizer.ggml.add_bos_token"), Some(v) if v.to_bool().unwrap_or(false)),
        "add_eos_token": false,
    });
    for (field, key) in [
        ("bos_token", "tokenizer.ggml.bos_token_id"),
        ("eos_token", "tokenizer.ggml.eos_token_id"),
        ("unk_token", "tokenizer.ggml.unknown_token_id"),
        ("pad_token", "tokenizer.ggml.padding_token_id"),
    ] {
        if let Some(tok) = g.uint(key)?.and_then(|id| tokens.get(id as usize)) {
            tc[field] = json!(tok);
        }
    }
    if let Some(n) = config.get("max_position_embeddings") {
        tc["model_max_length"] = n.clone();
    }
    if let Some(t) = g.string("tokenizer.chat_template")? {
        tc["chat_template"] = json!(t);
    }
    Ok(tc)
}

impl ConvertArgs {
    /// Run the command.
    pub fn run(&self) -> anyhow::Result<()> {
        run(self)
    }
}

/// The `convert` alias binary's main.
pub fn main() -> ExitCode {
    match parse_or_exit::<ConvertArgs>().run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}
