//! `tl bench` (and the deprecated `bench` alias): forward speed of a tl model on synthetic tokens.
//!
//! `tl bench MODEL [--prompt-tokens N] [--decode-tokens D] [--batch B1,B2,..] [--repeats R]
//! [--threads T] [--weights f32|native|int4]` measures
//! - prefill: one N-token prompt in one step (what llama-bench calls `pp N`);
//! - decode: one sequence, one token a step, D steps after that prompt (llama-bench's
//!   `tg D` at depth N, `-d N`);
//! - batched decode, for each B > 1 in `--batch`: B sequences, each prefilled with its own
//!   N-token prompt, then decoding one token each per step together, D steps.
//!
//! Each measurement runs once untimed (a short warm-up for decode), then R times; the
//! table gives the median rate and the range. After the table, one JSON object per
//! configuration (batch 1, then each B), one per line, for scripts (scripts/bench_compare.sh).
//!
//! Token ids are synthetic (`i * 7919 % vocab`): speed does not depend on which ids run.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use serde_json::{json, Value};
use tl_core::{ForwardBatch, ForwardSeq, ModelRunner};
use tl_families::flags::{fail, parse_or_exit, EngineArgs, ModelArg};

/// Measure prefill and decode speed of a tl model.
#[derive(clap::Parser, Debug, Clone)]
#[command(name = "bench", version, about)]
pub struct BenchArgs {
    /// The model (MODEL or --model).
    #[command(flatten)]
    pub model: ModelArg,
    /// Prompt length: the prefill step, and the context each decode starts from.
    #[arg(long, default_value_t = 128)]
    pub prompt_tokens: usize,
    /// Decode steps per measurement (0: prefill only).
    #[arg(long, default_value_t = 128)]
    pub decode_tokens: usize,
    /// Batch sizes of the batched decode, comma-separated; 1 is the single-sequence decode,
    /// always measured, so `--batch 1` measures only prefill and single decode.
    #[arg(long, default_value = "8,32", value_delimiter = ',')]
    pub batch: Vec<usize>,
    /// Timed repetitions of each measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Skip the untimed prefill before the timed ones (a 16k-token prompt's prefill takes
    /// minutes; `llama-bench --no-warmup` beside it). Decode keeps its short warm-up.
    #[arg(long)]
    pub no_prefill_warmup: bool,
    /// Print only the JSON lines (no table).
    #[arg(long)]
    pub json_only: bool,
    /// Run every kernel on this instruction set instead of the fastest this CPU has, to
    /// measure each path (all give the same bits): portable, avx2 or avx512.
    #[arg(long, value_parser = ["portable", "avx2", "avx512"])]
    pub path: Option<String>,
    /// A LoRA adapter, PATH or PATH@SCALE (the cost of adapters beside the base model's
    /// figures). Repeatable: sequence s runs under the (s mod n)-th, so `--batch 4` with
    /// four `--lora` measures a step whose rows use four different adapters.
    #[arg(long = "lora", value_name = "PATH[@SCALE]")]
    pub loras: Vec<String>,
    /// The engine flags every model-loading command shares.
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Decode steps of the untimed warm-up before each decode measurement: enough to touch
/// every weight and the code paths, without a whole extra run of a large batch.
const DECODE_WARMUP_STEPS: usize = 4;

/// Synthetic prompt of sequence `s`: different ids per sequence, all below `vocab`.
fn prompt(s: usize, n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|i| ((s * n + i) * 7919 % vocab) as u32).collect()
}

/// `f(true)` once untimed (the warm-up), then `f(false)` `repeats` times; returns each
/// timed run's seconds.
fn timed(repeats: usize, mut f: impl FnMut(bool) -> anyhow::Result<()>) -> anyhow::Result<Vec<f64>> {
    f(true)?;
    let mut secs = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let t = Instant::now();
        f(false)?;
        secs.push(t.elapsed().as_secs_f64());
    }
    Ok(secs)
}

/// Rates of `tokens` per run over each run's seconds: (median, min, max) tok/s.
/// With an even count the median is the mean of the two middle rates.
fn rates(tokens: usize, secs: &[f64]) -> (f64, f64, f64) {
    let mut r: Vec<f64> = secs.iter().map(|s| tokens as f64 / s.max(1e-9)).collect();
    r.sort_by(f64::total_cmp);
    let median = (r[(r.len() - 1) / 2] + r[r.len() / 2]) / 2.0;
    (median, r[0], r[r.len() - 1])
}

