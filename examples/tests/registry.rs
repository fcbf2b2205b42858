//! Every plugin crate the binaries link registers under its documented name.

use tl_core::registry;
// The same links the binaries make (examples/src/lib.rs); naming the crates here keeps
// their registrations in this test binary too.
use tl_arch_bigram as _;
use tl_arch_llama as _;
use tl_kv as _;
use tl_sampling as _;

#[test]
fn the_registry_lists_every_linked_plugin() {
    assert_eq!(registry::architecture_names().unwrap(), vec!["bigram", "llama"]);
    assert_eq!(registry::kv_backend_names().unwrap(), vec!["f16-slab", "q8-slab"]);
    assert_eq!(registry::sampler_names().unwrap(), vec!["spec"]);
}
