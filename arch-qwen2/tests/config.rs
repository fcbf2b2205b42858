//! Qwen2's config: what it accepts from Hugging Face and what it refuses as Llama does.

use tl_arch_qwen2::{Qwen2Config, QWEN2};
use tl_core::ModelConfig;

fn fixture_json() -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-qwen2/config.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("config.json")).expect("JSON")
}

fn parse(json: serde_json::Value) -> Result<Qwen2Config, String> {
    let cfg = ModelConfig::from_value(json, None).map_err(|e| e.to_string())?;
    Ok(cfg.arch_config::<Qwen2Config>().map_err(|e| e.to_string())?.clone())
}

#[test]
fn a_hugging_face_qwen2_config_parses_with_biases_and_its_rope_base() {
    use tl_arch_qwen2 as _;
    let c = parse(fixture_json()).expect("the fixture's config");
    assert!(c.qkv_bias && QWEN2.qkv_bias);
    assert_eq!((c.rope_theta, c.tie_word_embeddings, c.num_key_value_heads), (1e6, false, 2));
}

#[test]
fn sliding_window_configs_are_refused_as_llama_refuses_them() {
    use tl_arch_qwen2 as _;
    let mut j = fixture_json();
    j["use_sliding_window"] = true.into();
    j["sliding_window"] = 64.into();
    let e = parse(j).unwrap_err();
    assert!(e.contains("sliding_window"), "{e}");
    let mut j = fixture_json();
    j["layer_types"] = serde_json::json!(["full_attention", "sliding_attention"]);
    let e = parse(j).unwrap_err();
    assert!(e.contains("layer_types"), "{e}");
    let mut j = fixture_json();
    j["mlp_bias"] = true.into();
    assert!(parse(j).unwrap_err().contains("mlp_bias"));
}
