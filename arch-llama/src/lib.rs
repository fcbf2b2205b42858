//! tl-arch-llama: the Llama architecture, registered as `tl_arch = "llama"`, as Hugging
//! Face `model_type = "llama"` and as GGUF `general.architecture = "llama"`.
//!
//! The decoder itself (config fields, weights, the batch-invariant forward) is the
//! shared tl-decoder crate; this crate says what makes a Llama: no biases anywhere, and
//! llama.cpp's Q/K row permutation in its GGUF files ([`gguf`]).
//!
//! Nothing names this crate from core: a binary or test that loads a Llama writes
//! `use tl_arch_llama as _;` so the registration is linked.
#![deny(missing_docs)]

pub mod gguf;

use std::any::Any;
use std::sync::Arc;

use serde_json::Value;
use tl_core::{
    ArchRegistration, Architecture, BuildCtx, ConfigError, GgufPreTokenizer, GgufRegistration, KvGeometry, Model,
    ModelConfig, ModelError, ModelTypeRegistration,
};
use tl_decoder::{DecoderConfig, Variant};

/// A Llama's typed config: the shared decoder fields, with no biases.
pub type LlamaConfig = DecoderConfig;

/// What Llama adds to the shared decoder: nothing (no biased projections).
pub const LLAMA: Variant = Variant { qkv_bias: false };

/// The Llama family.
struct LlamaArch;

impl Architecture for LlamaArch {
    fn parse_config(&self, config: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError> {
        Ok(Arc::new(DecoderConfig::parse(config, LLAMA)?))
    }

    fn kv_geometry(&self, config: &ModelConfig, block_tokens: u32) -> Result<KvGeometry, ConfigError> {
        tl_decoder::kv_geometry(config, block_tokens)
    }

    fn kv_windows(&self, config: &ModelConfig) -> Result<Option<Vec<Option<usize>>>, ConfigError> {
        tl_decoder::kv_windows(config)
    }

    fn build(&self, ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
        tl_decoder::build(ctx)
    }
}

fn make() -> Box<dyn Architecture> {
    Box::new(LlamaArch)
}

inventory::submit!(ArchRegistration { name: "llama", make });
// A Hugging Face config.json without `tl_arch` selects this crate by its `model_type`.
inventory::submit!(ModelTypeRegistration { model_type: "llama", arch: "llama" });
inventory::submit!(GgufRegistration { architecture: "llama", make: || Box::new(gguf::LlamaGguf) });

/// Llama 3's byte-level BPE (`tokenizer.ggml.pre = "llama-bpe"`, also written "llama3"
/// and "llama-v3"), as its tokenizer.json has it: a regex split (contractions, letters
/// with an optional leading non-letter, digits in runs of at most three, punctuation
/// runs, newlines) then GPT-2's byte mapping; and `ignore_merges`: a pre-token that is in
/// the vocabulary is one token.
fn llama3_pre_tokenizer() -> Value {
    let pattern = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    tl_core::gguf_vocab::regex_byte_level(pattern, true)
}

macro_rules! llama3_vocab {
    ($($name:literal),*) => {$(
        inventory::submit!(GgufPreTokenizer {
            name: $name,
            pre_tokenizer: llama3_pre_tokenizer,
            normalizer: None,
            ignore_merges: true,
        });
    )*};
}
llama3_vocab!("llama-bpe", "llama3", "llama-v3");

// SentencePiece vocabularies (`tokenizer.ggml.model = "llama"`: Llama 2, Mistral,
// TinyLlama, ...), translated as transformers' converter does.
inventory::submit!(tl_core::GgufVocab {
    model: "llama",
    tokenizer_json: tl_core::gguf_vocab::sentencepiece_tokenizer_json
});
