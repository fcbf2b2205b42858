//! tl-core: the extension points of the tl model runner and the runner itself.
//!
//! The four extension points are traits: [`Architecture`] (a model family),
//! [`WeightStore`] (named tensors from a checkpoint), [`KvBackend`] (the block pool: its
//! management, over the [`KvSlabs`] the forward reads and writes) and [`Sampler`]
//! (logits to a token). Implementations live in
//! their own crates and register themselves with [`inventory`]; this crate names none of
//! them. [`ModelRunner::load`] reads a model directory, picks the architecture named by
//! `tl_arch` in config.json and the KV backend named in [`EngineConfig`].
//!
//! Inventory linking pitfall: a plugin crate that nothing names is not linked, and its
//! registrations vanish. A binary or test that wants a plugin writes `use tl_kv as _;`.
#![deny(missing_docs)]

pub mod adapter;
pub mod adapter_read;
pub mod arch;
pub mod batch;
pub mod chat;
pub mod config;
pub mod encoder;
pub mod encoder_text;
pub mod engine;
pub mod envelope;
pub mod error;
pub mod gguf;
pub mod gguf_arch;
pub mod gguf_vocab;
mod hash;
pub mod kv;
pub mod layout;
pub mod load;
mod nested;
pub mod registry;
pub mod runner;
pub mod safetensors;
pub mod sampler;
pub mod sequence;
pub mod tokenizer;
pub mod weights;

pub use adapter::{Adaptable, Adapter, AdapterError, Applied, Lora, RawAdapter};
pub use adapter_read::AdapterLoader;
pub use arch::{
    ArchRegistration, Architecture, BuildCtx, DraftHead, Encoder, ForwardCtx, ForwardOutput, Model, ModelError,
    ModelTypeRegistration, NestedRegistration, Recurrent,
};
pub use batch::{ForwardBatch, ForwardSeq, Logits};
pub use chat::{ChatError, ChatTemplate, Message, ToolCall};
pub use config::{ConfigError, ModelConfig, Nesting, TokenizerKind};
pub use encoder::{EncodeInput, Encoded, EncoderInfo};
pub use engine::{EngineConfig, KvConfig, PrefixCache, SchedPolicy, Weights};
pub use envelope::Envelope;
pub use error::RegistryError;
pub use gguf::{Gguf, TensorMap};
pub use gguf_arch::{GgufArch, GgufPreTokenizer, GgufRegistration, GgufVocab};
pub use hash::{block_hash, fnv1a64, group_hash};
pub use kv::{
    quantize_q8, KvBackend, KvElem, KvError, KvGeometry, KvRegistration, KvSlabs, KvSpec, Q8Slab, Q8SlabMut,
    SharedPool, StateGeometry,
};
pub use layout::{keep_to_last_state, release_all, KvGroup, KvLayout, NO_BLOCK};
pub use runner::{activations_matter, open_weights, ModelRunner, RunnerError};
pub use safetensors::SafeTensors;
pub use sampler::{Rng, SampleError, Sampler, SamplerRegistration, SamplingParams};
pub use sequence::Sequence;
pub use tl_quant::Activations;
pub use tokenizer::{StreamDecoder, Tokenizer, TokenizerError};
pub use weights::{DType, Stored, TensorInfo, WeightError, WeightStore};

/// Re-exported so plugin crates register with the same `inventory` version as core.
pub use inventory;
