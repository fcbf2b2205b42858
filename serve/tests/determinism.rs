//! The promise end to end over HTTP: a seeded request's full answer (tokens and logprobs,
//! byte for byte) is the same alone, beside 15 concurrent requests of other lengths and
//! parameters sharing its system prompt, after a prefix-cache hit, and after preemption
//! under a deliberately small KV pool; and a text's embedding, alone and beside 15 chats.
//! On the tiny fixture and on SmolLM2.

mod common;

use std::path::PathBuf;
use std::sync::{Arc, Barrier};

use common::*;
use serde_json::{json, Value};

const SYSTEM: &str = "You are a careful assistant. Answer in one short sentence.";

fn target(model: &str, max_tokens: u32) -> Value {
    json!({"model": model, "seed": 42, "temperature": 0.9, "top_p": 0.95, "logprobs": true, "top_logprobs": 3,
           "max_tokens": max_tokens,
           "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is a cache?"}]})
}

fn neighbour(model: &str, i: usize, max_tokens: u32) -> Value {
    let words = ["Why is the sky blue?", "Hi", "Count to five, please.", "Name a fruit."];
    let temperature = [0.0, 0.7, 1.0, 1.3][i % 4];
    let mut b = json!({"model": model, "seed": 100 + i, "temperature": temperature,
        "max_tokens": max_tokens / 2 + (i as u32 % 5),
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": words[i % 4].repeat(1 + i % 3)}]});
    if i % 3 == 1 {
        b["stream"] = json!(true);
    }
    if i % 4 == 2 {
        b["n"] = json!(2);
        b["frequency_penalty"] = json!(0.5);
    }
    if i % 5 == 3 {
        b["top_k"] = json!(20);
        b["stop"] = json!(["\n\n"]);
    }
    b
}

/// The answer's bytes that the promise covers: the choices (text, logprobs, finish).
fn answer(s: &Server, body: &Value) -> (String, Value) {
    let r = s.post("/v1/chat/completions", body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    (v["choices"].to_string(), v["usage"].clone())
}

/// The target sent in the middle of 15 concurrent neighbours.
fn crowded(s: &Server, model: &str, max_tokens: u32) -> String {
    let start = Arc::new(Barrier::new(16));
    let addr = s.addr;
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let start = Arc::clone(&start);
            let body = if i == 8 { target(model, max_tokens) } else { neighbour(model, i, max_tokens) };
            std::thread::spawn(move || {
                start.wait();
                if i > 8 {
                    std::thread::sleep(std::time::Duration::from_millis(2 * (i as u64 - 8)));
                }
                let r = request(addr, "POST", "/v1/chat/completions", body.to_string().as_bytes(), &[]);
                assert_eq!(r.status, 200, "request {i}: {}", String::from_utf8_lossy(&r.body));
                r
            })
        })
        .collect();
    let mut out = String::new();
    for (i, t) in threads.into_iter().enumerate() {
        let r = t.join().expect("client thread");
        if i == 8 {
            out = r.json()["choices"].to_string();
        }
    }
    out
}

fn promise(model: PathBuf, name: &str, max_tokens: u32, small_pool: u32) {
    promise_kv(model, name, (max_tokens, small_pool), "f16-slab");
}

/// [`promise`] over the KV backend named `kv`.
fn promise_kv(model: PathBuf, name: &str, (max_tokens, small_pool): (u32, u32), kv: &str) {
    let options = |model: PathBuf, n_blocks: u32, b: u32, seqs: usize, queue: usize| {
        let mut o = options(model, n_blocks, b, seqs, queue);
        o.engine.kv.backend = kv.into();
        o
    };
    let alone = {
        let s = Server::start(options(model.clone(), 2048, 4, 16, 64));
        let (a, usage) = answer(&s, &target(name, max_tokens));
        assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0);
        a
    };
    assert!(alone.contains("\"logprob\""), "{alone}");

    let s = Server::start(options(model.clone(), 2048, 4, 16, 64));
    assert_eq!(crowded(&s, name, max_tokens), alone, "the answer changed beside 15 concurrent requests");
    let (hit, usage) = answer(&s, &target(name, max_tokens));
    assert!(usage["prompt_tokens_details"]["cached_tokens"].as_u64() > Some(0), "no prefix hit: {usage}");
    assert_eq!(hit, alone, "the answer changed after a prefix-cache hit");
    s.assert_pool_clean();
    drop(s);

    let s = Server::start(options(model, small_pool, 4, 16, 64));
    assert_eq!(crowded(&s, name, max_tokens), alone, "the answer changed under a small pool");
    assert!(s.metric("tl_preemptions_total") > 0.0, "the small pool never preempted");
    s.assert_pool_clean();
}

