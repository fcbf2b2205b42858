//! Bad bodies on `/v1/embeddings`, `/v1/rerank` and `/rerank`: malformed, mistyped, empty,
//! too long, out of range, another model. Each is a 4xx in OpenAI's error shape naming the
//! field, never a 500 or a panic, and takes no KV block.

mod common;

use common::*;
use serde_json::{json, Value};

fn assert_refused(s: &Server, path: &str, body: &[u8], status: u16, param: Option<&str>) {
    let r = request(s.addr, "POST", path, body, &[("content-type", "application/json")]);
    let shown = String::from_utf8_lossy(body);
    assert_eq!(r.status, status, "{path} {shown}: {}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    let e = &v["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{path} {shown}: {v}");
    assert!(e["type"].is_string(), "{path} {shown}: {v}");
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{path} {shown}: {v}");
    }
}

fn bad(s: &Server, path: &str, body: Value, param: &str) {
    assert_refused(s, path, body.to_string().as_bytes(), 400, Some(param));
}

#[test]
fn embeddings_bad_bodies_are_4xx() {
    let s = Server::start(options(tiny(), 64, 16, 4, 16));
    let p = "/v1/embeddings";
    for raw in [&b"not json"[..], b"", b"[1, 2]", b"\"input\"", b"{\"input\": [1, 2"] {
        assert_refused(&s, p, raw, 400, None);
    }
    for input in [
        json!(null),
        json!(5),
        json!({"text": "x"}),
        json!([]),
        json!(""),
        json!([""]),
        json!(["a", 1]),
        json!([1, "a"]),
        json!([[1], "a"]),
        json!([1.5]),
        json!([-1]),
        json!([[]]),
        json!([[1], [-2]]),
        json!([1, 320]),
        json!([[1], [4_294_967_296u64]]),
        json!("x".repeat(300)),
        json!(vec![7; 300]),
        json!(vec!["x"; 17]), // more inputs than the engine's queue (16) holds
    ] {
        bad(&s, p, json!({"input": input}), "input");
    }
    bad(&s, p, json!({}), "input");
    for f in [json!("hex"), json!(3), json!(["float"])] {
        bad(&s, p, json!({"input": "hi", "encoding_format": f}), "encoding_format");
    }
    for d in [json!(0), json!(-1), json!("8"), json!(1.5), json!(65), json!(u64::MAX)] {
        bad(&s, p, json!({"input": "hi", "dimensions": d}), "dimensions");
    }
    bad(&s, p, json!({"input": "hi", "model": 5}), "model");
    assert_refused(&s, p, json!({"input": "hi", "model": "nope"}).to_string().as_bytes(), 404, Some("model"));
    s.assert_pool_clean();
    // The server still answers.
    assert_eq!(s.post(p, &json!({"input": "hi"})).status, 200);
}

#[test]
fn rerank_bad_bodies_are_4xx() {
    let s = Server::start(options(tiny(), 64, 16, 4, 16));
    for p in ["/v1/rerank", "/rerank"] {
        for raw in [&b"not json"[..], b"", b"[]", b"{\"query\": "] {
            assert_refused(&s, p, raw, 400, None);
        }
        let docs = json!(["a", "b"]);
        for q in [json!(null), json!(5), json!(""), json!(["q"])] {
            bad(&s, p, json!({"query": q, "documents": docs}), "query");
        }
        bad(&s, p, json!({"documents": docs}), "query");
        for d in [json!(null), json!("a"), json!([]), json!([5]), json!(["a", ""]), json!([{"text": "a"}])] {
            bad(&s, p, json!({"query": "q", "documents": d}), "documents");
        }
        bad(&s, p, json!({"query": "q", "documents": ["a", "x".repeat(300)]}), "documents");
        bad(&s, p, json!({"query": "x".repeat(300), "documents": docs}), "query");
        bad(&s, p, json!({"query": "q", "documents": vec!["d"; 16]}), "documents"); // 17 with the query
        for n in [json!(0), json!(-1), json!("2"), json!(1.5)] {
            bad(&s, p, json!({"query": "q", "documents": docs, "top_n": n}), "top_n");
        }
        bad(&s, p, json!({"query": "q", "documents": docs, "return_documents": "yes"}), "return_documents");
        let other = json!({"query": "q", "documents": docs, "model": "nope"});
        assert_refused(&s, p, other.to_string().as_bytes(), 404, Some("model"));
    }
    s.assert_pool_clean();
    assert_eq!(s.post("/rerank", &json!({"query": "q", "documents": ["a"]})).status, 200);
}
