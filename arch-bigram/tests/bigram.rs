//! The byte bigram tracer checkpoint still serves through the runner.

use std::path::Path;

use tl_arch_bigram as _;
use tl_core::{registry, EngineConfig, ForwardBatch, ModelRunner, Tokenizer};
use tl_kv as _;

fn tracer() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tracer"))
}

/// Greedy: the id of the largest logit, ties to the lowest id.
fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best as u32
}

#[test]
fn bigram_checkpoint_still_serves() {
    assert!(registry::architecture_names().unwrap().contains(&"bigram"));
    let mut runner = ModelRunner::load(tracer(), &EngineConfig::default()).unwrap();
    let tok = Tokenizer::load(runner.config()).unwrap();
    let mut seq = runner.sequence();
    let mut logits = runner.feed(&mut seq, &tok.encode("a").unwrap()).unwrap();
    let mut out = Vec::new();
    for _ in 0..3 {
        let id = argmax(&logits);
        out.push(id);
        logits = runner.feed(&mut seq, &[id]).unwrap();
    }
    assert_eq!(tok.decode(&out).unwrap(), "bcd");
}

#[test]
fn bigram_rows_follow_the_last_token_of_each_sequence() {
    let mut runner = ModelRunner::load(tracer(), &EngineConfig::default()).unwrap();
    let pool = runner.pool();
    let (a, b) = {
        let mut p = pool.lock().unwrap();
        (p.alloc(1).unwrap(), p.alloc(1).unwrap())
    };
    let (xa, c) = (b"xa".map(u32::from), [u32::from(b'c')]);
    let batch = ForwardBatch {
        seqs: vec![
            tl_core::ForwardSeq { tokens: &xa, start: 0, blocks: &a, adapter: None },
            tl_core::ForwardSeq { tokens: &c, start: 0, blocks: &b, adapter: None },
        ],
    };
    let logits = runner.forward(&batch).unwrap();
    assert_eq!((logits.rows(), argmax(logits.row(0)), argmax(logits.row(1))), (2, 'b' as u32, 'd' as u32));
    // Smoothed log-probabilities: every row is a distribution (sums to 1 within f16 rounding).
    let total: f64 = logits.row(0).iter().map(|&l| (l as f64).exp()).sum();
    assert!((total - 1.0).abs() < 1e-2, "row sums to {total}");
    let (hidden, last) = runner.run_once(&[u32::from(b'a'), u32::from(b'b')]).unwrap();
    assert_eq!(hidden.len(), 2 * 256);
    assert_eq!(argmax(&last), 'c' as u32);
    assert_eq!(pool.lock().unwrap().n_in_use(), 2, "run_once kept a block");
    // Every position's logits (perplexity's option): row t predicts after token t.
    let all = runner.score(&[u32::from(b'a'), u32::from(b'b')]).unwrap();
    assert_eq!((all.rows(), argmax(all.row(0)), argmax(all.row(1))), (2, 'b' as u32, 'c' as u32));
    assert_eq!(pool.lock().unwrap().n_in_use(), 2, "score kept a block");
}

#[test]
fn a_bigram_checkpoint_with_two_tensors_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::copy(tracer().join("config.json"), dir.join("config.json")).unwrap();
    let header = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&[0; 8]);
    std::fs::write(dir.join("model.safetensors"), bytes).unwrap();
    let err = ModelRunner::load(dir, &EngineConfig::default()).err().expect("accepted");
    assert!(err.to_string().contains("exactly one tensor"), "{err}");
}
