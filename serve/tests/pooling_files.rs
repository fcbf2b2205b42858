//! What a model folder's files say about pooling and reranking heads (serve's pooling.rs):
//! sentence-transformers' modules.json and 1_Pooling/config.json, `--pooling` over them,
//! the defaults, modes tl refuses, and every sign of a reranking head.

use std::path::Path;

use serde_json::json;
use tl_engine::Pooling;
use tl_serve::pooling::ModelPooling;

fn write(dir: &Path, name: &str, v: &serde_json::Value) {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, v.to_string()).expect("write");
}

fn modules(normalize: bool) -> serde_json::Value {
    let mut m = vec![
        json!({"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}),
        json!({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}),
    ];
    if normalize {
        m.push(json!({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}));
    }
    json!(m)
}

#[test]
fn pooling_from_files_flag_and_defaults() {
    let d = tempfile::tempdir().expect("tempdir");
    // Nothing said: last-token, normalised, no head.
    let p = ModelPooling::of(d.path(), None);
    assert_eq!(p, ModelPooling { pooling: Ok(Pooling::Last), normalize: true, rerank_head: None });
    for (key, want) in [
        ("pooling_mode_lasttoken", Pooling::Last),
        ("pooling_mode_mean_tokens", Pooling::Mean),
        ("pooling_mode_cls_token", Pooling::Cls),
    ] {
        write(d.path(), "modules.json", &modules(false));
        write(d.path(), "1_Pooling/config.json", &json!({key: true, "pooling_mode_max_tokens": false}));
        let p = ModelPooling::of(d.path(), None);
        assert_eq!(p.pooling, Ok(want), "{key}");
        assert!(!p.normalize, "no Normalize module: raw vectors");
        write(d.path(), "modules.json", &modules(true));
        assert!(ModelPooling::of(d.path(), None).normalize, "Normalize listed");
        assert_eq!(ModelPooling::of(d.path(), Some(Pooling::Cls)).pooling, Ok(Pooling::Cls), "the flag wins");
    }
    write(d.path(), "1_Pooling/config.json", &json!({"pooling_mode_max_tokens": true}));
    let p = ModelPooling::of(d.path(), None);
    assert!(p.pooling.as_ref().is_err_and(|e| e.contains("pooling_mode_max_tokens")), "{p:?}");
    assert_eq!(ModelPooling::of(d.path(), Some(Pooling::Mean)).pooling, Ok(Pooling::Mean));
    write(
        d.path(),
        "1_Pooling/config.json",
        &json!({"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": true}),
    );
    assert!(ModelPooling::of(d.path(), None).pooling.is_err(), "two modes at once");
    // Malformed files count as saying nothing about the mode.
    std::fs::write(d.path().join("1_Pooling/config.json"), "{not json").expect("write");
    assert_eq!(ModelPooling::of(d.path(), None).pooling, Ok(Pooling::Last));
    std::fs::write(d.path().join("modules.json"), "[1, 2").expect("write");
    assert_eq!(ModelPooling::of(d.path(), None), ModelPooling::of(tempfile::tempdir().expect("t").path(), None));
}

#[test]
fn every_sign_of_a_reranking_head() {
    let head = |setup: &dyn Fn(&Path)| {
        let d = tempfile::tempdir().expect("tempdir");
        write(d.path(), "config.json", &json!({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}));
        setup(d.path());
        ModelPooling::of(d.path(), None).rerank_head
    };
    assert_eq!(head(&|_| {}), None);
    let arch = head(&|p| write(p, "config.json", &json!({"architectures": ["BertForSequenceClassification"]})));
    assert!(arch.is_some_and(|w| w.contains("BertForSequenceClassification")));
    let ce = head(&|p| write(p, "config.json", &json!({"sbert_ce_default_activation_function": "torch.nn.Sigmoid"})));
    assert!(ce.is_some_and(|w| w.contains("cross-encoder")));
    let st = head(&|p| write(p, "config_sentence_transformers.json", &json!({"model_type": "CrossEncoder"})));
    assert!(st.is_some_and(|w| w.contains("cross-encoder")));
    for tensor in ["score.weight", "classifier.dense.weight"] {
        let found = head(&|p| {
            let header = json!({tensor: {"dtype": "F32", "shape": [1, 1], "data_offsets": [0, 4]}}).to_string();
            let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
            bytes.extend(header.as_bytes());
            bytes.extend([0u8; 4]);
            std::fs::write(p.join("model.safetensors"), bytes).expect("write");
        });
        assert!(found.is_some_and(|w| w.contains(tensor)), "{tensor}");
        let indexed =
            head(&|p| write(p, "model.safetensors.index.json", &json!({"weight_map": {tensor: "a.safetensors"}})));
        assert!(indexed.is_some_and(|w| w.contains(tensor)), "{tensor} in the index");
    }
    // A single file (a GGUF) gets the defaults.
    let d = tempfile::tempdir().expect("tempdir");
    let f = d.path().join("model.gguf");
    std::fs::write(&f, b"GGUF").expect("write");
    assert_eq!(
        ModelPooling::of(&f, None),
        ModelPooling { pooling: Ok(Pooling::Last), normalize: true, rerank_head: None }
    );
}
