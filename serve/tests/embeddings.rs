//! `/v1/embeddings` and `/v1/rerank` end to end: pooled vectors against transformers'
//! (serve/tests/fixtures/embeddings/goldens.json, written by
//! scripts/fixtures/make_embedding_goldens.py from transformers alone) on the tiny random
//! Llama and Qwen3 models, last/mean/CLS pooling by flag and by the model's
//! sentence-transformers files, `dimensions`, base64, the rerank order and scores, a
//! reranking head refused, and the bit promise: a text's embedding alone equals it among
//! others and beside a running generation.

mod common;

use std::path::PathBuf;

use common::*;
use serde_json::{json, Value};
use tl_engine::Pooling;

/// transformers' pooled vectors agree with tl's within this: the max abs difference of
/// the unit vectors' components (~0.1 in size here), the project's 1e-3-relative rule for
/// logits. tl's default f16 KV cache moves them by ~1.2e-4 (measured), the f32 reference
/// not at all; a wrong pooling lands more than 10 tolerances away (checked below).
const TOL: f64 = 1e-3;

fn goldens() -> Value {
    let text = std::fs::read_to_string(fixture("embeddings/goldens.json")).expect("goldens");
    serde_json::from_str(&text).expect("goldens json")
}

fn model(name: &str) -> PathBuf {
    match name {
        "tiny-llama" => crate_fixture("arch-llama", "tiny-llama"),
        "tiny-qwen3" => crate_fixture("arch-qwen3", "tiny-qwen3"),
        other => fixture(other),
    }
}

fn server(path: PathBuf, pooling: Option<Pooling>) -> Server {
    let mut o = options(path, 64, 16, 8, 64);
    o.pooling = pooling;
    Server::start(o)
}

/// The vectors of an embeddings answer (floats), checked for OpenAI's shape.
fn vectors(s: &Server, body: &Value) -> Vec<Vec<f32>> {
    let r = s.post("/v1/embeddings", body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["object"], "list");
    let data = v["data"].as_array().expect("data");
    let mut out = Vec::new();
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["object"], "embedding");
        assert_eq!(d["index"], i);
        out.push(d["embedding"].as_array().expect("floats").iter().map(|x| x.as_f64().expect("f") as f32).collect());
    }
    let n = v["usage"]["prompt_tokens"].as_u64().expect("usage");
    assert_eq!(v["usage"]["total_tokens"].as_u64(), Some(n));
    out
}

fn max_diff(a: &[f32], b: &Value) -> f64 {
    let b = b.as_array().expect("golden");
    assert_eq!(a.len(), b.len(), "dimensions");
    a.iter().zip(b).map(|(&x, y)| (f64::from(x) - y.as_f64().expect("f")).abs()).fold(0.0, f64::max)
}

fn bits(v: &[Vec<f32>]) -> Vec<Vec<u32>> {
    v.iter().map(|r| r.iter().map(|x| x.to_bits()).collect()).collect()
}

#[test]
fn pooled_vectors_match_transformers() {
    let g = goldens();
    for name in ["tiny-llama", "tiny-qwen3"] {
        let inputs = g[name]["inputs"].as_array().expect("inputs");
        let texts: Vec<&str> = inputs.iter().map(|i| i["text"].as_str().expect("text")).collect();
        for (pooling, key) in [(Pooling::Last, "last"), (Pooling::Mean, "mean"), (Pooling::Cls, "cls")] {
            let s = server(model(name), Some(pooling));
            let got = vectors(&s, &json!({"input": texts}));
            assert_eq!(got.len(), texts.len());
            for (v, want) in got.iter().zip(inputs) {
                let d = max_diff(v, &want[key]);
                assert!(d <= TOL, "{name} {key} {:?}: max abs diff {d} > {TOL}", want["text"]);
                // The test can tell the poolings apart (a one-token input has one row).
                for other in ["last", "mean", "cls"].into_iter().filter(|&o| o != key) {
                    let far = max_diff(v, &want[other]);
                    assert!(
                        want["ids"].as_array().is_some_and(|i| i.len() == 1) || far > 10.0 * TOL,
                        "{key} vs {other}: {far}"
                    );
                }
            }
            // Token ids give the same bits as their text (the byte tokenizer's ids).
            let ids: Vec<Value> = inputs.iter().map(|i| i["ids"].clone()).collect();
            assert_eq!(bits(&vectors(&s, &json!({"input": ids}))), bits(&got), "{name} {key}: ids vs text");
            let one = vectors(&s, &json!({"input": inputs[2]["ids"]}));
            assert_eq!(bits(&one)[0], bits(&got)[2], "{name} {key}: one token list");
            if pooling == Pooling::Last {
                let cut = vectors(&s, &json!({"input": texts, "dimensions": 16}));
                for (v, want) in cut.iter().zip(inputs) {
                    let d = max_diff(v, &want["last_dim16"]);
                    assert!(d <= TOL, "{name} dimensions 16: max abs diff {d}");
                }
            }
            s.assert_pool_clean();
        }
    }
}

