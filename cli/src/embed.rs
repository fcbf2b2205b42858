//! `tl embed MODEL [--file LINES] [--output OUT.jsonl]`: each non-empty line of a text
//! file (stdin without `--file`, or with `-`) through an encoder model (BERT-family:
//! all-MiniLM-L6-v2, bge, e5, gte), one JSON line per input line:
//! `{"line": N, "embedding": [...]}` (N counts from 1, as editors do; empty lines are
//! skipped). The vectors are sentence-transformers' (`encode` with the model's own
//! pooling and normalisation) and the same bits in any `--batch`, since an encoder's
//! outputs for a text depend on that text alone (docs/spec/encoders.md). A line longer
//! than the model's `max_seq_length` is refused, naming it, unless `--truncate` cuts it
//! as sentence-transformers does. A GGUF encoder (docs/spec/model-dir.md, "GGUF encoders")
//! pools as its metadata says, normalised, and cuts at its context length.

use std::io::{BufRead, BufWriter, Write};
use std::path::PathBuf;

use anyhow::Context;
use tl_core::encoder_text::Texts;
use tl_core::EncodeInput;
use tl_families::flags::{EngineArgs, ModelArg};

/// Embed the lines of a file with an encoder model, to JSONL.
#[derive(clap::Parser, Debug, Clone)]
#[command(name = "embed", version, about)]
pub struct EmbedArgs {
    /// The model (MODEL or --model): an encoder directory, or a BERT or nomic-bert GGUF
    /// file as llama.cpp's converter writes it.
    #[command(flatten)]
    pub model: ModelArg,
    /// The lines to embed; `-` or absent: stdin.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Write the JSON lines here instead of stdout.
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    /// Lines per encode call (the vectors are the same for any value).
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Cut a line longer than the model's max_seq_length instead of stopping at it.
    #[arg(long)]
    pub truncate: bool,
    /// At the end, print one JSON line to stderr: lines, tokens and the seconds from the
    /// first line read to the last vector written (model loading excluded).
    #[arg(long)]
    pub stats: bool,
    /// The engine flags every model-loading command shares.
    #[command(flatten)]
    pub engine: EngineArgs,
}

impl EmbedArgs {
    /// Run it.
    pub fn run(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.batch >= 1, "--batch {}: need at least 1", self.batch);
        let path = self.model.path()?;
        let cfg = self.engine.engine()?;
        self.engine.size_candle_pool();
        let runner = tl_core::ModelRunner::load(path, &cfg)?;
        let info = runner.encoder_info().copied().ok_or_else(|| {
            anyhow::anyhow!(
                "{}: not an encoder model (tl embed runs BERT-family encoders; a decoder embedding model is served: tl serve, /v1/embeddings)",
                path.display()
            )
        })?;
        anyhow::ensure!(
            info.vector.is_some(),
            "{}: the model gives no pooled vector (a cross-encoder scores pairs: tl serve, /v1/rerank)",
            path.display()
        );
        let texts = Texts::load(runner.config())?;
        let input: Box<dyn BufRead> = match self.file.as_deref() {
            None => Box::new(std::io::stdin().lock()),
            Some(p) if p.as_os_str() == "-" => Box::new(std::io::stdin().lock()),
            Some(p) => Box::new(std::io::BufReader::new(
                std::fs::File::open(p).with_context(|| format!("{}: cannot open", p.display()))?,
            )),
        };
        let out: Box<dyn Write> = match &self.output {
            None => Box::new(std::io::stdout().lock()),
            Some(p) => Box::new(std::fs::File::create(p).with_context(|| format!("{}: cannot create", p.display()))?),
        };
        let mut out = BufWriter::new(out);
        let t0 = std::time::Instant::now();
        let (mut lines, mut tokens) = (0usize, 0usize);
        let mut pending: Vec<(usize, tl_core::encoder_text::Tokens)> = Vec::with_capacity(self.batch);
        let flush = |pending: &mut Vec<(usize, tl_core::encoder_text::Tokens)>, out: &mut dyn Write| {
            if pending.is_empty() {
                return Ok::<(), anyhow::Error>(());
            }
            let inputs: Vec<EncodeInput<'_>> = pending.iter().map(|(_, t)| t.input()).collect();
            let encoded = runner.encode(&inputs, false)?;
            for ((line, _), e) in pending.iter().zip(encoded) {
                let v = e.vector.ok_or_else(|| anyhow::anyhow!("line {line}: the model gave no vector"))?;
                writeln!(out, "{}", serde_json::json!({"line": line, "embedding": v}))?;
            }
            pending.clear();
            Ok(())
        };
        for (i, line) in input.lines().enumerate() {
            let n = i + 1;
            let line = line.with_context(|| format!("line {n}: cannot read (not UTF-8?)"))?;
            if line.is_empty() {
                continue;
            }
            let (t, cut) = texts.text_cut(&line).with_context(|| format!("line {n}"))?;
            anyhow::ensure!(
                !cut || self.truncate,
                "line {n} is longer than the model's {} tokens (max_seq_length): pass --truncate to cut it",
                texts.max_seq_length()
            );
            lines += 1;
            tokens += t.ids.len();
            pending.push((n, t));
            if pending.len() == self.batch {
                flush(&mut pending, &mut out)?;
            }
        }
        flush(&mut pending, &mut out)?;
        out.flush()?;
        if self.stats {
            let seconds = t0.elapsed().as_secs_f64();
            eprintln!("{}", serde_json::json!({"lines": lines, "tokens": tokens, "seconds": seconds}));
        }
        Ok(())
    }

    /// The engine configuration this command loads with.
    pub fn engine_config(&self) -> anyhow::Result<tl_core::EngineConfig> {
        self.engine.engine()
    }
}
