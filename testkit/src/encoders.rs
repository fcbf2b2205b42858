//! What every encoder family's tests share (docs/spec/encoders.md): reading a fixture's
//! reference.json numbers, and the batch-invariance check bit for bit.

use std::path::Path;

use serde_json::Value;
use tl_core::encoder_text::load;
use tl_core::{EncodeInput, Encoded, EngineConfig, ModelRunner};

use crate::bits;

/// A JSON list of token ids.
pub fn u32s(v: &Value) -> Vec<u32> {
    v.as_array().expect("a list").iter().map(|x| x.as_u64().expect("an id") as u32).collect()
}

/// A JSON list of numbers, as f32.
pub fn f32s(v: &Value) -> Vec<f32> {
    v.as_array().expect("a list").iter().map(|x| x.as_f64().expect("a number") as f32).collect()
}

/// A fixture directory's reference.json.
pub fn reference_json(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("reference.json")).expect("reference.json");
    serde_json::from_str(&text).expect("reference.json is JSON")
}

/// The `cases` list of a fixture directory's reference.json.
pub fn cases(dir: &Path) -> Vec<Value> {
    reference_json(dir)["cases"].as_array().expect("reference.json has cases").clone()
}

/// A copy of encoder fixture `dir` (weights and tokenizer.json) with its config.json
/// edited by `edit`.
pub fn edited(dir: &Path, edit: impl FnOnce(&mut Value)) -> tempfile::TempDir {
    let tmp = crate::with_config(dir, edit);
    std::fs::copy(dir.join("tokenizer.json"), tmp.path().join("tokenizer.json")).expect("copy tokenizer.json");
    tmp
}

/// An encoder directory loaded with its texts on `threads` threads.
pub fn load_encoder(dir: &Path, threads: usize) -> (ModelRunner, tl_core::encoder_text::Texts) {
    load(dir, &EngineConfig { threads, ..Default::default() }).expect("the encoder loads")
}

/// 32 inputs of lengths 1..=`longest` in a scrambled order, `ids` among them at index 17.
pub fn crowd(vocab: u32, longest: u32, ids: &[u32]) -> Vec<Vec<u32>> {
    let mut all: Vec<Vec<u32>> = (0..32u32)
        .map(|i| {
            let len = i * 13 % longest + 1;
            (0..len).map(|j| (i * 31 + j * 7 + 5) % vocab).collect()
        })
        .collect();
    all[17] = ids.to_vec();
    all
}

/// Every output an input has, as bits.
fn all_bits(e: &Encoded) -> [Option<Vec<u32>>; 3] {
    [e.hidden.as_deref().map(bits), e.vector.as_deref().map(bits), e.scores.as_deref().map(bits)]
}

/// The encoder at `dir` gives `ids` the same bits (hidden states, vector, scores) alone
/// and at index 17 among 31 other inputs of lengths 1..=`longest`, on 1 and 2 threads;
/// and every fifth of the others equals itself alone.
pub fn check_encoder_invariance(dir: &Path, ids: &[u32], longest: u32) {
    let (one, _) = load_encoder(dir, 1);
    let (two, _) = load_encoder(dir, 2);
    let alone = one.encode(&[EncodeInput::ids(ids)], true).expect("encode").remove(0);
    let crowd = crowd(one.config().vocab_size as u32, longest, ids);
    let inputs: Vec<EncodeInput<'_>> = crowd.iter().map(|i| EncodeInput::ids(i)).collect();
    for (threads, runner) in [(1, &one), (2, &two)] {
        let many = runner.encode(&inputs, true).expect("encode");
        assert_eq!(all_bits(&many[17]), all_bits(&alone), "{threads} threads: the input among others");
        for (i, input) in inputs.iter().enumerate().step_by(5) {
            let solo = one.encode(&[*input], true).expect("encode").remove(0);
            assert_eq!(all_bits(&many[i]), all_bits(&solo), "{threads} threads: input {i}");
        }
    }
}

/// [`check_encoder_invariance`] of `text` as the directory's tokenizer gives it.
pub fn check_text_invariance(dir: &Path, text: &str, longest: u32) {
    let (_, texts) = load_encoder(dir, 1);
    let ids = texts.text(text).expect("the text tokenizes").ids;
    check_encoder_invariance(dir, &ids, longest);
}

/// The load error of encoder fixture `dir` with config.json's `field` set to `value`
/// (a panic if it loads).
pub fn refusal(dir: &Path, field: &str, value: &Value) -> String {
    let tmp = edited(dir, |c| c[field] = value.clone());
    crate::load_error(tmp.path())
}

/// A GGUF's F16 weights' vectors against its directory's (F32) ones, unit vectors in
/// order: each within 5e-4 per component with cosine >= 0.99999, and none with the f32
/// bits (the F16 file was read as F16): f16 weights carry 11 significant bits (measured on
/// tiny-bert: 9.0e-5 and 0.99999997). Prints the worst.
pub fn check_f16_vectors(dir: &[Vec<f32>], gguf: &[Vec<f32>], label: &str) {
    const COMPONENT_TOL: f32 = 5e-4;
    const MIN_COSINE: f64 = 0.99999;
    assert_eq!(dir.len(), gguf.len(), "{label}: vector counts");
    let (mut worst, mut worst_cos) = (0f32, 1f64);
    for (i, (d, g)) in dir.iter().zip(gguf).enumerate() {
        let diff = d.iter().zip(g).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        // Both are unit vectors: the cosine is the dot product.
        let cos: f64 = d.iter().zip(g).map(|(&a, &b)| a as f64 * b as f64).sum();
        assert!(diff <= COMPONENT_TOL && cos >= MIN_COSINE, "{label} input {i}: max |diff| {diff:e}, cosine {cos}");
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_ne!(bits(d), bits(g), "{label} input {i}: f16 weights gave the f32 bits");
        worst = worst.max(diff);
        worst_cos = worst_cos.min(cos);
    }
    eprintln!("{label}: max |diff| {worst:e}, min cosine {worst_cos}");
}
