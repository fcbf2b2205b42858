//! `serve` on Gemma 3: the tiny random fixture (safetensors and GGUF; two windowed layers
//! with window 8, one global) answers completions whose prompts and answers run past the
//! window, the same bytes alone and beside concurrent requests; and its greedy text is
//! the runner's own greedy tokens, for either file.

mod common;

use common::*;
use serde_json::{json, Value};
use tl_core::{EngineConfig, ModelRunner};

const PROMPT: &str = "Pack my box with five dozen liquor jugs!";

fn body(seed: u64, temperature: f64) -> Value {
    json!({"prompt": PROMPT, "max_tokens": 16, "seed": seed, "temperature": temperature, "logprobs": 2})
}

fn answer(s: &Server, b: &Value) -> Value {
    let r = s.post("/v1/completions", b);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()["choices"].clone()
}

/// Greedy tokens of the prompt (byte ids), computed by the runner without the server.
fn greedy_direct(model: &std::path::Path, steps: usize) -> Vec<u32> {
    let mut r = ModelRunner::load(model, &EngineConfig::default()).expect("load");
    let mut seq = r.sequence();
    let mut logits = r.feed(&mut seq, &PROMPT.bytes().map(u32::from).collect::<Vec<_>>()).expect("prefill");
    let mut out = Vec::new();
    for _ in 0..steps {
        let mut best = 0;
        for (i, &x) in logits.iter().enumerate() {
            if x > logits[best] {
                best = i;
            }
        }
        out.push(best as u32);
        logits = r.feed(&mut seq, &[best as u32]).expect("decode");
    }
    out
}

#[test]
fn serve_runs_gemma3_past_the_window_deterministically() {
    let dir = crate_fixture("arch-gemma3", "tiny-gemma3");
    let gguf = dir.join("model.gguf");
    for model in [dir, gguf] {
        let s = Server::start(options(model.clone(), 512, 4, 16, 64));
        let sampled = answer(&s, &body(7, 0.8));
        let greedy = answer(&s, &body(1, 0.0));
        // Beside concurrent requests, the seeded answer is the same bytes.
        let threads: Vec<_> = (0..6)
            .map(|i| {
                let addr = s.addr;
                std::thread::spawn(move || {
                    let b = body(100 + i, 1.0);
                    let r = request(addr, "POST", "/v1/completions", b.to_string().as_bytes(), &[]);
                    assert_eq!(r.status, 200);
                })
            })
            .collect();
        assert_eq!(answer(&s, &body(7, 0.8)), sampled, "the answer changed beside concurrent requests");
        for t in threads {
            t.join().expect("client");
        }
        s.assert_pool_clean();
        drop(s);
        // The greedy answer's text is the runner's own greedy tokens (byte ids: this
        // fixture reads bytes), 40 prompt + 16 generated positions against a window of 8.
        let want: Vec<u8> = greedy_direct(&model, 16).into_iter().filter(|&t| t < 256).map(|t| t as u8).collect();
        let text = greedy[0]["text"].as_str().expect("text").to_string();
        assert_eq!(
            text,
            String::from_utf8_lossy(&want),
            "{}: serve's greedy text is not the runner's",
            model.display()
        );
    }
}
