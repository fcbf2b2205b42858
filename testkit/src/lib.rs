//! Dev-only: what every family's tests share, so none copies it. A test binary writes
//! `tl_testkit::fixtures!();` (or includes a module that does) to get `fixture(name)`,
//! `load(name, threads, weights)` and `reference(name)` over its own crate's
//! `tests/fixtures/`; then:
//!
//! - [`run_in_steps`], [`greedy`], [`alloc`], [`release`]: token runs through the pool;
//! - [`check_hf`], [`check_greedy`]: a model against its reference.json (Hugging Face's
//!   float32 last logits within the f16 cache's tolerance; greedy tokens equal until a
//!   near tie);
//! - [`check_invariance`]: chunked prefill, a batch of every prompt, other thread counts
//!   and `--weights f32`, each the same bits as the prompt alone;
//! - [`check_same_bits`]: two loads of one model (a GGUF and its safetensors) give the
//!   same logits bit for bit;
//! - [`check_invariance_kv`], [`q8_distance`]: the same invariances on another KV backend
//!   (`"q8-slab"`), and how far the q8 cache moves the logits from the f16 one;
//! - [`check_nested`], [`check_nested_refusals`]: a multimodal checkpoint nesting a text
//!   model gives the text-only checkpoint's bits, and an unknown nesting is refused.
//!
//! - [`encoders`]: an encoder's reference numbers and its batch invariance bit for bit.
//!
//! Golden data always comes from the fixture's generator script (transformers), never
//! from the code under test.
#![deny(missing_docs)]

pub mod encoders;
mod gguf;
mod nested;

use std::path::Path;

use serde_json::Value;
use tl_core::{Activations, EngineConfig, ForwardBatch, ForwardSeq, KvConfig, ModelRunner, Weights};

// Name the KV plugin crate so its registrations ("f16-slab", "q8-slab") are linked.
use tl_kv as _;

pub use gguf::{gguf_error, gguf_respelled, gguf_with_u32_meta};
pub use nested::{check_nested, check_nested_refusals};

/// `fixture(name)`, `load(name, threads, weights)` and `reference(name)` over the calling
/// crate's `tests/fixtures/` (the macro expands `CARGO_MANIFEST_DIR` in that crate).
#[macro_export]
macro_rules! fixtures {
    () => {
        /// The fixture directory `name` of this crate.
        #[allow(dead_code)]
        pub fn fixture(name: &str) -> std::path::PathBuf {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
        }

        /// Load fixture `name`.
        #[allow(dead_code)]
        pub fn load(name: &str, threads: usize, weights: tl_core::Weights) -> tl_core::ModelRunner {
            $crate::load_path(&fixture(name), threads, weights)
        }

        /// The reference prompts of fixture `name`.
        #[allow(dead_code)]
        pub fn reference(name: &str) -> Vec<$crate::RefPrompt> {
            $crate::reference_at(&fixture(name))
        }
    };
}

/// Token positions per KV block in these tests: small, so every prompt spans blocks.
pub const B: u32 = 4;

/// Runner settings for the fixtures: blocks of [`B`] positions, 256 of them, `threads`
/// (0: every core) and the weight mode.
pub fn engine(threads: usize, weights: Weights) -> EngineConfig {
    engine_kv(threads, weights, F16)
}

/// The f16 KV backend's name (the default).
pub const F16: &str = "f16-slab";
/// The q8 KV backend's name.
pub const Q8: &str = "q8-slab";

/// [`engine`] with the KV backend named `kv` (`"f16-slab"`, `"q8-slab"`).
pub fn engine_kv(threads: usize, weights: Weights, kv: &str) -> EngineConfig {
    EngineConfig {
        // A hybrid's state snapshot on every block: tests cut steps anywhere.
        kv: KvConfig {
            backend: kv.into(),
            block_tokens: B,
            n_blocks: Some(256),
            state_snapshot_tokens: 0,
            ..KvConfig::default()
        },
        threads,
        weights,
        ..EngineConfig::default()
    }
}

/// Load the model at `path` (a directory or a GGUF file) with [`engine`]'s settings.
pub fn load_path(path: &Path, threads: usize, weights: Weights) -> ModelRunner {
    load_path_kv(path, threads, weights, F16)
}

