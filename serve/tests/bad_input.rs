//! docs/reliability.md's bad-input rows as a server meets them: a token id past the
//! vocabulary, sampling parameters out of range, a chat template that fails to render,
//! and NaN logits from a corrupted checkpoint. Each gets one OpenAI error naming the
//! thing, and leaves no KV block taken.

mod common;

#[path = "../../engine/tests/support/nan_checkpoint.rs"]
mod nan_checkpoint;

use common::*;
use serde_json::json;

#[test]
fn request_rows_get_one_named_error_and_take_no_block() {
    let s = Server::start(options(tiny(), 64, 16, 4, 16));
    let r = s.post("/v1/completions", &json!({"prompt": [1, 2, 320], "max_tokens": 2}));
    assert_eq!(r.status, 400);
    let e = r.json();
    assert_eq!(e["error"]["param"], "prompt");
    assert!(e["error"]["message"].as_str().is_some_and(|m| m.contains("320") && m.contains("vocab")), "{e}");
    for (field, v) in
        [("temperature", json!(-0.5)), ("top_p", json!(1.5)), ("min_p", json!(f64::MAX)), ("top_k", json!(-2))]
    {
        let mut b = json!({"prompt": "hi", "max_tokens": 2});
        b[field] = v;
        let r = s.post("/v1/completions", &b);
        assert_eq!(r.status, 400, "{field}");
        assert_eq!(r.json()["error"]["param"], field);
        assert!(r.json()["error"]["message"].as_str().is_some_and(|m| m.contains(field)));
    }
    s.assert_pool_clean();
}

#[test]
fn a_chat_template_that_fails_to_render_is_a_400_naming_it() {
    let d = tempfile::tempdir().expect("tempdir");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(tiny().join(f), d.path().join(f)).expect("copy");
    }
    let tmpl = "{% if messages[0].role != 'system' %}{{ raise_exception('a system turn comes first') }}{% endif %}x";
    std::fs::write(d.path().join("chat_template.jinja"), tmpl).expect("write");
    let s = Server::start(options(d.path().to_path_buf(), 64, 16, 4, 16));
    let r = s.post("/v1/chat/completions", &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}));
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "messages");
    assert!(r.json()["error"]["message"].as_str().is_some_and(|m| m.contains("a system turn comes first")));
    s.assert_pool_clean();
}

#[test]
fn nan_logits_are_refused_not_sampled() {
    // A corrupted checkpoint: the final norm's weights are NaN, so every logit is.
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::copy(tiny().join("config.json"), d.path().join("config.json")).expect("copy");
    std::fs::copy(tiny().join("model.safetensors"), d.path().join("model.safetensors")).expect("copy");
    nan_checkpoint::nan_final_norm(&d.path().join("model.safetensors"));
    let s = Server::start(options(d.path().to_path_buf(), 64, 16, 4, 16));
    let r = s.post("/v1/completions", &json!({"prompt": "hi", "max_tokens": 4}));
    assert_eq!(r.status, 500, "{}", String::from_utf8_lossy(&r.body));
    let m = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(m.contains("NaN") && m.contains("refusing to sample"), "{m}");
    let r = s.post("/v1/completions", &json!({"prompt": "hi", "max_tokens": 4, "stream": true}));
    let ev = r.events();
    assert!(ev.iter().any(|e| e.contains("NaN")), "{ev:?}");
    assert_eq!(ev.last().map(String::as_str), Some("[DONE]"));
    s.assert_pool_clean();
}
