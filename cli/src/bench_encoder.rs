//! `tl bench` on an encoder model (docs/spec/encoders.md): inputs per second at batch 1
//! and at each `--batch` size, inputs of `--prompt-tokens` tokens (the model's length at
//! most) made of ordinary ids between `[CLS]`-like first and `[SEP]`-like last ids, each
//! batch one `ModelRunner::encode` call, the median of `--repeats` runs after one untimed
//! warm-up. One table row and one JSON line per batch size (`"sentences_s"`).

use std::time::Instant;

use serde_json::json;
use tl_core::{EncodeInput, ModelRunner};

/// The inputs of one measurement: `b` inputs of `n` tokens, distinct per input.
fn inputs(b: usize, n: usize, vocab: usize) -> Vec<Vec<u32>> {
    (0..b)
        .map(|s| {
            (0..n)
                .map(|i| match i {
                    0 => 1,
                    _ if i == n - 1 => 2,
                    _ => (1000 + (s * 7919 + i * 104_729) % vocab.saturating_sub(1000).max(1)) as u32 % vocab as u32,
                })
                .collect()
        })
        .collect()
}

/// Measure, print, and return nothing: the encoder's counterpart of bench's decode rows.
pub(crate) fn run(
    r: &ModelRunner,
    model: &std::path::Path,
    (tokens, batches, repeats): (usize, &[usize], usize),
    (load_s, threads, table): (f64, usize, bool),
) -> anyhow::Result<()> {
    let info = r.encoder_info().copied().ok_or_else(|| anyhow::anyhow!("not an encoder"))?;
    let n = tokens.clamp(2, info.max_tokens);
    let vocab = r.config().vocab_size;
    let mut sizes: Vec<usize> = std::iter::once(1).chain(batches.iter().copied()).collect();
    sizes.sort_unstable();
    sizes.dedup();
    if table {
        println!(
            "encoder {} (hidden {}, max {} tokens); threads {threads}; loaded in {load_s:.2} s",
            model.display(),
            info.hidden_size,
            info.max_tokens
        );
        println!("{:<30} {:>7} {:>11} {:>11}", "measure", "tokens", "ms/batch", "inputs/s");
    }
    for b in sizes {
        let ids = inputs(b, n, vocab);
        let batch: Vec<EncodeInput<'_>> = ids.iter().map(|x| EncodeInput::ids(x)).collect();
        r.encode(&batch, false)?;
        let mut secs = Vec::with_capacity(repeats);
        for _ in 0..repeats {
            let t = Instant::now();
            r.encode(&batch, false)?;
            secs.push(t.elapsed().as_secs_f64());
        }
        secs.sort_by(f64::total_cmp);
        let median = secs[secs.len() / 2];
        let per_s = b as f64 / median.max(1e-9);
        if table {
            println!("{:<30} {:>7} {:>11.2} {:>11.1}", format!("encode {b} x {n}"), b * n, median * 1e3, per_s);
        }
        let line = json!({
            "tool": "tl",
            "model": model.display().to_string(),
            "threads": threads,
            "batch": b,
            "tokens_per_input": n,
            "repeats": repeats,
            "sentences_s": (per_s * 100.0).round() / 100.0,
            "ms_per_batch": (median * 1e5).round() / 100.0,
            "load_s": (load_s * 1000.0).round() / 1000.0,
        });
        println!("{line}");
    }
    Ok(())
}
