//! Shared by the Llama and Qwen2 tests (tl-arch-qwen2 includes this file): the fixtures
//! of the crate under test, runner settings, and running token runs through the pool in
//! chosen steps.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::PathBuf;

use serde_json::Value;
use tl_core::{EngineConfig, ForwardBatch, KvConfig, ModelRunner, Weights};

// Name the KV plugin crate so its registration ("f16-slab") is linked; each test file
// links its architecture crate (this module is shared with tl-arch-qwen2's tests).
use tl_kv as _;

/// Token positions per KV block in these tests: small, so every prompt spans blocks.
pub const B: u32 = 4;

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

pub fn engine(threads: usize, weights: Weights) -> EngineConfig {
    EngineConfig {
        kv: KvConfig { block_tokens: B, n_blocks: Some(256), ..KvConfig::default() },
        threads,
        weights,
        ..EngineConfig::default()
    }
}

pub fn load(name: &str, threads: usize, weights: Weights) -> ModelRunner {
    ModelRunner::load(&fixture(name), &engine(threads, weights)).unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

/// One prompt of a reference.json.
pub struct RefPrompt {
    pub text: String,
    pub ids: Vec<u32>,
    pub last_logits: Vec<f32>,
    pub tolerance: f32,
    pub greedy: Vec<u32>,
    pub margins: Vec<f64>,
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array().expect("an array").iter().map(|x| x.as_u64().expect("an id") as u32).collect()
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array().expect("an array").iter().map(|x| x.as_f64().expect("a number")).collect()
}

pub fn reference(name: &str) -> Vec<RefPrompt> {
    let path = fixture(name).join("reference.json");
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

pub fn alloc(r: &ModelRunner, positions: usize) -> Vec<u32> {
    let n = positions.div_ceil(r.block_tokens());
    r.pool().lock().expect("pool lock").alloc(n).expect("enough blocks")
}

pub fn release(r: &ModelRunner, blocks: &[u32]) {
    let pool = r.pool();
    let mut pool = pool.lock().expect("pool lock");
    for &id in blocks {
        pool.release(id).expect("release");
    }
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

pub fn max_abs(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, &v| m.max(v.abs()))
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0.0f32, |m, (&x, &y)| m.max((x - y).abs()))
}

pub fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}