/// [`load_path`] with the KV backend named `kv`.
pub fn load_path_kv(path: &Path, threads: usize, weights: Weights, kv: &str) -> ModelRunner {
    ModelRunner::load(path, &engine_kv(threads, weights, kv))
        .unwrap_or_else(|e| panic!("loading {} with {kv}: {e}", path.display()))
}

/// One prompt of a reference.json.
pub struct RefPrompt {
    /// The prompt's text.
    pub text: String,
    /// Its token ids.
    pub ids: Vec<u32>,
    /// Hugging Face's float32 logits after its last token.
    pub last_logits: Vec<f32>,
    /// The tolerance the generator computed ([`tolerance`]'s rule).
    pub tolerance: f32,
    /// Hugging Face's greedy continuation.
    pub greedy: Vec<u32>,
    /// Its top-1 minus top-2 logit at each step.
    pub margins: Vec<f64>,
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array().expect("an array").iter().map(|x| x.as_u64().expect("an id") as u32).collect()
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array().expect("an array").iter().map(|x| x.as_f64().expect("a number")).collect()
}

/// The prompts of the reference.json in fixture directory `dir`.
pub fn reference_at(dir: &Path) -> Vec<RefPrompt> {
    let path = dir.join("reference.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let json: Value = serde_json::from_str(&text).expect("reference.json is JSON");
    json["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .map(|p| RefPrompt {
            text: p["text"].as_str().expect("text").to_string(),
            ids: u32s(&p["ids"]),
            // Written as f32 values widened to f64: `as f32` is exact.
            last_logits: f64s(&p["last_logits"]).into_iter().map(|x| x as f32).collect(),
            tolerance: p["tolerance"].as_f64().expect("tolerance") as f32,
            greedy: u32s(&p["greedy"]["tokens"]),
            margins: f64s(&p["greedy"]["margins"]),
        })
        .collect()
}

/// Fresh blocks for `positions` positions (one page per layer group per `B` positions).
pub fn alloc(r: &ModelRunner, positions: usize) -> Vec<u32> {
    r.alloc_table(positions).expect("enough blocks")
}

/// Give `blocks` back to the pool (entries already given back skipped).
pub fn release(r: &ModelRunner, blocks: &[u32]) {
    let pool = r.pool();
    let mut pool = pool.lock().expect("pool lock");
    tl_core::release_all(pool.as_mut(), blocks.iter().copied()).expect("release");
}

/// Run `tokens` as one sequence in fresh blocks, in steps of the given sizes (the last
/// step takes the rest), and return the last step's logits.
pub fn run_in_steps(r: &mut ModelRunner, tokens: &[u32], steps: &[usize]) -> Vec<f32> {
    let blocks = alloc(r, tokens.len());
    let mut start = 0;
    let mut sizes = steps.iter().copied();
    let mut last = Vec::new();
    while start < tokens.len() {
        let n = sizes.next().unwrap_or(tokens.len() - start).min(tokens.len() - start);
        last = r.forward(&ForwardBatch::single(&tokens[start..start + n], start, &blocks)).expect("forward").data;
        start += n;
    }
    release(r, &blocks);
    last
}

/// The greedy choice: the largest logit, ties to the lowest id.
pub fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best as u32
}

/// `prompt` then `steps` greedy tokens, one decode step each; returns the new tokens.
pub fn greedy(r: &mut ModelRunner, prompt: &[u32], steps: usize) -> Vec<u32> {
    let blocks = alloc(r, prompt.len() + steps);
    let mut logits = r.forward(&ForwardBatch::single(prompt, 0, &blocks)).expect("prefill").data;
    let mut out = Vec::with_capacity(steps);
    for k in 0..steps {
        let t = argmax(&logits);
        out.push(t);
        if k + 1 < steps {
            logits = r.forward(&ForwardBatch::single(&[t], prompt.len() + k, &blocks)).expect("decode").data;
        }
    }
    release(r, &blocks);
    out
}

/// The largest |x|.
pub fn max_abs(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, &v| m.max(v.abs()))
}

