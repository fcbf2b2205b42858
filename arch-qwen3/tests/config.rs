//! Qwen3's config: what it accepts from Hugging Face (an explicit head_dim that is not
//! hidden / heads) and what it refuses, naming the field.

use tl_arch_qwen3::Qwen3Config;
use tl_core::ModelConfig;

fn fixture_json() -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-qwen3/config.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("config.json")).expect("JSON")
}

fn parse(json: serde_json::Value) -> Result<Qwen3Config, String> {
    use tl_arch_qwen3 as _;
    let cfg = ModelConfig::from_value(json, None).map_err(|e| e.to_string())?;
    Ok(cfg.arch_config::<Qwen3Config>().map_err(|e| e.to_string())?.clone())
}

#[test]
fn a_hugging_face_qwen3_config_parses_with_its_own_head_dim_and_rope_base() {
    let c = parse(fixture_json()).expect("the fixture's config");
    assert_eq!((c.hidden_size, c.num_attention_heads, c.head_dim), (64, 4, 32), "head_dim is the config's");
    assert_eq!((c.q_width(), c.kv_width()), (128, 64));
    assert!(!c.qkv_bias);
    assert_eq!((c.rope_theta, c.tie_word_embeddings, c.num_key_value_heads), (1e6, false, 2));
}

#[test]
fn windows_biases_and_other_activations_are_refused_naming_the_field() {
    let refused = |edit: &dyn Fn(&mut serde_json::Value), field: &str| {
        let mut j = fixture_json();
        edit(&mut j);
        let e = parse(j).expect_err(field);
        assert!(e.contains(field), "{field}: {e}");
    };
    refused(
        &|j| {
            j["use_sliding_window"] = true.into();
            j["sliding_window"] = 64.into();
        },
        "sliding_window",
    );
    refused(&|j| j["layer_types"] = serde_json::json!(["full_attention", "sliding_attention"]), "layer_types");
    refused(&|j| j["attention_bias"] = true.into(), "attention_bias");
    refused(&|j| j["hidden_act"] = "gelu".into(), "hidden_act");
    refused(&|j| j["rope_parameters"] = serde_json::json!({"rope_type": "yarn", "rope_theta": 1e6}), "rope_type");
    // The fixture itself carries a window size it does not use (`use_sliding_window: false`).
    let mut j = fixture_json();
    j["sliding_window"] = 4096.into();
    parse(j).expect("a window that is not in force is accepted");
}
