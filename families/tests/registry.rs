//! Linking tl-families links every plugin: each registers under its documented name. A new
//! family's crate named in families/src/lib.rs shows up here (add it to the list).

use tl_core::registry;

#[test]
fn link_registers_every_family_kv_backend_and_sampler() {
    tl_families::link();
    let mut arches = registry::architecture_names().unwrap();
    arches.sort_unstable();
    assert_eq!(
        arches,
        vec![
            "bert",
            "bigram",
            "gemma3",
            "gemma4",
            "gpt_oss",
            "llama",
            "mistral",
            "mixtral",
            "modernbert",
            "nomic_bert",
            "olmoe",
            "qwen2",
            "qwen3",
            "qwen3_5",
            "qwen3_5_moe",
            "qwen3_moe"
        ]
    );
    assert_eq!(registry::kv_backend_names().unwrap(), vec!["f16-slab", "q8-slab"]);
    assert_eq!(registry::sampler_names().unwrap(), vec!["spec"]);
}