/// The largest |a - b| (same lengths).
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0.0f32, |m, (&x, &y)| m.max((x - y).abs()))
}

/// The bit patterns, for comparisons bit for bit.
pub fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// The f16 cache's bound (seed 2.4), every family's: 1e-3 of the largest |logit|, or 2e-2.
pub fn tolerance(hf: &[f32]) -> f32 {
    (1e-3 * max_abs(hf)).max(2e-2)
}

/// Each prompt's last logits within [`tolerance`] of Hugging Face's (and the reference's
/// own tolerance is that rule); `label` names the model in messages.
pub fn check_hf(r: &mut ModelRunner, refs: &[RefPrompt], label: &str) {
    for p in refs {
        let ours = run_in_steps(r, &p.ids, &[]);
        let diff = max_abs_diff(&ours, &p.last_logits);
        let tol = tolerance(&p.last_logits);
        assert!((tol - p.tolerance).abs() < 1e-6, "reference tolerance {} disagrees with the rule {tol}", p.tolerance);
        eprintln!("{label} {:?} ({} tokens): max |ours - HF| = {diff:.3e} (tolerance {tol:.3e})", p.text, p.ids.len());
        assert!(diff <= tol, "{label} prompt {:?}: max |ours - HF| = {diff} > {tol}", p.text);
    }
}

/// Greedy decoding, one token a step over the pool, equals Hugging Face's run until a step
/// whose top-1/top-2 margin is below the tolerance (only a near tie may part them), and
/// the first token always.
pub fn check_greedy(r: &mut ModelRunner, refs: &[RefPrompt], label: &str) {
    for p in refs {
        let tol = tolerance(&p.last_logits) as f64;
        let ours = greedy(r, &p.ids, p.greedy.len());
        let mut matched = 0;
        for (k, (&a, &b)) in ours.iter().zip(&p.greedy).enumerate() {
            if a != b {
                // Only a near tie at this step may part the sequences.
                assert!(
                    p.margins[k] < tol,
                    "{label} {:?}: step {k}: ours {a}, HF {b}, margin {}",
                    p.text,
                    p.margins[k]
                );
                break;
            }
            matched += 1;
        }
        eprintln!("{label} {:?}: {matched} of {} greedy tokens equal HF's", p.text, p.greedy.len());
        assert!(matched > 0, "{label} {:?}: the first greedy token differs", p.text);
    }
}

/// Every prompt alone through `r` (one step each).
pub fn alone(r: &mut ModelRunner, refs: &[RefPrompt]) -> Vec<Vec<f32>> {
    refs.iter().map(|p| run_in_steps(r, &p.ids, &[])).collect()
}

/// The invariances every family keeps, bit for bit, against `want` (each prompt alone in
/// one step on `r`): each prompt in the step sizes of `chunkings` (`[1; len]` always
/// added: one token a step), and all prompts in one step of a batch.
pub fn check_chunks_and_batch(r: &mut ModelRunner, refs: &[RefPrompt], want: &[Vec<f32>], chunkings: &[Vec<usize>]) {
    for (p, want) in refs.iter().zip(want) {
        let one_by_one = vec![1; p.ids.len()];
        for steps in std::iter::once(&one_by_one).chain(chunkings) {
            assert_eq!(bits(&run_in_steps(r, &p.ids, steps)), bits(want), "{:?} in steps {steps:?}", p.text);
        }
    }
    let tables: Vec<Vec<u32>> = refs.iter().map(|p| alloc(r, p.ids.len())).collect();
    let batch = ForwardBatch {
        seqs: refs
            .iter()
            .zip(&tables)
            .map(|(p, b)| ForwardSeq { tokens: &p.ids, start: 0, blocks: b, adapter: None })
            .collect(),
    };
    let together = r.forward(&batch).expect("forward");
    for (i, want) in want.iter().enumerate() {
        assert_eq!(bits(together.row(i)), bits(want), "prompt {i} differs in a batch");
    }
    for t in &tables {
        release(r, t);
    }
}