/// One measurement's result.
struct Measure {
    what: String,
    tokens: usize,
    median: f64,
    min: f64,
    max: f64,
}

impl Measure {
    fn new(what: String, tokens: usize, secs: &[f64]) -> Measure {
        let (median, min, max) = rates(tokens, secs);
        Measure { what, tokens, median, min, max }
    }

    fn print(&self) {
        let ms = 1e3 / self.median;
        println!(
            "{:<30} {:>7} {ms:>11.2} {:>11.1}   ({:.1} .. {:.1})",
            self.what, self.tokens, self.median, self.min, self.max
        );
    }
}

/// A `/proc/self/status` field in KiB (Linux), as MiB; `None` elsewhere.
fn proc_status_mib(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))?;
    let kib: f64 = line[field.len() + 1..].split_whitespace().next()?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Prefill `prompts` (one step each, in order) into `tables`.
/// `first` is the index of `prompts[0]`'s sequence (for its adapter).
fn prefill(
    r: &mut ModelRunner,
    (prompts, first): (&[Vec<u32>], usize),
    tables: &[Vec<u32>],
    lora: Lora<'_>,
) -> anyhow::Result<()> {
    for (i, (p, t)) in prompts.iter().zip(tables).enumerate() {
        let adapter = lora_of(lora, first + i);
        r.forward(&ForwardBatch { seqs: vec![ForwardSeq { tokens: p, start: 0, blocks: t, adapter }] })?;
    }
    Ok(())
}

/// `steps` decode steps of every sequence in `tables` together, positions after `start`.
/// The adapters of the benchmark's sequences: sequence s runs under the (s mod n)-th;
/// none when empty.
type Lora<'a> = &'a [tl_core::Applied<'a>];

/// Sequence `s`'s adapter.
fn lora_of<'a>(lora: Lora<'a>, s: usize) -> Option<tl_core::Applied<'a>> {
    (!lora.is_empty()).then(|| lora[s % lora.len()])
}

fn decode(
    r: &mut ModelRunner,
    tables: &[Vec<u32>],
    (start, steps): (usize, usize),
    vocab: usize,
    lora: Lora<'_>,
) -> anyhow::Result<()> {
    let ids: Vec<[u32; 1]> = (0..tables.len()).map(|s| [(s * 7919 % vocab) as u32]).collect();
    for k in 0..steps {
        let seqs = tables
            .iter()
            .zip(&ids)
            .enumerate()
            .map(|(i, (t, id))| ForwardSeq { tokens: id, start: start + k, blocks: t, adapter: lora_of(lora, i) })
            .collect();
        r.forward(&ForwardBatch { seqs })?;
    }
    Ok(())
}

