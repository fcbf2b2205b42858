//! The GGUF extension point: an architecture crate registers the `general.architecture`
//! names it reads and the translation (tensor names and row order, metadata to its
//! config.json); core's [`crate::gguf`] reads only the container.

use serde_json::Value;

use crate::gguf::{Gguf, TensorMap};
use crate::weights::{TensorInfo, WeightError};

/// How one architecture reads a GGUF file.
pub trait GgufArch: Send + Sync {
    /// The config.json the file's metadata describes, with `tl_arch` (and
    /// `tl_tokenizer`) set; refuses metadata the architecture cannot honour, naming the
    /// key.
    fn config_json(&self, file: &Gguf) -> Result<Value, WeightError>;
    /// The name a stored tensor is read by and the row order to undo, from its GGUF
    /// name and stored shape (before any remapping). A tensor the architecture does not
    /// use keeps its GGUF name.
    fn tensor(&self, file: &Gguf, gguf_name: &str, info: &TensorInfo) -> Result<TensorMap, WeightError>;
    /// For a stacked tensor (a mixture of experts' `ffn_*_exps`: one expert per slice
    /// along its outermost axis), the name each slice is read by, in order; each slice is
    /// served as its own tensor, a view of the file without a copy. `None` (the default):
    /// not stacked, named by [`GgufArch::tensor`].
    fn stacked(&self, _file: &Gguf, _gguf_name: &str, _info: &TensorInfo) -> Result<Option<Vec<String>>, WeightError> {
        Ok(None)
    }
    /// The tokenizer.json of the file's vocabulary, when the family converts it its own
    /// way (the same `tokenizer.ggml.model` can need different conversions in two
    /// families); `None` (the default): by `tokenizer.ggml.model`, as registered
    /// ([`GgufVocab`]). `Err` says what is missing or wrong (the caller adds the file's name).
    /// A family with a byte-level BPE can start from core's
    /// ([`crate::tokenizer::gguf_byte_level_bpe_json`]) and change what its vocabulary needs.
    fn tokenizer_json(&self, _file: &Gguf) -> Option<Result<Value, String>> {
        None
    }
    /// The chat template of the family, for a file whose metadata carries none
    /// (`tokenizer.chat_template`); `None` (the default): such a file has no template.
    fn default_chat_template(&self, _file: &Gguf) -> Option<&'static str> {
        None
    }
}

/// A GGUF translation: `inventory::submit!(GgufRegistration { architecture, make })`.
pub struct GgufRegistration {
    /// The `general.architecture` value it reads.
    pub architecture: &'static str,
    /// The translation object.
    pub make: fn() -> Box<dyn GgufArch>,
}

inventory::collect!(GgufRegistration);

/// A pre-tokenizer for a GGUF file's `tokenizer.ggml.pre` value beyond the ones core
/// knows, registered by the crate whose models use it:
/// `inventory::submit!(GgufPreTokenizer { name, pre_tokenizer, normalizer, ignore_merges })`.
pub struct GgufPreTokenizer {
    /// The `tokenizer.ggml.pre` value.
    pub name: &'static str,
    /// The pre-tokenizer, in tokenizer.json form.
    pub pre_tokenizer: fn() -> Value,
    /// The normalizer the family's own tokenizer.json has (GGUF metadata does not carry
    /// it), in tokenizer.json form; `None` for none.
    pub normalizer: Option<fn() -> Value>,
    /// The BPE model's `ignore_merges`: a pre-token that is itself in the vocabulary is
    /// one token, whatever the merges would make of it (as some families' tokenizer.json asks).
    pub ignore_merges: bool,
}

inventory::collect!(GgufPreTokenizer);

/// A GGUF vocabulary model (`tokenizer.ggml.model`) beyond core's byte-level BPE
/// (`"gpt2"`), registered by the crate whose models use it:
/// `inventory::submit!(GgufVocab { model, tokenizer_json })`.
pub struct GgufVocab {
    /// The `tokenizer.ggml.model` value.
    pub model: &'static str,
    /// The tokenizer.json Hugging Face would use for the file's vocabulary; `Err` says
    /// what is missing or wrong (the caller adds the file's name).
    pub tokenizer_json: fn(&Gguf) -> Result<Value, String>,
}

inventory::collect!(GgufVocab);