/// Prefill every prompt in one step, then `steps` greedy decode steps with every sequence
/// in each step; returns each step's logits rows `[step][sequence]`.
pub fn decode_together(r: &mut ModelRunner, prompts: &[&[u32]], steps: usize) -> Vec<Vec<Vec<f32>>> {
    let tables: Vec<Vec<u32>> = prompts.iter().map(|p| alloc(r, p.len() + steps)).collect();
    let mut next: Vec<Vec<u32>> = prompts.iter().map(|p| p.to_vec()).collect();
    let mut start = vec![0usize; prompts.len()];
    let mut out = Vec::new();
    for _ in 0..=steps {
        let seqs = next.iter().zip(&start).zip(&tables);
        let batch = ForwardBatch {
            seqs: seqs.map(|((t, &s), b)| ForwardSeq { tokens: t, start: s, blocks: b, adapter: None }).collect(),
        };
        let logits = r.forward(&batch).expect("forward");
        let rows: Vec<Vec<f32>> = (0..prompts.len()).map(|i| logits.row(i).to_vec()).collect();
        for (i, row) in rows.iter().enumerate() {
            start[i] += next[i].len();
            next[i] = vec![argmax(row)];
        }
        out.push(rows);
    }
    for t in &tables {
        release(r, t);
    }
    out
}

/// Greedy decode steps (one token each) of all prompts batched together give each
/// prompt's logits alone at every step, bit for bit: what a server with several users
/// runs (and, for a mixture of experts, rows of different sequences sharing experts).
pub fn check_batched_decode(r: &mut ModelRunner, refs: &[RefPrompt], steps: usize) {
    let prompts: Vec<&[u32]> = refs.iter().map(|p| p.ids.as_slice()).collect();
    let together = decode_together(r, &prompts, steps);
    for (i, p) in prompts.iter().enumerate() {
        let solo = decode_together(r, &[p], steps);
        for (k, (a, b)) in solo.iter().zip(&together).enumerate() {
            assert_eq!(bits(&a[0]), bits(&b[i]), "prompt {i}: decode step {k} differs in a batch");
        }
    }
}

/// Each prompt through `other` (another load of the same model: other threads, weight
/// mode, file) equals `want` bit for bit; `what` names the difference.
pub fn check_same_bits(other: &mut ModelRunner, refs: &[RefPrompt], want: &[Vec<f32>], what: &str) {
    for (p, want) in refs.iter().zip(want) {
        assert_eq!(bits(&run_in_steps(other, &p.ids, &[])), bits(want), "{what}: {:?}", p.text);
    }
}

/// [`check_chunks_and_batch`] and 12 steps of [`check_batched_decode`] on the model at
/// `path`, then 1 and 2 threads and `--weights f32`, each equal to the prompts alone bit
/// for bit.
pub fn check_invariance(path: &Path, refs: &[RefPrompt], chunkings: &[Vec<usize>]) {
    check_invariance_kv(path, refs, chunkings, F16);
}

/// The splits every invariance check runs on models from `load(threads)`: chunks and a
/// batch ([`check_chunks_and_batch`]), 12 steps of [`check_batched_decode`], 1 and 2
/// threads, each equal to the prompts alone bit for bit; returns those logits.
fn check_splits(load: impl Fn(usize) -> ModelRunner, refs: &[RefPrompt], chunkings: &[Vec<usize>]) -> Vec<Vec<f32>> {
    let mut r = load(0);
    let want = alone(&mut r, refs);
    check_chunks_and_batch(&mut r, refs, &want, chunkings);
    check_batched_decode(&mut r, refs, 12);
    check_same_bits(&mut load(1), refs, &want, "1 thread");
    check_same_bits(&mut load(2), refs, &want, "2 threads");
    want
}

/// [`check_invariance`] with the KV backend named `kv` (every load of the check uses it).
pub fn check_invariance_kv(path: &Path, refs: &[RefPrompt], chunkings: &[Vec<usize>], kv: &str) {
    let want = check_splits(|t| load_path_kv(path, t, Weights::Native, kv), refs, chunkings);
    check_same_bits(&mut load_path_kv(path, 0, Weights::F32, kv), refs, &want, "--weights f32");
}

