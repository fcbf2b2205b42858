//! Example programs of tl's API, and the old binary names.
//!
//! The binaries `generate`, `chat`, `convert`, `perplexity`, `bench` and `probe` are
//! deprecated aliases of `tl generate`, `tl run`, `tl convert`, ... (tl-cli), kept for one
//! release so scripts that call them keep working: each is one `main` that runs the same
//! command's code. `train_bigram` and `examples/` are programs over the API.
#![deny(missing_docs)]

pub use tl_families::flags::{fail, parse_or_exit};
pub use tl_families::link;
