//! config.json: what the Llama refuses (model-dir.md) and both generations of names.

use serde_json::{json, Value};
use tl_arch_llama::LlamaConfig;
use tl_core::ModelConfig;

fn base() -> Value {
    json!({
        "tl_arch": "llama", "tl_tokenizer": "byte", "model_type": "llama",
        "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5, "max_position_embeddings": 256, "hidden_act": "silu",
        "tie_word_embeddings": true
    })
}

fn with(changes: Value) -> String {
    let mut v = base();
    for (k, x) in changes.as_object().expect("an object") {
        v[k] = x.clone();
    }
    v.to_string()
}

fn without(v: Value, keys: &[&str]) -> String {
    let mut v = v;
    for k in keys {
        v.as_object_mut().expect("an object").remove(*k);
    }
    v.to_string()
}

fn llama(text: &str) -> LlamaConfig {
    let cfg = ModelConfig::from_json(text).unwrap_or_else(|e| panic!("refused {text}: {e}"));
    cfg.arch_config::<LlamaConfig>().expect("a LlamaConfig").clone()
}

#[test]
fn config_refuses_what_the_engine_cannot_run() {
    use tl_arch_llama as _;
    // (change, words the message must contain: the field and the value)
    let cases: Vec<(Value, &[&str])> = vec![
        // llama3 needs all four of its fields (transformers refuses it without them too).
        (json!({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}), &["rope_scaling.low_freq_factor"]),
        (
            json!({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}}),
            &["rope_scaling.high_freq_factor", "1"],
        ),
        (json!({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}), &["rope_scaling.rope_type", "dynamic"]),
        (json!({"rope_scaling": {"rope_type": "longrope", "factor": 2.0}}), &["rope_scaling.rope_type", "longrope"]),
        (json!({"rope_scaling": {"type": "linear", "factor": 2.0}}), &["rope_scaling.type", "linear"]),
        (json!({"rope_scaling": {"factor": 2.0}}), &["rope_scaling", "factor"]),
        // YaRN is implemented (model-dir.md); it needs the context it was trained at, and
        // a factor of at least 1 (transformers' validation).
        (
            json!({"rope_parameters": {"rope_theta": 10000.0, "rope_type": "yarn"}}),
            &["rope_parameters.original_max_position_embeddings"],
        ),
        (
            json!({"rope_parameters": {"rope_theta": 10000.0, "rope_type": "yarn", "factor": 0.5,
                "original_max_position_embeddings": 64}}),
            &["rope_parameters.factor", "0.5"],
        ),
        (
            json!({"rope_parameters": {"rope_theta": 10000.0, "rope_type": "yarn", "factor": 4.0,
                "original_max_position_embeddings": 64, "truncate": "no"}}),
            &["rope_parameters.truncate", "no"],
        ),
        (
            json!({"rope_theta": 10000.0, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}}),
            &["rope_parameters.rope_theta", "500000"],
        ),
        (json!({"sliding_window": 4096}), &["sliding_window", "4096"]),
        (json!({"sliding_window": 4096, "use_sliding_window": true}), &["sliding_window", "4096"]),
        (json!({"attention_bias": true}), &["attention_bias", "true"]),
        (json!({"mlp_bias": true}), &["mlp_bias", "true"]),
        (json!({"hidden_act": "gelu"}), &["hidden_act", "gelu"]),
        (json!({"num_attention_heads": 5, "num_key_value_heads": 5}), &["num_attention_heads", "5"]),
        (json!({"num_key_value_heads": 3}), &["num_key_value_heads", "3"]),
        (json!({"hidden_size": 0}), &["hidden_size", "0"]),
        (json!({"num_hidden_layers": 0}), &["num_hidden_layers", "0"]),
        (json!({"intermediate_size": 1_000_000_000u64}), &["intermediate_size", "1000000000"]),
        (json!({"num_attention_heads": 1_000_000}), &["num_attention_heads", "1000000"]),
        (json!({"head_dim": 15}), &["head_dim", "15"]),
        (json!({"rms_norm_eps": -1.0}), &["rms_norm_eps", "-1"]),
        (json!({"rope_theta": 0.0}), &["rope_theta", "0"]),
        (json!({"tie_word_embeddings": "yes"}), &["tie_word_embeddings", "yes"]),
    ];
    for (change, words) in cases {
        let text = with(change.clone());
        let err = match ModelConfig::from_json(&text) {
            Ok(_) => panic!("accepted {change}"),
            Err(e) => e.to_string(),
        };
        for w in words {
            assert!(err.contains(w), "refusing {change}: message {err:?} does not name {w:?}");
        }
    }
    let missing = ModelConfig::from_json(&without(base(), &["hidden_size"])).err().map(|e| e.to_string());
    assert!(missing.as_deref().is_some_and(|m| m.contains("hidden_size")), "{missing:?}");

    // What is not in force, or plain, loads.
    for ok in [
        json!({"sliding_window": null}),
        json!({"sliding_window": 4096, "use_sliding_window": false}),
        json!({"rope_scaling": null}),
        json!({"rope_scaling": {"rope_type": "default"}}),
        json!({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}),
        json!({"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}),
        json!({"attention_bias": false, "mlp_bias": false}),
    ] {
        llama(&with(ok));
    }
}

#[test]
fn both_generations_of_rope_names_load() {
    use tl_arch_llama as _;
    let v4 = llama(&with(json!({"rope_theta": 500000.0, "rope_scaling": null, "torch_dtype": "bfloat16"})));
    let v5 =
        llama(&with(json!({"rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}, "dtype": "bfloat16"})));
    assert_eq!(v4, v5);
    assert_eq!(v4.rope_theta, 500000.0);
    assert_eq!(v4.dtype.as_deref(), Some("bfloat16"));
    // Both names at once, agreeing, also load.
    let both = llama(&with(
        json!({"rope_theta": 500000.0, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}}),
    ));
    assert_eq!(both.rope_theta, 500000.0);
}

#[test]
fn config_defaults_follow_hugging_face() {
    use tl_arch_llama as _;
    let c = llama(&without(
        base(),
        &["num_key_value_heads", "rms_norm_eps", "hidden_act", "tie_word_embeddings", "max_position_embeddings"],
    ));
    assert_eq!(c.num_key_value_heads, 4);
    assert_eq!(c.head_dim, 16);
    assert_eq!(c.rope_theta, 10000.0);
    assert_eq!(c.rms_norm_eps, 1e-6);
    assert!(!c.tie_word_embeddings);
    assert_eq!(c.max_position_embeddings, None);
    // An explicit head_dim need not be hidden / heads.
    let c = llama(&with(json!({"head_dim": 32})));
    assert_eq!((c.head_dim, c.q_width(), c.kv_width()), (32, 128, 64));
}

#[test]
fn yarn_configs_load_with_transformers_defaults() {
    use tl_arch_llama as _;
    use tl_decoder::RopeScaling;
    let c = llama(&with(json!({"rope_parameters": {"rope_theta": 150000.0, "rope_type": "yarn",
        "factor": 32.0, "original_max_position_embeddings": 64, "truncate": false}})));
    let Some(RopeScaling::Yarn(y)) = c.rope_scaling else { panic!("not YaRN: {:?}", c.rope_scaling) };
    assert_eq!((y.theta, y.factor, y.beta_fast, y.beta_slow, y.truncate), (150000.0, 32.0, 32.0, 1.0, false));
    assert!(c.rope().scale > 1.0, "YaRN's attention factor scales cos and sin");
    // No factor: transformers derives it from the two context lengths (256 / 64).
    let c = llama(&with(json!({"rope_scaling": {"rope_type": "yarn", "original_max_position_embeddings": 64}})));
    let Some(RopeScaling::Yarn(y)) = c.rope_scaling else { panic!("not YaRN") };
    assert_eq!((y.factor, y.theta, y.truncate), (4.0, 10000.0, true));
}
