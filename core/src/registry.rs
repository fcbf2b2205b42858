//! The plugin registry: const registrations gathered by `inventory`, built lazily into
//! sorted maps. A duplicate name is an error; an unknown name lists the known ones.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use crate::arch::{ArchRegistration, ModelTypeRegistration, NestedRegistration};
pub use crate::error::RegistryError;
use crate::gguf_arch::{GgufPreTokenizer, GgufRegistration, GgufVocab};
use crate::kv::KvRegistration;
use crate::sampler::SamplerRegistration;

type Map<T> = Result<BTreeMap<&'static str, &'static T>, RegistryError>;

fn build<T>(kind: &'static str, items: impl Iterator<Item = &'static T>, name: fn(&T) -> &'static str) -> Map<T> {
    let mut map = BTreeMap::new();
    for item in items {
        if map.insert(name(item), item).is_some() {
            return Err(RegistryError::Duplicate { kind, name: name(item).to_string() });
        }
    }
    Ok(map)
}

fn find<T>(kind: &'static str, map: &'static Map<T>, name: &str) -> Result<&'static T, RegistryError> {
    let map = map.as_ref().map_err(Clone::clone)?;
    map.get(name).copied().ok_or_else(|| RegistryError::Unknown {
        kind,
        name: name.to_string(),
        known: map.keys().map(|k| k.to_string()).collect(),
    })
}

fn names<T>(map: &'static Map<T>) -> Result<Vec<&'static str>, RegistryError> {
    Ok(map.as_ref().map_err(Clone::clone)?.keys().copied().collect())
}

fn archs() -> &'static Map<ArchRegistration> {
    static MAP: OnceLock<Map<ArchRegistration>> = OnceLock::new();
    MAP.get_or_init(|| build("architecture", inventory::iter::<ArchRegistration>.into_iter(), |r| r.name))
}

fn model_types() -> &'static Map<ModelTypeRegistration> {
    static MAP: OnceLock<Map<ModelTypeRegistration>> = OnceLock::new();
    MAP.get_or_init(|| build("model_type", inventory::iter::<ModelTypeRegistration>.into_iter(), |r| r.model_type))
}

fn nested() -> &'static Map<NestedRegistration> {
    static MAP: OnceLock<Map<NestedRegistration>> = OnceLock::new();
    MAP.get_or_init(|| build("nested model_type", inventory::iter::<NestedRegistration>.into_iter(), |r| r.model_type))
}

fn gguf_archs() -> &'static Map<GgufRegistration> {
    static MAP: OnceLock<Map<GgufRegistration>> = OnceLock::new();
    MAP.get_or_init(|| build("GGUF architecture", inventory::iter::<GgufRegistration>.into_iter(), |r| r.architecture))
}

fn pre_tokenizers() -> &'static Map<GgufPreTokenizer> {
    static MAP: OnceLock<Map<GgufPreTokenizer>> = OnceLock::new();
    MAP.get_or_init(|| build("GGUF pre-tokenizer", inventory::iter::<GgufPreTokenizer>.into_iter(), |r| r.name))
}

fn vocabs() -> &'static Map<GgufVocab> {
    static MAP: OnceLock<Map<GgufVocab>> = OnceLock::new();
    MAP.get_or_init(|| build("GGUF vocabulary model", inventory::iter::<GgufVocab>.into_iter(), |r| r.model))
}

fn kvs() -> &'static Map<KvRegistration> {
    static MAP: OnceLock<Map<KvRegistration>> = OnceLock::new();
    MAP.get_or_init(|| build("KV backend", inventory::iter::<KvRegistration>.into_iter(), |r| r.name))
}

fn samplers() -> &'static Map<SamplerRegistration> {
    static MAP: OnceLock<Map<SamplerRegistration>> = OnceLock::new();
    MAP.get_or_init(|| build("sampler", inventory::iter::<SamplerRegistration>.into_iter(), |r| r.name))
}

/// The architecture registered under `name`.
pub fn architecture(name: &str) -> Result<&'static ArchRegistration, RegistryError> {
    find("architecture", archs(), name)
}

/// The nesting registered for the Hugging Face `model_type` `name`, if any.
pub fn nested_model_type(name: &str) -> Result<Option<&'static NestedRegistration>, RegistryError> {
    Ok(nested().as_ref().map_err(Clone::clone)?.get(name).copied())
}

/// Every `model_type` registered as nesting a text model, sorted.
pub fn nested_model_types() -> Result<Vec<&'static str>, RegistryError> {
    names(nested())
}

/// The architecture that registered the Hugging Face `model_type` `name`.
pub fn model_type(name: &str) -> Result<&'static ModelTypeRegistration, RegistryError> {
    find("model_type", model_types(), name)
}

/// The GGUF translation registered for `general.architecture` = `name`.
pub fn gguf_arch(name: &str) -> Result<&'static GgufRegistration, RegistryError> {
    find("GGUF architecture", gguf_archs(), name)
}

/// The translation registered for a GGUF file's `general.architecture`, if any.
pub(crate) fn gguf_arch_of(file: &crate::gguf::Gguf) -> Option<Box<dyn crate::gguf_arch::GgufArch>> {
    let arch = file.architecture().ok()?;
    gguf_arch(arch).ok().map(|r| (r.make)())
}

/// The pre-tokenizer registered for `tokenizer.ggml.pre` = `name`.
pub fn gguf_pre_tokenizer(name: &str) -> Result<&'static GgufPreTokenizer, RegistryError> {
    find("GGUF pre-tokenizer", pre_tokenizers(), name)
}

/// The GGUF vocabulary model registered under `name` (`tokenizer.ggml.model`).
pub fn gguf_vocab(name: &str) -> Result<&'static GgufVocab, RegistryError> {
    find("GGUF vocabulary model", vocabs(), name)
}

/// The KV backend registered under `name`.
pub fn kv_backend(name: &str) -> Result<&'static KvRegistration, RegistryError> {
    find("KV backend", kvs(), name)
}

/// The sampler registered under `name`.
pub fn sampler(name: &str) -> Result<&'static SamplerRegistration, RegistryError> {
    find("sampler", samplers(), name)
}

/// Registered architecture names, sorted.
pub fn architecture_names() -> Result<Vec<&'static str>, RegistryError> {
    names(archs())
}

/// Registered KV backend names, sorted.
pub fn kv_backend_names() -> Result<Vec<&'static str>, RegistryError> {
    names(kvs())
}

/// Registered sampler names, sorted.
pub fn sampler_names() -> Result<Vec<&'static str>, RegistryError> {
    names(samplers())
}

/// Registered GGUF architecture names, sorted.
pub fn gguf_arch_names() -> Result<Vec<&'static str>, RegistryError> {
    names(gguf_archs())
}

/// Registered GGUF vocabulary models, sorted.
pub fn gguf_vocab_names() -> Result<Vec<&'static str>, RegistryError> {
    names(vocabs())
}

/// Registered GGUF pre-tokenizer names, sorted.
pub fn gguf_pre_tokenizer_names() -> Result<Vec<&'static str>, RegistryError> {
    names(pre_tokenizers())
}
