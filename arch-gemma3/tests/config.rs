//! Gemma 3's config.json: transformers' defaults, both generations of RoPE names, layer
//! kinds from `layer_types` or the pattern, and what is refused (with the field named).

use serde_json::{json, Value};
use tl_arch_gemma3::{Gemma3Config, LayerKind};
use tl_core::ModelConfig;

fn base() -> Value {
    json!({
        "model_type": "gemma3_text", "tl_tokenizer": "byte",
        "vocab_size": 320, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 7, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32,
        "sliding_window": 16
    })
}

fn with(changes: Value) -> String {
    let mut v = base();
    for (k, x) in changes.as_object().expect("an object") {
        v[k] = x.clone();
    }
    v.to_string()
}

fn gemma(text: &str) -> Gemma3Config {
    use tl_arch_gemma3 as _;
    let cfg = ModelConfig::from_json(text).unwrap_or_else(|e| panic!("refused {text}: {e}"));
    cfg.arch_config::<Gemma3Config>().expect("a Gemma3Config").clone()
}

#[test]
fn defaults_are_transformers_gemma3_text_config() {
    let c = gemma(&base().to_string());
    use LayerKind::{Global as G, Windowed as W};
    // Pattern 6: layers 5, 11, ... are global.
    assert_eq!(c.layers, vec![W, W, W, W, W, G, W]);
    assert_eq!((c.rope_theta, c.rope_local_theta, c.query_pre_attn_scalar), (1e6, 1e4, 256.0));
    assert_eq!((c.rms_norm_eps, c.tie_word_embeddings, c.norms_include_one), (1e-6, true, false));
    assert_eq!(c.sliding_window, 16);
    // head_dim defaults to 256, not hidden / heads.
    let mut v = base();
    v.as_object_mut().unwrap().remove("head_dim");
    assert_eq!(gemma(&v.to_string()).head_dim, 256);
    // An old config's pattern key; layer_types wins over any pattern.
    assert_eq!(gemma(&with(json!({"sliding_window_pattern": 2}))).layers, vec![W, G, W, G, W, G, W]);
    let types = json!([
        "full_attention",
        "sliding_attention",
        "full_attention",
        "full_attention",
        "sliding_attention",
        "sliding_attention",
        "full_attention"
    ]);
    let c = gemma(&with(json!({"layer_types": types, "sliding_window_pattern": 2})));
    assert_eq!(c.layers, vec![G, W, G, G, W, W, G]);
    assert_eq!(c.window(LayerKind::Windowed), Some(16));
    assert_eq!(c.window(LayerKind::Global), None);
}

#[test]
fn both_generations_of_rope_names() {
    let v4 = gemma(&with(json!({"rope_theta": 5e5, "rope_local_base_freq": 2e4, "rope_scaling": null})));
    assert_eq!((v4.rope_theta, v4.rope_local_theta), (5e5, 2e4));
    let v5 = gemma(&with(json!({"rope_parameters": {
        "full_attention": {"rope_type": "default", "rope_theta": 5e5},
        "sliding_attention": {"rope_type": "default", "rope_theta": 2e4}}})));
    assert_eq!((v5.rope_theta, v5.rope_local_theta), (5e5, 2e4));
}

#[test]
fn config_refuses_what_the_forward_does_not_implement() {
    use tl_arch_gemma3 as _;
    // (change, words the message must contain: the field and the value)
    let cases: Vec<(Value, &[&str])> = vec![
        (json!({"final_logit_softcapping": 30.0}), &["final_logit_softcapping", "30"]),
        (json!({"attn_logit_softcapping": 50.0}), &["attn_logit_softcapping", "50"]),
        (json!({"rope_scaling": {"rope_type": "linear", "factor": 8.0}}), &["rope_scaling.rope_type", "linear"]),
        (
            json!({"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}}),
            &["rope_parameters.full_attention.rope_type", "linear"],
        ),
        (json!({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}), &["rope_parameters"]),
        (json!({"hidden_activation": "gelu"}), &["hidden_activation", "gelu"]),
        (json!({"hidden_act": "silu"}), &["hidden_act", "silu"]),
        (json!({"attention_bias": true}), &["attention_bias", "true"]),
        (json!({"use_bidirectional_attention": true}), &["use_bidirectional_attention", "true"]),
        (json!({"layer_types": ["full_attention"]}), &["layer_types", "7 layer types"]),
        (json!({"layer_types": vec!["chunked_attention"; 7]}), &["layer_types", "chunked_attention"]),
        (json!({"sliding_window": null}), &["sliding_window"]),
        (json!({"sliding_window": 0}), &["sliding_window", "0"]),
        (json!({"num_key_value_heads": 3}), &["num_key_value_heads", "3"]),
        (json!({"head_dim": 31}), &["head_dim", "31"]),
        (json!({"query_pre_attn_scalar": -1}), &["query_pre_attn_scalar", "-1"]),
    ];
    for (change, words) in cases {
        let text = with(change.clone());
        let err = ModelConfig::from_json(&text).err().unwrap_or_else(|| panic!("accepted {change}")).to_string();
        for w in words {
            assert!(err.contains(w), "{change}: {err:?} does not name {w:?}");
        }
    }
    // A null window is fine when no layer is windowed.
    let all_global = json!({"layer_types": vec!["full_attention"; 7], "sliding_window": null});
    assert!(gemma(&with(all_global)).layers.iter().all(|&k| k == LayerKind::Global));
}
