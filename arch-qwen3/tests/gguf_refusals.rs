//! Qwen3 GGUF files tl must not run as a causal LM: llama.cpp's converter writes a Qwen3
//! reranker with a two-row `cls_out` classifier (and, untied, no `output.weight`, which
//! would otherwise read as a tied head), and embedding models with a pooling type. Each
//! load fails with an error naming the tensor or key.

#[path = "../../arch-llama/tests/common/mod.rs"]
mod common;
#[path = "../../core/tests/gguf_writer/mod.rs"]
mod gguf_writer;

use gguf_writer::{f32_tensor, write, Meta};
use tl_core::{ModelRunner, Weights};

use tl_arch_qwen3 as _;

fn load_err(meta: &[(&str, Meta)], tensors: &[gguf_writer::T]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("qwen3.gguf");
    write(&path, meta, tensors);
    match ModelRunner::load(&path, &common::engine(1, Weights::Native)) {
        Ok(_) => panic!("a Qwen3 reranker or embedding GGUF loaded as a causal LM"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn rerankers_and_pooled_models_are_refused_naming_what_gave_them_away() {
    let arch = ("general.architecture", Meta::Str("qwen3"));
    let norm = f32_tensor("output_norm.weight", &[4], &[1.0; 4]);
    let cls = f32_tensor("cls_out.weight", &[2, 4], &[0.5; 8]);
    let e = load_err(&[arch], &[norm, cls]);
    assert!(e.contains("cls_out.weight") && e.contains("reranker"), "{e}");
    let arch = ("general.architecture", Meta::Str("qwen3"));
    let norm = f32_tensor("output_norm.weight", &[4], &[1.0; 4]);
    let e = load_err(&[arch, ("qwen3.pooling_type", Meta::U32(1))], &[norm]);
    assert!(e.contains("qwen3.pooling_type"), "{e}");
}
