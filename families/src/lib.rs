//! tl-families: the one place that links every tl plugin, and the engine flags every tl
//! command shares.
//!
//! # Why a crate only to name other crates
//!
//! Architectures, KV backends and samplers register themselves with `inventory`: a static
//! in the plugin crate, collected at start-up. rustc links a dependency only when the code
//! names it, and nothing calls into a plugin crate directly (the registry finds it by
//! name), so a plugin listed in Cargo.toml but never named is silently left out and its
//! registrations vanish ("unknown architecture"). Each crate is therefore named below with
//! `use x as _;`, and every binary, fuzz target and test names this crate in turn by
//! calling [`link`] (or `use tl_families as _;`). Adding a family is its crate, one line
//! here (and in Cargo.toml), and the workspace members list; nothing else.
//!
//! # Why the flags live here too
//!
//! Every program that loads a model needs both: the families linked, and the flags that
//! configure the engine ([`flags::EngineArgs`]). Keeping the flags below tl-serve lets
//! serve's own binaries (`serve`, `verify`) and the `tl` front door (tl-cli, which
//! depends on tl-serve) share one definition.
#![deny(missing_docs)]

use tl_arch_bert as _;
use tl_arch_bigram as _;
use tl_arch_gemma3 as _;
use tl_arch_gemma4 as _;
use tl_arch_gpt_oss as _;
use tl_arch_llama as _;
use tl_arch_mistral as _;
use tl_arch_mixtral as _;
use tl_arch_modernbert as _;
use tl_arch_nomic_bert as _;
use tl_arch_olmoe as _;
use tl_arch_qwen2 as _;
use tl_arch_qwen3 as _;
use tl_arch_qwen3_5 as _;
use tl_arch_qwen3_moe as _;
use tl_kv as _;
use tl_sampling as _;

pub mod flags;

/// Make sure every plugin is linked into the calling binary. Calling it does nothing at
/// run time: naming this crate is what keeps the plugins' registrations (see the crate
/// documentation).
#[inline(never)]
pub fn link() {}
