//! The error of a plugin lookup, in its own module so that config parsing can report an
//! unknown architecture without depending on the registry (which depends on the
//! architecture interface, which depends on the config).

use thiserror::Error;

/// A registry lookup that failed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RegistryError {
    /// No plugin of that kind has that name.
    #[error("unknown {kind} {name:?}; registered: [{}] (is the plugin crate linked? `use tl_x as _;`)", known.join(", "))]
    Unknown {
        /// "architecture", "KV backend" or "sampler".
        kind: &'static str,
        /// The name asked for.
        name: String,
        /// The registered names, sorted.
        known: Vec<String>,
    },
    /// Two linked crates registered the same name.
    #[error("{kind} {name:?} is registered twice")]
    Duplicate {
        /// The kind of plugin.
        kind: &'static str,
        /// The name.
        name: String,
    },
}