#[test]
fn pooling_declared_by_the_model_files() {
    // tiny-qwen3-embed: tiny-qwen3 with modules.json + 1_Pooling/config.json saying mean.
    let g = goldens();
    let inputs = g["tiny-qwen3"]["inputs"].as_array().expect("inputs");
    let texts: Vec<&str> = inputs.iter().map(|i| i["text"].as_str().expect("text")).collect();
    let s = server(model("tiny-qwen3-embed"), None);
    for (v, want) in vectors(&s, &json!({"input": texts})).iter().zip(inputs) {
        assert!(max_diff(v, &want["mean"]) <= TOL, "declared mean pooling");
        assert!(want["text"] == "a" || max_diff(v, &want["last"]) > 10.0 * TOL, "not last pooling");
    }
    drop(s);
    // The flag overrides the files.
    let s = server(model("tiny-qwen3-embed"), Some(Pooling::Cls));
    for (v, want) in vectors(&s, &json!({"input": texts})).iter().zip(inputs) {
        assert!(max_diff(v, &want["cls"]) <= TOL, "--pooling cls over the files' mean");
    }
    // Without files: last-token.
    let s = server(model("tiny-qwen3"), None);
    for (v, want) in vectors(&s, &json!({"input": texts})).iter().zip(inputs) {
        assert!(max_diff(v, &want["last"]) <= TOL, "default last pooling");
    }
}

#[test]
fn base64_is_the_float_vectors_little_endian_bytes() {
    let s = server(model("tiny-llama"), None);
    let floats = vectors(&s, &json!({"input": ["one", "two"]}));
    let r = s.post("/v1/embeddings", &json!({"input": ["one", "two"], "encoding_format": "base64"}));
    assert_eq!(r.status, 200);
    let v = r.json();
    for (d, want) in v["data"].as_array().expect("data").iter().zip(&floats) {
        let b = decode_base64(d["embedding"].as_str().expect("base64 string"));
        let got: Vec<f32> = b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        assert_eq!(bits(&[got]), bits(std::slice::from_ref(want)));
    }
}

fn decode_base64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let mut out = Vec::new();
    for q in s.as_bytes().chunks(4) {
        let n = q.iter().filter(|&&c| c != b'=').count();
        let mut acc = 0u32;
        for (k, &c) in q.iter().enumerate() {
            acc |= u32::from(if c == b'=' { 0 } else { val(c) }) << (18 - 6 * k);
        }
        out.extend(&acc.to_be_bytes()[1..n]);
    }
    out
}

#[test]
fn alone_equals_batched_and_beside_generation() {
    let s = server(model("tiny-qwen3"), Some(Pooling::Mean));
    let text = "The same text, embedded alone and in company, has the same bits.".repeat(2);
    let alone = vectors(&s, &json!({"input": text}));
    assert_eq!(bits(&vectors(&s, &json!({"input": text}))), bits(&alone), "twice");
    let addr = s.addr;
    // A long generation runs while the embedding requests arrive.
    let gen = std::thread::spawn(move || {
        let body = json!({"prompt": "once upon a time", "max_tokens": 120, "temperature": 0.8, "seed": 7});
        request(addr, "POST", "/v1/completions", body.to_string().as_bytes(), &[])
    });
    std::thread::sleep(std::time::Duration::from_millis(30));
    let crowd = vectors(&s, &json!({"input": ["short", text, "x".repeat(100), "another input of other length"]}));
    assert_eq!(bits(&crowd[1..2]), bits(&alone), "among others");
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let body = json!({"input": if i == 2 { json!(text) } else { json!("n".repeat(10 + 13 * i)) }});
            std::thread::spawn(move || request(addr, "POST", "/v1/embeddings", body.to_string().as_bytes(), &[]))
        })
        .collect();
    let answers: Vec<Resp> = threads.into_iter().map(|t| t.join().expect("thread")).collect();
    let v = answers[2].json();
    let got: Vec<f32> =
        v["data"][0]["embedding"].as_array().expect("e").iter().map(|x| x.as_f64().expect("f") as f32).collect();
    assert_eq!(bits(&[got]), bits(&alone), "concurrent requests");
    let g = gen.join().expect("gen");
    assert_eq!(g.status, 200, "{}", String::from_utf8_lossy(&g.body));
    s.assert_pool_clean();
}

