//! Sliding-window attention end to end through tl-decoder: a test-only architecture
//! (registered here, not in any crate) reads tiny-llama's weights with windowed layers
//! from `layer_types` + `sliding_window`, as a family does with
//! `DecoderConfig::parse_with_layers`. On prompts longer than the window: batch and chunk
//! invariance bit for bit; a prompt no longer than the window equals the global model bit
//! for bit (every key is visible either way) and a longer one does not.

mod common;

use std::any::Any;
use std::sync::Arc;

use common::*;
use tl_arch_llama::LLAMA;
use tl_core::{
    ArchRegistration, Architecture, BuildCtx, ConfigError, ForwardBatch, ForwardSeq, KvGeometry, Model, ModelConfig,
    ModelError, ModelRunner, Weights,
};
use tl_decoder::{layer_types, sliding_window, DecoderConfig, LayerAttn};

const WINDOW: usize = 5;

struct Windowed;

impl Architecture for Windowed {
    fn parse_config(&self, config: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError> {
        let cfg = DecoderConfig::parse_with_layers(config, LLAMA, |json, n| {
            let w = sliding_window(json)?;
            Ok(layer_types(json, n, w)?.unwrap_or_else(|| vec![w.map_or(LayerAttn::Global, LayerAttn::Windowed); n]))
        })?;
        Ok(Arc::new(cfg))
    }
    fn kv_geometry(&self, config: &ModelConfig, block_tokens: u32) -> Result<KvGeometry, ConfigError> {
        tl_decoder::kv_geometry(config, block_tokens)
    }
    fn build(&self, ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
        tl_decoder::build(ctx)
    }
}

inventory::submit!(ArchRegistration { name: "test-windowed-llama", make: || Box::new(Windowed) });

/// tiny-llama with `tl_arch` and the window fields replaced.
fn windowed(dir: &std::path::Path, fields: serde_json::Value) -> ModelRunner {
    let src = fixture("tiny-llama");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).expect("config")).expect("json");
    cfg["tl_arch"] = "test-windowed-llama".into();
    for (k, v) in fields.as_object().expect("fields") {
        cfg[k] = v.clone();
    }
    std::fs::write(dir.join("config.json"), cfg.to_string()).expect("write config");
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).expect("copy");
    ModelRunner::load(dir, &engine(0, Weights::Native)).expect("loads")
}

#[test]
fn windowed_layers_are_batch_and_chunk_invariant_and_see_only_their_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fields = serde_json::json!({"sliding_window": WINDOW, "layer_types": ["sliding_attention", "full_attention"]});
    let mut w = windowed(dir.path(), fields);
    let cfg = w.config().arch_config::<DecoderConfig>().expect("typed").clone();
    assert_eq!(cfg.layer_attn, vec![LayerAttn::Windowed(WINDOW), LayerAttn::Global]);
    let mut global = load("tiny-llama", 0, Weights::Native);
    let refs = reference("tiny-llama");
    let alone: Vec<Vec<f32>> = refs.iter().map(|p| run_in_steps(&mut w, &p.ids, &[])).collect();
    for (p, want) in refs.iter().zip(&alone) {
        let full = run_in_steps(&mut global, &p.ids, &[]);
        if p.ids.len() <= WINDOW {
            assert_eq!(bits(want), bits(&full), "{:?}: within the window the models agree", p.text);
        } else {
            let d = max_abs_diff(want, &full);
            assert!(d > 1e-2, "{:?}: the window changed nothing ({d})", p.text);
        }
        for steps in [vec![1; p.ids.len()], vec![3, 2, 5], vec![WINDOW, 1, WINDOW + 1]] {
            assert_eq!(bits(&run_in_steps(&mut w, &p.ids, &steps)), bits(want), "{:?} in steps {steps:?}", p.text);
        }
    }
    let tables: Vec<Vec<u32>> = refs.iter().map(|p| alloc(&w, p.ids.len())).collect();
    let batch = ForwardBatch {
        seqs: refs
            .iter()
            .zip(&tables)
            .map(|(p, b)| ForwardSeq { tokens: &p.ids, start: 0, blocks: b, adapter: None })
            .collect(),
    };
    let together = w.forward(&batch).expect("forward");
    for (i, want) in alone.iter().enumerate() {
        assert_eq!(bits(together.row(i)), bits(want), "prompt {i} differs in a batch");
    }
    for t in &tables {
        release(&w, t);
    }
}

#[test]
fn layer_types_are_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = fixture("tiny-llama");
    std::fs::copy(src.join("model.safetensors"), dir.path().join("model.safetensors")).expect("copy");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).expect("config")).expect("json");
    cfg["tl_arch"] = "test-windowed-llama".into();
    for (fields, word) in [
        (serde_json::json!({"layer_types": ["sliding_attention", "full_attention"]}), "sliding_window"),
        (serde_json::json!({"layer_types": ["full_attention"], "sliding_window": 4}), "layer_types"),
        (serde_json::json!({"layer_types": ["chunked", "full_attention"], "sliding_window": 4}), "chunked"),
        (serde_json::json!({"sliding_window": 0}), "sliding_window"),
    ] {
        let mut c = cfg.clone();
        for (k, v) in fields.as_object().expect("fields") {
            c[k] = v.clone();
        }
        let e = ModelConfig::from_json(&c.to_string()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(word), "{fields}: {e:?}");
    }
}