/// Worker threads the runner uses: `--threads`, or with 0 what rayon picks for a pool of
/// 0 threads (`RAYON_NUM_THREADS`, else one per core).
fn effective_threads(flag: usize) -> usize {
    if flag > 0 {
        return flag;
    }
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn run(cli: &BenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(cli.prompt_tokens > 0, "--prompt-tokens must be at least 1");
    anyhow::ensure!(cli.repeats > 0, "--repeats must be at least 1");
    anyhow::ensure!(cli.batch.iter().all(|&b| b > 0), "--batch sizes must be at least 1");
    let (n, steps) = (cli.prompt_tokens, cli.decode_tokens);
    // Batch sizes above 1, ascending, once each (1 is the single-sequence decode).
    let mut batches: Vec<usize> = cli.batch.iter().copied().filter(|&b| b > 1).collect();
    batches.sort_unstable();
    batches.dedup();
    if steps == 0 {
        batches.clear();
    }
    let max_b = batches.last().copied().unwrap_or(1);

    let model = cli.model.path()?;
    if let Some(p) = &cli.path {
        let path = match p.as_str() {
            "portable" => tl_quant::Path::Portable,
            "avx2" => tl_quant::Path::Avx2,
            _ => tl_quant::Path::Avx512,
        };
        path.choose().map_err(|e| anyhow::anyhow!("--path {p}: {e}"))?;
    }
    let mut cfg = cli.engine_config()?;
    cli.engine.size_candle_pool();
    // Room for the largest batch, every sequence at its full length (the smaller batches and
    // the single-sequence runs reuse the first sequences' blocks).
    let per_seq = (n + steps).div_ceil(cfg.kv.block_tokens.max(1) as usize);
    cfg.kv.n_blocks = Some(u32::try_from(max_b * per_seq).context("too many KV blocks")?);
    cfg.max_seqs = cfg.max_seqs.max(max_b);
    cfg.prefill_chunk = cfg.prefill_chunk.max(n);
    // A hybrid model's state slot on every block row: each measured step may end on any row
    // (the forward reads and writes the state there), and a given block count buys a slot
    // per row.
    cfg.kv.state_snapshot_tokens = cfg.kv.block_tokens as usize;
    let t0 = Instant::now();
    let mut r = ModelRunner::load(model, &cfg).with_context(|| format!("{}", model.display()))?;
    let t_lora = Instant::now();
    let adapters = cli.loras.iter().map(|l| crate::load_lora(&r, l)).collect::<anyhow::Result<Vec<_>>>()?;
    let lora_load_ms = (!adapters.is_empty()).then(|| t_lora.elapsed().as_secs_f64() * 1e3);
    let applied: Vec<tl_core::Applied<'_>> =
        adapters.iter().map(|(a, s)| tl_core::Applied { adapter: a, scale: *s }).collect();
    let lora: Lora<'_> = &applied;
    let load_s = t0.elapsed().as_secs_f64();
    let rss_after_load = proc_status_mib("VmRSS");
    let mib = |b: usize| (b as f64 / (1024.0 * 1024.0) * 10.0).round() / 10.0;
    let weights_mib = r.weight_bytes().map(mib);
    let kv_pool_mib = mib(r.kv_pool_bytes()?);
    let state_pool_mib = mib(r.state_pool_bytes());
    if r.encoder_info().is_some() {
        let shape = (n, batches.as_slice(), cli.repeats);
        return crate::bench_encoder::run(&r, model, shape, (load_s, effective_threads(cfg.threads), !cli.json_only));
    }
    let c = r.config().clone();
    if let Some(max) = c.max_position_embeddings {
        anyhow::ensure!(n + steps <= max, "prompt + decode = {} tokens pass the context of {max}", n + steps);
    }
    let vocab = c.vocab_size;
    // Every entry of the model's whole context allocated: a page per layer group and
    // block, and a hybrid model's state slots (alloc_table: a slot where its state column
    // keeps one, not a page).
    let tables: Vec<Vec<u32>> = (0..max_b).map(|_| r.alloc_table((n + steps).max(1))).collect::<Result<_, _>>()?;
    let prompts: Vec<Vec<u32>> = (0..max_b).map(|s| prompt(s, n, vocab)).collect();
    let threads = effective_threads(cfg.threads);
    let isa = format!("{:?}", tl_quant::Path::best());
    let table = !cli.json_only;

    if table {
        println!(
            "model {} ({} layers, hidden {}, vocab {vocab}); threads {threads}; weights {}; isa {isa}; \
             loaded in {load_s:.2} s",
            model.display(),
            r.kv_geometry()?.n_layers,
            r.hidden_size(),
            cli.engine.weights,
        );
        println!("{:<30} {:>7} {:>11} {:>11}   (min .. max tok/s)", "measure", "tokens", "ms/token", "tokens/s");
    }

    let prefill_s = if cli.no_prefill_warmup {
        let mut secs = Vec::with_capacity(cli.repeats);
        for _ in 0..cli.repeats {
            let t = Instant::now();
            prefill(&mut r, (&prompts[..1], 0), &tables[..1], lora)?;
            secs.push(t.elapsed().as_secs_f64());
        }
        secs
    } else {
        timed(cli.repeats, |_| prefill(&mut r, (&prompts[..1], 0), &tables[..1], lora))?
    };
    let pre = Measure::new(format!("prefill 1 x {n}"), n, &prefill_s);
    if table {
        pre.print();
    }
    // (batch, decode measure, seconds of prefilling the batch's prompts once)
    let mut results: Vec<(usize, Option<Measure>, Option<f64>)> = Vec::new();
    if steps > 0 {
        // The first sequence's prompt is in the cache from the prefill runs; each run
        // decodes the same positions again, overwriting them.
        let warm = steps.min(DECODE_WARMUP_STEPS);
        let single =
            timed(cli.repeats, |w| decode(&mut r, &tables[..1], (n, if w { warm } else { steps }), vocab, lora))?;
        let m = Measure::new("decode 1 seq".into(), steps, &single);
        if table {
            m.print();
        }
        results.push((1, Some(m), None));
        // Sequences 1.. get their prompts as each larger batch needs them (timed once).
        let mut filled = 1;
        for &b in &batches {
            let t = Instant::now();
            prefill(&mut r, (&prompts[filled..b], filled), &tables[filled..b], lora)?;
            let fill_s = (b > filled).then(|| t.elapsed().as_secs_f64() / (b - filled) as f64);
            filled = b;
            let batched =
                timed(cli.repeats, |w| decode(&mut r, &tables[..b], (n, if w { warm } else { steps }), vocab, lora))?;
            let m = Measure::new(format!("decode {b} seqs together"), b * steps, &batched);
            if table {
                m.print();
            }
            results.push((b, Some(m), fill_s));
        }
    } else {
        results.push((1, None, None));
    }
    let peak = proc_status_mib("VmHWM");
    if table && cfg.activations == tl_core::Activations::Exact && tl_core::activations_matter(model, &cfg.weights)? {
        // What the user compares first is tok/s beside llama.cpp, which quantizes its
        // activations on these files: say which mode this was and where the other is.
        println!(
            "note: exact activations (Hugging Face's numbers); --activations q8 runs this file's \
             quantized layers on int8 dot products as llama.cpp does: faster on most CPUs, not \
             the same numbers (README, \"Which numbers\")"
        );
    }

    let round = |x: f64, d: i32| {
        let p = 10f64.powi(d);
        (x * p).round() / p
    };
    let opt = |x: Option<f64>| x.map(|v| round(v, 1));
    for (b, m, fill_s) in &results {
        let line = json!({
            "tool": "tl",
            "lora": match cli.loras.as_slice() { [] => Value::Null, [one] => json!(one), many => json!(many) },
            "lora_load_ms": lora_load_ms.map(|ms| round(ms, 1)),
            "model": model.display().to_string(),
            "weights": cli.engine.weights,
            "activations": cfg.activations.to_string(),
            "isa": isa,
            "threads": threads,
            "batch": b,
            "prompt_tokens": n,
            "decode_tokens": steps,
            "repeats": cli.repeats,
            "prefill_tok_s": round(pre.median, 2),
            "prefill_tok_s_min": round(pre.min, 2),
            "prefill_tok_s_max": round(pre.max, 2),
            // Aggregate over the batch's sequences: B * D tokens per run.
            "decode_tok_s": m.as_ref().map(|m| round(m.median, 2)),
            "decode_tok_s_min": m.as_ref().map(|m| round(m.min, 2)),
            "decode_tok_s_max": m.as_ref().map(|m| round(m.max, 2)),
            // The batch's other prompts, prefilled one step each, timed once (per prompt).
            "batch_prefill_tok_s": fill_s.map(|s| round(n as f64 / s.max(1e-9), 2)),
            "load_s": round(load_s, 3),
            "rss_after_load_mib": opt(rss_after_load),
            // What load keeps: the weights as packed for the kernels, and the KV pool
            // (reserved at load; its pages become resident as sequences fill them).
            "weights_mib": weights_mib,
            "kv_pool_mib": kv_pool_mib,
            "state_pool_mib": state_pool_mib,
            "peak_rss_mib": opt(peak),
        });
        println!("{line}");
    }

    let pool = r.pool();
    let mut pool = pool.lock().map_err(|_| anyhow::anyhow!("KV pool lock poisoned"))?;
    for t in tables {
        tl_core::release_all(pool.as_mut(), t)?;
    }
    Ok(())
}

impl BenchArgs {
    /// The engine configuration before the pool is sized for the largest batch (so a
    /// --kv-memory / --kv-blocks would be ignored: it is refused).
    pub fn engine_config(&self) -> anyhow::Result<tl_core::EngineConfig> {
        self.engine.refuse_pool_size("bench")?;
        self.engine.engine()
    }

    /// Run the command.
    pub fn run(&self) -> anyhow::Result<()> {
        run(self)
    }
}

/// The `bench` alias binary's main.
pub fn main() -> ExitCode {
    match parse_or_exit::<BenchArgs>().run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}
