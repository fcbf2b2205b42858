//! `tl info MODEL`: what a model is, from what the existing APIs give without running it:
//! the architecture, the stored format of each kind of tensor, the context length, whether
//! it has a chat template, and the memory it needs under the engine flags given (the
//! weights as they would be held, plus the KV pool), read from a load of the model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use tl_core::{ChatTemplate, DType, ModelConfig, WeightStore};
use tl_families::flags::{EngineArgs, ModelArg};

/// Show a model's architecture, tensor formats, context, chat template and memory needs.
#[derive(clap::Parser, Debug, Clone)]
#[command(name = "info", version, about)]
pub struct InfoArgs {
    /// The model (MODEL or --model).
    #[command(flatten)]
    pub model: ModelArg,
    /// The memory figure is for the model loaded with these flags (`--weights int4`,
    /// `--kv q8-slab`, `--kv-memory`, ...).
    /// The engine flags every model-loading command shares.
    #[command(flatten)]
    pub engine: EngineArgs,
}

impl InfoArgs {
    /// Print the report.
    pub fn run(&self) -> anyhow::Result<()> {
        let model = self.model.path()?;
        let cfg = self.engine.engine()?;
        let config = ModelConfig::load(model).with_context(|| model.display().to_string())?;
        println!("model: {}", model.display());
        println!("architecture: {} (vocabulary {}, {:?} tokenizer)", config.arch, config.vocab_size, config.tokenizer);
        match config.max_position_embeddings {
            Some(n) => println!("context: {n} tokens"),
            None => println!("context: not stated"),
        }
        let template = ChatTemplate::load(&config).with_context(|| model.display().to_string())?;
        println!("chat template: {}", if template.is_some() { "yes" } else { "no" });
        println!("tensors (kind: stored format x count):");
        for (kind, formats) in tensor_kinds(&config)? {
            let f: Vec<String> = formats.iter().map(|(d, n)| format!("{d} x{n}")).collect();
            println!("  {kind}: {}", f.join(", "));
        }
        println!(
            "engine: threads {}, weights {}, activations {}, kv {} ({} tokens a block)",
            cfg.threads, cfg.weights, cfg.activations, cfg.kv.backend, cfg.kv.block_tokens
        );
        let runner = crate::load(&self.engine, model)?;
        let kv = runner.kv_pool_bytes()?;
        let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
        match runner.weight_bytes() {
            Some(w) => {
                println!("memory: {:.1} MiB = weights {:.1} MiB + KV pool {:.1} MiB", mib(w + kv), mib(w), mib(kv))
            }
            None => println!("memory: weights not reported by this architecture + KV pool {:.1} MiB", mib(kv)),
        }
        Ok(())
    }
}

/// The weight files of a model: its GGUF, or the directory's safetensors files.
fn weight_files(config: &ModelConfig) -> anyhow::Result<Vec<PathBuf>> {
    if let Some(g) = &config.gguf {
        return Ok(vec![g.clone()]);
    }
    let dir = config.dir.as_deref().unwrap_or(Path::new("."));
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| dir.display().to_string())?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    Ok(files)
}

/// Each kind of tensor (its name with the layer numbers replaced by `N`, so the 30 layers'
/// `attn_q.weight` are one line) and the formats it is stored in, with counts.
pub fn tensor_kinds(config: &ModelConfig) -> anyhow::Result<BTreeMap<String, BTreeMap<String, usize>>> {
    let mut kinds: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for file in weight_files(config)? {
        let store: Box<dyn WeightStore> = if file.extension().is_some_and(|x| x == "gguf") {
            Box::new(tl_core::Gguf::open(&file)?)
        } else {
            Box::new(tl_core::SafeTensors::open(&file)?)
        };
        for name in store.names() {
            let Some(info) = store.info(&name) else { continue };
            let kind: Vec<&str> =
                name.split('.').map(|p| if p.bytes().all(|b| b.is_ascii_digit()) { "N" } else { p }).collect();
            *kinds.entry(kind.join(".")).or_default().entry(format_name(&info.dtype)).or_default() += 1;
        }
    }
    Ok(kinds)
}

fn format_name(d: &DType) -> String {
    match d {
        DType::F32 => "F32".into(),
        DType::F16 => "F16".into(),
        DType::BF16 => "BF16".into(),
        DType::U8 => "U8".into(),
        DType::Other(name) => name.clone(),
    }
}
