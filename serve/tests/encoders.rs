//! An encoder served (docs/spec/encoders.md, docs/serving.md "Encoder models"): the tiny
//! random BERT of arch-bert's fixtures answers `/v1/embeddings` with sentence-transformers'
//! vectors (its reference.json, written by scripts/fixtures/make_tiny_bert.py from
//! sentence-transformers alone), `dimensions` cut and renormalised, a text the same bits
//! alone and among others; the tiny cross-encoder answers `/v1/rerank` and `/v1/score` with
//! `CrossEncoder.predict`'s scores; over-long text refused unless `truncate`; generation,
//! embeddings of a cross-encoder and bad ids refused in OpenAI's error shape; the tiny
//! BERT's GGUF (llama.cpp's converter) serves its directory's vectors.

mod common;

use common::*;
use serde_json::{json, Value};

/// The agreement arch-bert's tests hold the same vectors to (5e-6 seen on hidden states).
const TOL: f64 = 1e-5;

fn reference(name: &str) -> Value {
    let p = crate_fixture("arch-bert", name).join("reference.json");
    serde_json::from_str(&std::fs::read_to_string(p).expect("reference")).expect("json")
}

fn server(name: &str) -> Server {
    Server::start(options(crate_fixture("arch-bert", name), 8, 16, 8, 64))
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().expect("list").iter().map(|x| x.as_f64().expect("number")).collect()
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "lengths");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

fn embeddings(s: &Server, body: &Value) -> Vec<Vec<f64>> {
    let r = s.post("/v1/embeddings", body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    v["data"].as_array().expect("data").iter().map(|d| floats(&d["embedding"])).collect()
}

/// A 400 in OpenAI's error shape naming `param`, whose message contains `needle`.
fn refused(r: &Resp, param: &str, needle: &str) {
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    let e = &r.json()["error"];
    assert_eq!(e["type"], "invalid_request_error", "{e}");
    assert_eq!(e["param"], param, "{e}");
    assert!(e["message"].as_str().expect("message").contains(needle), "{e}");
}

#[test]
fn embeddings_equal_sentence_transformers() {
    let r = reference("tiny-bert");
    let cases: Vec<&Value> = r["cases"].as_array().expect("cases").iter().filter(|c| c["text"].is_string()).collect();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().expect("text")).collect();
    let s = server("tiny-bert");
    let got = embeddings(&s, &json!({"input": texts, "truncate": true}));
    assert_eq!(got.len(), texts.len());
    for (g, c) in got.iter().zip(&cases) {
        let d = max_diff(g, &floats(&c["vectors"]["mean"]));
        assert!(d <= TOL, "{:?}: {d} from sentence-transformers", c["text"]);
    }
    // Token ids as given (the ids transformers' tokenizer gives) are the same vector.
    let ids = &cases[1]["ids"];
    let by_ids = embeddings(&s, &json!({"input": [ids]}));
    assert_eq!(by_ids[0], got[1]);
    // Alone = among the others, bit for bit (f64 from JSON carries every f32 bit).
    for (i, t) in texts.iter().enumerate() {
        let alone = embeddings(&s, &json!({"input": t, "truncate": true}));
        assert_eq!(alone[0], got[i], "{t:?} alone");
    }
    // dimensions: the first k values, normalised again (the model normalises).
    let k = 12;
    let cut = embeddings(&s, &json!({"input": texts[2], "dimensions": k}));
    let mut want: Vec<f64> = floats(&cases[2]["vectors"]["mean"])[..k].to_vec();
    let norm = want.iter().map(|x| x * x).sum::<f64>().sqrt();
    want.iter_mut().for_each(|x| *x /= norm);
    assert!(max_diff(&cut[0], &want) <= TOL);
    // usage counts the tokens read.
    let v = s.post("/v1/embeddings", &json!({"input": texts[0]})).json();
    assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(cases[0]["ids"].as_array().expect("ids").len() as u64));
}

