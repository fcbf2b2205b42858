//! The plugin registry: const registrations gathered by `inventory`, built lazily into
//! sorted maps. A duplicate name is an error; an unknown name lists the known ones.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use crate::arch::{ArchRegistration, ModelTypeRegistration};
pub use crate::error::RegistryError;
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

/// The architecture that registered the Hugging Face `model_type` `name`.
pub fn model_type(name: &str) -> Result<&'static ModelTypeRegistration, RegistryError> {
    find("model_type", model_types(), name)
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