#[test]
fn rerank_orders_by_cosine_similarity() {
    let s = server(model("tiny-qwen3"), None);
    let docs = ["hello there", "hello world", "something else entirely", "world"];
    let mut all = vec!["hello world"];
    all.extend(docs);
    let e = vectors(&s, &json!({"input": all}));
    let cos = |a: &[f32], b: &[f32]| {
        let dot: f64 = a.iter().zip(b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum();
        let n = |v: &[f32]| v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
        dot / (n(a) * n(b))
    };
    for path in ["/v1/rerank", "/rerank"] {
        let r = s.post(path, &json!({"query": "hello world", "documents": docs, "top_n": 3, "return_documents": true}));
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        let results = v["results"].as_array().expect("results");
        assert_eq!(results.len(), 3, "top_n");
        let mut prev = f64::INFINITY;
        for x in results {
            let i = x["index"].as_u64().expect("index") as usize;
            let score = x["relevance_score"].as_f64().expect("score");
            assert!((score - cos(&e[0], &e[i + 1])).abs() < 1e-9, "score of {i}");
            assert!(score <= prev, "descending");
            prev = score;
            assert_eq!(x["document"]["text"], docs[i]);
        }
        // The identical document is the best match.
        assert_eq!(results[0]["index"], 1);
        let n = v["usage"]["prompt_tokens"].as_u64().expect("usage");
        assert_eq!(n as usize, all.iter().map(|d| d.len()).sum::<usize>());
        let plain = s.post(path, &json!({"query": "hello world", "documents": docs})).json();
        assert_eq!(plain["results"].as_array().expect("r").len(), docs.len());
        assert!(plain["results"][0].get("document").is_none(), "no documents unless asked");
    }
}

#[test]
fn reranking_head_is_refused() {
    let s = server(model("tiny-qwen3-reranker"), None);
    let r = s.post("/v1/rerank", &json!({"query": "q", "documents": ["a", "b"]}));
    assert_eq!(r.status, 501, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    let msg = v["error"]["message"].as_str().expect("message");
    assert!(msg.contains("reranking heads are not implemented"), "{msg}");
    assert!(msg.contains("ForSequenceClassification"), "{msg}");
    assert_eq!(v["error"]["code"], "not_implemented");
    assert!(v["error"]["type"].is_string());
    // Embedding plain models still rank (the head refusal is the model's, not the route's).
    let e = server(model("tiny-qwen3"), None);
    assert_eq!(e.post("/rerank", &json!({"query": "q", "documents": ["a"]})).status, 200);
}

/// The binary's `--pooling` flag: `cls` gives transformers' CLS vectors; a bad value is
/// refused at start with the accepted names.
#[test]
fn the_binary_pools_as_the_flag_says() {
    let g = goldens();
    let want = &g["tiny-llama"]["inputs"][2];
    let p = Proc::spawn(&["--pooling", "cls"], &[]);
    let r = p.post("/v1/embeddings", &json!({"input": want["text"]}), &[]);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v: Vec<f32> =
        r.json()["data"][0]["embedding"].as_array().expect("e").iter().map(|x| x.as_f64().expect("f") as f32).collect();
    assert!(max_diff(&v, &want["cls"]) <= TOL);
    assert!(max_diff(&v, &want["last"]) > 10.0 * TOL, "not the default (last)");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_serve"))
        .args(["--model", &tiny().to_string_lossy(), "--port", "0", "--pooling", "max"])
        .output()
        .expect("run serve");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("last, mean or cls"), "{err}");
}
