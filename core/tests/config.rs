//! config.json's common fields and the refusals tl-core owns (model-dir.md). The Llama
//! fields' refusals are tested in tl-arch-llama, which owns that typed config.

use std::any::Any;
use std::sync::Arc;

use tl_core::{
    ArchRegistration, Architecture, BuildCtx, ConfigError, KvGeometry, Model, ModelConfig, ModelError,
    ModelTypeRegistration, TokenizerKind,
};

/// An architecture with no fields of its own, also registered for the Hugging Face
/// `model_type` "plain-hf", so selection by `model_type` can be tested without a real
/// architecture crate.
struct Plain;

impl Architecture for Plain {
    fn parse_config(&self, _c: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError> {
        Ok(Arc::new(()))
    }
    fn kv_geometry(&self, _c: &ModelConfig, block_tokens: u32) -> Result<KvGeometry, ConfigError> {
        Ok(KvGeometry { n_layers: 1, n_kv_heads: 1, head_dim: 1, block_tokens })
    }
    fn build(&self, _ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
        Err(ModelError::Other("not buildable".into()))
    }
}

inventory::submit! { ArchRegistration { name: "plain", make: || Box::new(Plain) } }
inventory::submit! { ModelTypeRegistration { model_type: "plain-hf", arch: "plain" } }

fn refused(json: &str, needle: &str) {
    match ModelConfig::from_json(json) {
        Ok(c) => panic!("accepted {json}: {c:?}"),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains(needle), "message {msg:?} does not name {needle:?}");
        }
    }
}

#[test]
fn common_fields_parse() {
    let c = ModelConfig::from_json(
        r#"{"tl_arch":"plain","tl_tokenizer":"byte","vocab_size":300,"bos_token_id":1,"eos_token_id":[2,3],"extra":{"ignored":true}}"#,
    )
    .unwrap();
    assert_eq!((c.arch.as_str(), c.tokenizer, c.vocab_size), ("plain", TokenizerKind::Byte, 300));
    assert_eq!((c.bos_token_id, c.eos_token_ids.clone()), (Some(1), vec![2, 3]));
    let c =
        ModelConfig::from_json(r#"{"model_type":"plain-hf","tl_tokenizer":"byte","vocab_size":256,"eos_token_id":5}"#)
            .unwrap();
    assert_eq!((c.arch.as_str(), c.eos_token_ids.clone()), ("plain", vec![5]));
}

#[test]
fn config_refuses_what_the_engine_cannot_run() {
    refused("{not json", "bad JSON");
    refused("[1, 2]", "JSON object");
    refused(r#"{"tl_tokenizer":"byte","vocab_size":256}"#, "tl_arch");
    refused(r#"{"model_type":"mistral","tl_tokenizer":"byte","vocab_size":256}"#, "tl_arch");
    refused(r#"{"model_type":"mistral","tl_tokenizer":"byte","vocab_size":256}"#, "plain-hf");
    refused(r#"{"tl_arch":"gpt-j","tl_tokenizer":"byte","vocab_size":256}"#, "gpt-j");
    refused(r#"{"tl_arch":"plain","vocab_size":256}"#, "tl_tokenizer");
    refused(r#"{"tl_arch":"plain","tl_tokenizer":"sentencepiece","vocab_size":256}"#, "sentencepiece");
    refused(r#"{"tl_arch":"plain","tl_tokenizer":"byte"}"#, "vocab_size");
    refused(r#"{"tl_arch":"plain","tl_tokenizer":"byte","vocab_size":0}"#, "vocab_size");
    refused(r#"{"tl_arch":"plain","tl_tokenizer":"byte","vocab_size":100}"#, "vocab_size");
    refused(r#"{"tl_arch":"plain","tl_tokenizer":"hf","vocab_size":1000000000}"#, "vocab_size");
    refused(r#"{"tl_arch":"plain","tl_tokenizer":"byte","vocab_size":256,"eos_token_id":256}"#, "eos_token_id");
    refused(r#"{"tl_arch":"plain","tl_tokenizer":"byte","vocab_size":256,"eos_token_id":"x"}"#, "eos_token_id");
    refused(
        r#"{"tl_arch":"plain","tl_tokenizer":"byte","vocab_size":256,"max_position_embeddings":0}"#,
        "max_position",
    );

    // "hf" needs tokenizer.json beside config.json; the message names the file.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), r#"{"tl_arch":"plain","tl_tokenizer":"hf","vocab_size":256}"#)
        .unwrap();
    let err = ModelConfig::load(dir.path()).unwrap_err();
    assert!(matches!(err, ConfigError::MissingFile { .. }), "{err}");
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
    std::fs::write(dir.path().join("tokenizer.json"), "{}").unwrap();
    assert!(ModelConfig::load(dir.path()).is_ok());
    // A directory with no config.json names the file.
    let empty = tempfile::tempdir().unwrap();
    let err = ModelConfig::load(empty.path()).unwrap_err();
    assert!(err.to_string().contains("config.json"), "{err}");
}
