//! `/tokenize` and `/detokenize` in llama-server's and vLLM's shapes, `GET /v1/models/{id}`,
//! and `usage.completion_tokens_details`.

mod common;

use common::*;
use serde_json::json;

#[test]
fn tokenize_and_detokenize_in_both_shapes() {
    let s = Server::start(options(tiny(), 64, 4, 4, 16));
    // llama-server: {"content"} -> {"tokens"}, with pieces on request.
    let v = s.post("/tokenize", &json!({"content": "abc"})).json();
    assert_eq!(v, json!({"tokens": [97, 98, 99]}));
    let v = s.post("/tokenize", &json!({"content": "ab", "with_pieces": true})).json();
    assert_eq!(v, json!({"tokens": [{"id": 97, "piece": "a"}, {"id": 98, "piece": "b"}]}));
    // vLLM: {"prompt"} -> {"count", "max_model_len", "tokens"}.
    let v = s.post("/tokenize", &json!({"model": "tiny-llama", "prompt": "hi!", "return_token_strs": true})).json();
    assert_eq!(v, json!({"count": 3, "max_model_len": 256, "tokens": [104, 105, 33], "token_strs": ["h", "i", "!"]}));
    // vLLM messages: the chat template's rendering, the same ids a chat request's prompt has.
    let msgs = json!([{"role": "user", "content": "hey"}]);
    let v = s.post("/tokenize", &json!({"messages": msgs})).json();
    let n = v["count"].as_u64().expect("count");
    let chat = s.post("/v1/chat/completions", &json!({"messages": msgs, "max_tokens": 1})).json();
    assert_eq!(chat["usage"]["prompt_tokens"].as_u64(), Some(n), "{v} vs {chat}");
    // Detokenize answers in both names.
    let v = s.post("/detokenize", &json!({"tokens": [104, 105]})).json();
    assert_eq!(v, json!({"content": "hi", "prompt": "hi"}));
    // Bad input: 400 naming the field; a wrong model is 404.
    for (path, body, param) in [
        ("/detokenize", json!({"tokens": [1_000_000]}), "tokens"),
        ("/detokenize", json!({"tokens": "x"}), ""),
        ("/detokenize", json!({}), "tokens"),
        ("/tokenize", json!({}), "prompt"),
        ("/tokenize", json!({"prompt": "a", "messages": []}), "prompt"),
    ] {
        let r = s.post(path, &body);
        assert_eq!(r.status, 400, "{path} {body}: {}", String::from_utf8_lossy(&r.body));
        if !param.is_empty() {
            assert_eq!(r.json()["error"]["param"], param, "{path} {body}");
        }
    }
    assert_eq!(s.post("/tokenize", &json!({"model": "other", "prompt": "a"})).status, 404);
}

#[test]
fn models_by_id_and_completion_token_details() {
    let s = Server::start(options(tiny(), 64, 4, 4, 16));
    let r = s.get("/v1/models/tiny-llama");
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!((v["id"].as_str(), v["object"].as_str()), (Some("tiny-llama"), Some("model")), "{v}");
    let r = s.get("/v1/models/gpt-4");
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], "model_not_found");
    let v = s.post("/v1/completions", &json!({"prompt": "a", "max_tokens": 2})).json();
    assert_eq!(
        v["usage"]["completion_tokens_details"],
        json!({"reasoning_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0})
    );
}
