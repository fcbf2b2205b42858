//! tl-arch-mistral: Mistral, registered as `tl_arch = "mistral"` and as Hugging Face
//! `model_type = "mistral"`.
//!
//! A Mistral is the Llama decoder with an optional sliding window on every layer
//! (`sliding_window`: 4096 in Mistral 7B v0.1, `null` from v0.2 on): the query at
//! position i sees key j iff `0 <= i - j < sliding_window` (transformers'
//! `sliding_window_overlay`: `kv_idx > q_idx - sliding_window`). That is all it adds, so
//! it runs tl-decoder's Llama forward with every layer [`LayerAttn::Windowed`]: this crate
//! is the config rule and the registrations.
//!
//! Why a crate of its own and not tl-arch-llama: transformers' `LlamaForCausalLM` has no
//! window, so a Llama config that carries one must stay refused, while a Mistral config's
//! window must be honoured; the `model_type` decides which, and each crate's config rule
//! stays plain (no "is this a Mistral" branch inside Llama's).
//!
//! GGUF: llama.cpp's converter writes Mistral 7B files as `general.architecture =
//! "llama"` (Q/K permuted, no window key), so they load through tl-arch-llama with full
//! attention, exactly as llama.cpp runs them: the same as transformers for v0.2 and later,
//! and for v0.1 up to 4096 tokens. This crate registers no GGUF architecture.
//!
//! Nothing names this crate from core: a binary or test that loads a Mistral writes
//! `use tl_arch_mistral as _;` so the registrations are linked.
#![deny(missing_docs)]

use std::any::Any;
use std::sync::Arc;

use serde_json::Value;
use tl_core::{
    ArchRegistration, Architecture, BuildCtx, ConfigError, KvGeometry, Model, ModelConfig, ModelError,
    ModelTypeRegistration,
};
use tl_decoder::{DecoderConfig, LayerAttn, Variant};

/// A Mistral's typed config: the shared decoder fields, every layer windowed alike (or
/// every layer global).
pub type MistralConfig = DecoderConfig;

/// Hugging Face's `MistralConfig.sliding_window` when config.json has no such key
/// (transformers 5.23): a missing key is a window of 4096, not none.
pub const DEFAULT_SLIDING_WINDOW: usize = 4096;

/// What Mistral takes from the shared decoder's config: no biased projections.
pub const MISTRAL: Variant = Variant { qkv_bias: false };

/// The largest window accepted (the decoder's own bound on positions is far below).
const MAX_WINDOW: u64 = u32::MAX as u64;

/// Mistral's rule for the layers' attention: `sliding_window` on every layer, as
/// transformers' `MistralModel` applies it (one mask for all layers).
fn mistral_layers(json: &Value, n_layers: usize) -> Result<Vec<LayerAttn>, ConfigError> {
    // transformers' Mistral ignores `layer_types` (it warns and points to Ministral, whose
    // layers alternate): refused rather than guess which was meant.
    if let Some(kinds) = json.get("layer_types").filter(|v| !v.is_null()) {
        return Err(ConfigError::invalid(
            "layer_types",
            kinds,
            "per-layer attention kinds are not Mistral's (Ministral's alternating layers are not implemented)",
        ));
    }
    let kind = match json.get("sliding_window") {
        None => LayerAttn::Windowed(DEFAULT_SLIDING_WINDOW),
        Some(Value::Null) => LayerAttn::Global,
        Some(v) => match v.as_u64() {
            Some(w) if (1..=MAX_WINDOW).contains(&w) => LayerAttn::Windowed(w as usize),
            _ => return Err(ConfigError::invalid("sliding_window", v, format!("expected null or 1..={MAX_WINDOW}"))),
        },
    };
    Ok(vec![kind; n_layers])
}

/// The Mistral family.
struct MistralArch;

impl Architecture for MistralArch {
    fn parse_config(&self, config: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError> {
        Ok(Arc::new(DecoderConfig::parse_with_layers(config, MISTRAL, mistral_layers)?))
    }

    fn kv_geometry(&self, config: &ModelConfig, block_tokens: u32) -> Result<KvGeometry, ConfigError> {
        tl_decoder::kv_geometry(config, block_tokens)
    }

    fn kv_windows(&self, config: &ModelConfig) -> Result<Option<Vec<Option<usize>>>, ConfigError> {
        tl_decoder::kv_windows(config)
    }

    fn build(&self, ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
        // The Llama forward, each layer's attention as the config's `layer_attn` says.
        tl_decoder::build(ctx)
    }
}

inventory::submit!(ArchRegistration { name: "mistral", make: || Box::new(MistralArch) });
// A Hugging Face config.json without `tl_arch` selects this crate by its `model_type`.
inventory::submit!(ModelTypeRegistration { model_type: "mistral", arch: "mistral" });