#[test]
fn over_long_text_is_refused_unless_truncated() {
    let r = reference("tiny-bert");
    let long = r["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| c["text"].as_str().unwrap_or(""))
        .max_by_key(|t| t.len())
        .expect("a text");
    let s = server("tiny-bert");
    let resp = s.post("/v1/embeddings", &json!({"input": ["a", long]}));
    refused(&resp, "input", "input[1] is longer than the model's 24 tokens");
    assert_eq!(embeddings(&s, &json!({"input": long, "truncate": true})).len(), 1);
    // Ids past the model's length, an id out of the vocabulary, an empty input.
    let many: Vec<u32> = vec![5; 41];
    refused(&s.post("/v1/embeddings", &json!({"input": [many]})), "input", "input 0");
    refused(&s.post("/v1/embeddings", &json!({"input": [[2, 99999, 3]]})), "input", "vocab_size");
    refused(&s.post("/v1/embeddings", &json!({"input": ""})), "input", "empty");
    s.assert_pool_clean();
}

#[test]
fn an_encoder_refuses_generation() {
    let s = server("tiny-bert");
    let chat = s.post("/v1/chat/completions", &json!({"messages": [{"role": "user", "content": "hi"}]}));
    refused(&chat, "model", "is an encoder");
    refused(&s.post("/v1/completions", &json!({"prompt": "hi"})), "model", "is an encoder");
    // Tokenizing still works.
    let t = s.post("/tokenize", &json!({"content": "the word"}));
    assert_eq!(t.status, 200, "{}", String::from_utf8_lossy(&t.body));
}

#[test]
fn a_cross_encoder_reranks_and_scores_as_sentence_transformers() {
    let r = reference("tiny-bert-ce");
    let cases = r["cases"].as_array().expect("cases");
    let s = server("tiny-bert-ce");
    // One query against its documents: each pair's score is CrossEncoder.predict's.
    let query = cases[0]["pair"][0].as_str().expect("query");
    let docs: Vec<&str> = cases.iter().map(|c| c["pair"][1].as_str().expect("doc")).collect();
    // /v1/score with lists of one length pairs them in order: every case's own pair.
    let q1: Vec<&str> = cases.iter().map(|c| c["pair"][0].as_str().expect("q")).collect();
    let resp = s.post("/v1/score", &json!({"text_1": q1, "text_2": docs, "truncate": true}));
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let v = resp.json();
    assert_eq!(v["object"], "list");
    for (i, (d, c)) in v["data"].as_array().expect("data").iter().zip(cases).enumerate() {
        assert_eq!(d["index"], i);
        assert_eq!(d["object"], "score");
        let want = c["scores"][0].as_f64().expect("score");
        assert!((d["score"].as_f64().expect("score") - want).abs() <= TOL, "pair {i}: {d} vs {want}");
    }
    // /v1/rerank: the first case's query against every document, best first; its own
    // document's score is the reference's.
    let resp = s.post("/v1/rerank", &json!({"query": query, "documents": docs, "truncate": true}));
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let results = resp.json()["results"].as_array().expect("results").clone();
    assert_eq!(results.len(), docs.len());
    let scores: Vec<f64> = results.iter().map(|x| x["relevance_score"].as_f64().expect("score")).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "best first: {scores:?}");
    let own = results.iter().find(|x| x["index"] == 0).expect("document 0");
    let want = cases[0]["scores"][0].as_f64().expect("score");
    assert!((own["relevance_score"].as_f64().expect("score") - want).abs() <= TOL);
    // A cross-encoder pools nothing: embeddings are refused, naming what to use.
    refused(&s.post("/v1/embeddings", &json!({"input": "water"})), "model", "/v1/rerank");
    // One text_1 against several text_2; mismatched lists refused.
    let one = s.post("/v1/score", &json!({"text_1": query, "text_2": [docs[0], docs[1]], "truncate": true}));
    assert_eq!(one.json()["data"].as_array().expect("data").len(), 2);
    refused(
        &s.post("/v1/score", &json!({"text_1": ["a", "b"], "text_2": ["c", "d", "e"]})),
        "text_2",
        "lists of one length",
    );
}

#[test]
fn a_pooling_encoder_ranks_by_cosine() {
    let r = reference("tiny-bert");
    let texts: Vec<&str> =
        r["cases"].as_array().expect("cases").iter().filter_map(|c| c["text"].as_str()).take(4).collect();
    let s = server("tiny-bert");
    let v = embeddings(&s, &json!({"input": texts}));
    let cos = |a: &[f64], b: &[f64]| {
        let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        dot / (a.iter().map(|x| x * x).sum::<f64>().sqrt() * b.iter().map(|x| x * x).sum::<f64>().sqrt())
    };
    let resp = s.post("/v1/score", &json!({"text_1": texts[0], "text_2": &texts[1..]}));
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    for (i, d) in resp.json()["data"].as_array().expect("data").iter().enumerate() {
        let want = cos(&v[0], &v[i + 1]);
        assert!((d["score"].as_f64().expect("score") - want).abs() <= 1e-6, "{d} vs {want}");
    }
}

#[test]
fn a_decoder_scores_by_the_cosine_of_its_embeddings() {
    let s = Server::start(options(tiny(), 64, 16, 8, 64));
    let texts = ["a cache keeps answers", "dogs bark", "a cache"];
    let v = embeddings(&s, &json!({"input": texts}));
    let cos = |a: &[f64], b: &[f64]| {
        let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        dot / (a.iter().map(|x| x * x).sum::<f64>().sqrt() * b.iter().map(|x| x * x).sum::<f64>().sqrt())
    };
    let resp = s.post("/v1/score", &json!({"text_1": texts[2], "text_2": &texts[..2]}));
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    for (i, d) in resp.json()["data"].as_array().expect("data").iter().enumerate() {
        let want = cos(&v[2], &v[i]);
        assert!((d["score"].as_f64().expect("score") - want).abs() <= 1e-6, "{d} vs {want}");
    }
    s.assert_pool_clean();
}

/// The tiny BERT as llama.cpp's converter writes it (arch-bert/tests/fixtures/gguf, F32)
/// served: `/v1/embeddings` gives its directory's vectors, the same bytes (mean pooling
/// and Normalize in both), and generation is refused as for any encoder.
#[test]
fn a_gguf_encoder_serves_its_directorys_vectors() {
    let texts = ["a short one", "Pack my box with five dozen liquor jugs", "ünïcödé text, 漢字"];
    let dir = server("tiny-bert");
    let gguf = Server::start(options(crate_fixture("arch-bert", "gguf/tiny-bert.F32.gguf"), 8, 16, 8, 64));
    let body = json!({"input": texts, "truncate": true});
    let data = |s: &Server| s.post("/v1/embeddings", &body).json()["data"].to_string();
    let (a, b) = (data(&dir), data(&gguf));
    assert!(a.contains("embedding"), "{a}");
    assert_eq!(a, b, "the GGUF's vectors differ from its directory's");
    let r = gguf.post("/v1/completions", &json!({"prompt": "hi", "max_tokens": 2}));
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    assert!(String::from_utf8_lossy(&r.body).contains("is an encoder"), "{}", String::from_utf8_lossy(&r.body));
}