#[test]
fn tiny_http_answers_do_not_depend_on_traffic() {
    // Prompts are ~90 byte tokens plus up to 40 generated: ~33 blocks of 4 each at most.
    promise(tiny(), "tiny-llama", 40, 90);
}

/// The same over a q8 cache (`--kv q8-slab`): prefix hits and preemption keep every byte.
#[test]
fn tiny_http_answers_do_not_depend_on_traffic_with_a_q8_cache() {
    promise_kv(tiny(), "tiny-llama", (40, 90), "q8-slab");
}

/// The binary's `--kv q8-slab` flag builds a q8 pool that serves.
#[test]
fn the_binary_serves_from_a_q8_cache() {
    let p = Proc::spawn(&["--kv", "q8-slab", "--kv-memory", "1"], &[]);
    let r = p.post("/v1/completions", &json!({"prompt": "hi", "max_tokens": 4, "temperature": 0}), &[]);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    p.assert_pool_clean();
}

#[test]
fn smollm2_http_answers_do_not_depend_on_traffic() {
    let Some(model) = smollm2() else { return };
    // 20 blocks of 4 (80 positions): one request (prompt and 8 tokens) fits, as it did in
    // 16, and the crowd has to preempt with far less overlap than at 40, where a loaded
    // 2-core CI machine once let the 16 requests pass without preempting.
    promise(model, "SmolLM2-135M-Instruct.Q4_1", 8, 20);
}

#[test]
fn qwen3_http_answers_do_not_depend_on_traffic() {
    let model = crate_fixture("arch-qwen3", "tiny-qwen3");
    promise(model, "tiny-qwen3", 40, 90);
}

#[test]
fn mistral_http_answers_do_not_depend_on_traffic() {
    // Window 16 on every layer, prompts of ~90 tokens: prefix hits and preemption resume
    // past the window. A sequence past its prefill holds only its window's pages (issue 33
    // part 2), so 90 blocks let the 16 requests fit in most runs and preemption was a
    // matter of timing; 40 makes them preempt each other every run.
    let model = crate_fixture("arch-mistral", "tiny-mistral");
    promise(model, "tiny-mistral", 40, 40);
}

#[test]
fn qwen3_moe_http_answers_do_not_depend_on_traffic() {
    // A mixture of experts: each step's tokens are grouped per expert, so the 15 concurrent
    // requests share the target's experts' products; its answer must not move (vLLM's and
    // SGLang's deterministic modes do not keep this for MoE models).
    let model = crate_fixture("arch-qwen3-moe", "tiny-qwen3-moe");
    promise(model, "tiny-qwen3-moe", 40, 90);
}

/// The embedding promise over HTTP on a real model: a text's vector (mean-pooled, so
/// every position's row counts) has the same f32 bits alone, twice, and in the middle of
/// 15 concurrent chat requests, under a pool small enough to preempt.
fn embedding_promise(model: PathBuf, name: &str, small_pool: u32) {
    let text = format!("{SYSTEM} What is a cache? A cache keeps answers close.");
    let vector = |s: &Server| -> Vec<u32> {
        let r = s.post("/v1/embeddings", &json!({"model": name, "input": text, "encoding_format": "base64"}));
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        r.json()["data"][0]["embedding"].as_str().expect("base64").bytes().map(u32::from).collect()
    };
    let mean = |m: PathBuf, n_blocks| {
        let mut o = options(m, n_blocks, 4, 16, 64);
        o.pooling = Some(tl_engine::Pooling::Mean);
        Server::start(o)
    };
    let alone = vector(&mean(model.clone(), 2048));
    for n_blocks in [2048, small_pool] {
        let s = mean(model.clone(), n_blocks);
        assert_eq!(vector(&s), alone, "twice");
        let addr = s.addr;
        let chats: Vec<_> = (0..15)
            .map(|i| {
                let body = neighbour(name, i, 24);
                std::thread::spawn(move || {
                    request(addr, "POST", "/v1/chat/completions", body.to_string().as_bytes(), &[])
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let crowded = vector(&s);
        for c in chats {
            assert_eq!(c.join().expect("chat").status, 200);
        }
        assert_eq!(crowded, alone, "the embedding changed beside 15 chats ({n_blocks} blocks)");
        if n_blocks == small_pool {
            assert!(s.metric("tl_preemptions_total") > 0.0, "the small pool never preempted");
        }
        s.assert_pool_clean();
    }
}

#[test]
fn tiny_embeddings_do_not_depend_on_traffic() {
    embedding_promise(tiny(), "tiny-llama", 90);
}

#[test]
fn smollm2_embeddings_do_not_depend_on_traffic() {
    let Some(model) = smollm2() else { return };
    embedding_promise(model, "SmolLM2-135M-Instruct.Q4_1", 40);
}