/// Load the model at `path` with [`engine`]'s settings and `activations`.
pub fn load_with(path: &Path, threads: usize, activations: Activations) -> ModelRunner {
    let cfg = EngineConfig { activations, ..engine(threads, Weights::Native) };
    ModelRunner::load(path, &cfg).unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
}

/// [`check_invariance`]'s splits under `activations` (the int8 mode keeps them all; its
/// numbers are not `--weights f32`'s); returns the prompts' logits alone.
pub fn check_invariance_with(
    path: &Path,
    refs: &[RefPrompt],
    chunkings: &[Vec<usize>],
    activations: Activations,
) -> Vec<Vec<f32>> {
    check_splits(|t| load_with(path, t, activations), refs, chunkings)
}

/// How far the q8 cache moves a model from the f16 cache, per prompt of `refs` (only its
/// text and ids are read): the f16 cache's greedy run of `steps` tokens, the q8 cache fed
/// the same tokens, and max |logit diff| over every step's logits; and the q8 cache's own
/// greedy run, compared token by token. Printed with `label` (docs/kv.md quotes these
/// lines). Returns (largest diff, prompts whose greedy runs agree fully, the shortest
/// common greedy prefix).
pub fn q8_distance(path: &Path, refs: &[RefPrompt], steps: usize, label: &str) -> (f32, usize, usize) {
    let mut f16 = load_path_kv(path, 0, Weights::Native, F16);
    let mut q8 = load_path_kv(path, 0, Weights::Native, Q8);
    let (mut worst, mut same, mut common) = (0.0f32, 0, usize::MAX);
    for p in refs {
        let (a, la) = greedy_logits(&mut f16, &p.ids, steps, None);
        let (_, lb) = greedy_logits(&mut q8, &p.ids, steps, Some(&a));
        let diff = la.iter().zip(&lb).fold(0.0f32, |m, (x, y)| m.max(max_abs_diff(x, y)));
        let top = la.iter().fold(0.0f32, |m, x| m.max(max_abs(x)));
        let b = greedy(&mut q8, &p.ids, steps);
        let agree = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        eprintln!(
            "q8-vs-f16 {label} {:?} ({} tokens): max |logit diff| {diff:.3e} over {steps} steps (max |logit| {top:.2}); \
             greedy {agree}/{steps} equal",
            p.text,
            p.ids.len()
        );
        worst = worst.max(diff);
        same += usize::from(agree == steps);
        common = common.min(agree);
    }
    (worst, same, common)
}

/// `prompt` then `steps` decode steps: the greedy choice at each, or the given `forced`
/// tokens; returns the tokens and every step's logits.
fn greedy_logits(
    r: &mut ModelRunner,
    prompt: &[u32],
    steps: usize,
    forced: Option<&[u32]>,
) -> (Vec<u32>, Vec<Vec<f32>>) {
    let blocks = alloc(r, prompt.len() + steps);
    let mut logits = vec![r.forward(&ForwardBatch::single(prompt, 0, &blocks)).expect("prefill").data];
    let mut out = Vec::with_capacity(steps);
    for k in 0..steps {
        let t = forced.map_or_else(|| argmax(&logits[k]), |f| f[k]);
        out.push(t);
        if k + 1 < steps {
            logits.push(r.forward(&ForwardBatch::single(&[t], prompt.len() + k, &blocks)).expect("decode").data);
        }
    }
    release(r, &blocks);
    (out, logits)
}

/// A temporary copy of the model directory `dir` (config.json and model.safetensors) with
/// its config.json edited by `edit`: for tests of what a bad config gets.
pub fn with_config(dir: &Path, edit: impl FnOnce(&mut Value)) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(dir.join("config.json")).expect("config.json");
    let mut cfg: Value = serde_json::from_str(&text).expect("config.json is JSON");
    edit(&mut cfg);
    std::fs::write(tmp.path().join("config.json"), cfg.to_string()).expect("write config");
    std::fs::copy(dir.join("model.safetensors"), tmp.path().join("model.safetensors")).expect("copy weights");
    tmp
}

/// The error loading the model at `path` gets (a panic if it loads).
pub fn load_error(path: &Path) -> String {
    match ModelRunner::load(path, &EngineConfig::default()) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e.to_string(),
    }
}
