//! Mistral's config: the window as Hugging Face reads it (a number, `null` for none, a
//! missing key for transformers' default 4096) and what is refused, naming the field.

use tl_arch_mistral::{MistralConfig, DEFAULT_SLIDING_WINDOW};
use tl_core::ModelConfig;
use tl_decoder::LayerAttn;

fn fixture_json() -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-mistral/config.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("config.json")).expect("JSON")
}

fn parse(json: serde_json::Value) -> Result<MistralConfig, String> {
    use tl_arch_mistral as _;
    let cfg = ModelConfig::from_value(json, None).map_err(|e| e.to_string())?;
    assert_eq!(cfg.arch, "mistral", "model_type \"mistral\" selects the architecture");
    Ok(cfg.arch_config::<MistralConfig>().map_err(|e| e.to_string())?.clone())
}

#[test]
fn the_window_is_read_as_hugging_face_reads_it() {
    let c = parse(fixture_json()).expect("the fixture's config");
    assert_eq!(c.layer_attn, vec![LayerAttn::Windowed(16); 2], "the window on every layer");
    assert_eq!((c.head_dim, c.rope_theta, c.tie_word_embeddings), (16, 10000.0, false));
    let mut j = fixture_json();
    j["sliding_window"] = serde_json::Value::Null;
    assert_eq!(parse(j).expect("v0.2: null").layer_attn, vec![LayerAttn::Global; 2]);
    let mut j = fixture_json();
    j.as_object_mut().expect("object").remove("sliding_window");
    assert_eq!(parse(j).expect("no key").layer_attn, vec![LayerAttn::Windowed(DEFAULT_SLIDING_WINDOW); 2]);
    assert_eq!(DEFAULT_SLIDING_WINDOW, 4096, "transformers 5.23's MistralConfig default");
}

#[test]
fn bad_windows_and_what_mistral_lacks_are_refused_naming_the_field() {
    let refused = |edit: &dyn Fn(&mut serde_json::Value), field: &str| {
        let mut j = fixture_json();
        edit(&mut j);
        let e = parse(j).expect_err(field);
        assert!(e.contains(field), "{field}: {e}");
    };
    for bad in [serde_json::json!(0), serde_json::json!(-4), serde_json::json!(2.5), serde_json::json!("16")] {
        refused(&|j| j["sliding_window"] = bad.clone(), "sliding_window");
    }
    refused(&|j| j["layer_types"] = serde_json::json!(["sliding_attention", "full_attention"]), "layer_types");
    refused(&|j| j["attention_bias"] = true.into(), "attention_bias");
    refused(&|j| j["hidden_act"] = "gelu".into(), "hidden_act");
    refused(&|j| j["rope_parameters"] = serde_json::json!({"rope_type": "yarn", "rope_theta": 1e4}), "rope_type");
}
