//! LoRA adapters over HTTP (docs/serving.md, "Adapters"): `--lora NAME=PATH`, a request's
//! `model` naming an adapter or llama.cpp's `lora: [{id, scale}]`, `/v1/models` listing
//! them, runtime load and unload behind the API key, least-recently-used unloading past
//! `--max-loras` under concurrent load, and the prefix cache keyed by adapter: the same
//! prompt under two adapters never shares a block, and every answer is the bits it has
//! alone.

mod common;

use std::path::PathBuf;
use std::sync::{Arc, Barrier};

use common::*;
use serde_json::{json, Value};
use tl_serve::LoraSpec;

fn adapter(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../families/tests/fixtures/lora").join(name)
}

fn server(max_loras: usize, api_key: Option<&str>) -> Server {
    let mut o = options(tiny(), 256, 4, 8, 64);
    o.loras = vec![
        LoraSpec { name: "all".into(), path: adapter("llama-all"), scale: 1.0 },
        LoraSpec { name: "rs".into(), path: adapter("llama-rs"), scale: 1.0 },
    ];
    o.max_loras = max_loras;
    o.api_key = api_key.map(str::to_string);
    Server::start(o)
}

const PROMPT: &str = "The quick brown fox jumps over the lazy dog, twice over";

fn body(model: &str, seed: u64) -> Value {
    json!({"model": model, "prompt": PROMPT, "seed": seed, "temperature": 0.8, "max_tokens": 12, "logprobs": 2})
}

/// The choices (tokens and logprobs) and the cached prompt tokens of a completion.
fn answer(addr: std::net::SocketAddr, b: &Value, key: Option<&str>) -> (String, u64) {
    let auth = key.map(|k| format!("Bearer {k}"));
    let extra: Vec<(&str, &str)> = auth.as_deref().map(|a| vec![("Authorization", a)]).unwrap_or_default();
    let r = request(addr, "POST", "/v1/completions", b.to_string().as_bytes(), &extra);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0);
    (v["choices"].to_string(), cached)
}

#[test]
fn adapters_by_model_and_by_lora_field_with_keyed_prefixes() {
    let s = server(0, None);
    let ids: Vec<String> =
        s.get("/v1/models").json()["data"].as_array().expect("data").iter().map(|m| m["id"].to_string()).collect();
    assert_eq!(ids, ["\"tiny-llama\"", "\"all\"", "\"rs\""], "/v1/models");

    let (all, cached) = answer(s.addr, &body("all", 5), None);
    assert_eq!(cached, 0, "a cold cache");
    // The same prompt under the other adapter and the base: nothing cached is shared.
    let (rs, cached) = answer(s.addr, &body("rs", 5), None);
    assert_eq!(cached, 0, "adapter rs was served adapter all's blocks");
    let (base, cached) = answer(s.addr, &body("tiny-llama", 5), None);
    assert_eq!(cached, 0, "the base was served an adapter's blocks");
    assert!(all != rs && all != base && rs != base, "the adapters changed nothing");
    // The same adapter again: a hit, the same bytes; and llama.cpp's field names it too.
    let (again, cached) = answer(s.addr, &body("all", 5), None);
    assert!(cached > 0, "no prefix hit under the same adapter");
    assert_eq!(again, all, "a prefix hit changed the answer");
    let by_id = json!({"prompt": PROMPT, "seed": 5, "temperature": 0.8, "max_tokens": 12, "logprobs": 2,
                       "lora": [{"id": 0, "scale": 1.0}, {"id": 1, "scale": 0.0}]});
    assert_eq!(answer(s.addr, &by_id, None).0, all, "lora: [{{id: 0}}] is adapter all");
    // A scale is a different adapter: its own numbers.
    let half = json!({"prompt": PROMPT, "seed": 5, "temperature": 0.8, "max_tokens": 12, "logprobs": 2,
                      "lora": [{"id": 0, "scale": 0.5}]});
    assert_ne!(answer(s.addr, &half, None).0, all, "scale 0.5 = scale 1");

    for (bad, field) in [
        (json!([{"id": 7, "scale": 1.0}]), "no adapter with id 7"),
        (json!([{"id": 0, "scale": 1.0}, {"id": 1, "scale": 1.0}]), "one adapter per request"),
        (json!("all"), "must be a list"),
    ] {
        let r = s.post("/v1/completions", &json!({"prompt": "x", "max_tokens": 2, "lora": bad}));
        assert_eq!(r.status, 400, "{bad}");
        let e = r.json();
        assert_eq!(e["error"]["param"], "lora", "{e}");
        assert!(e["error"]["message"].as_str().is_some_and(|m| m.contains(field)), "{e}");
    }
    assert!(s.metric("tl_lora_requests_total{adapter=\"all\"}") >= 3.0, "per-adapter metric");
}

#[test]
fn load_and_unload_at_run_time_and_lru_under_load() {
    let key = "sekret";
    let s = server(1, Some(key));
    let auth = format!("Bearer {key}");
    let call = |path: &str, b: Value, with_key: bool| {
        let extra: Vec<(&str, &str)> = if with_key { vec![("Authorization", auth.as_str())] } else { vec![] };
        request(s.addr, "POST", path, b.to_string().as_bytes(), &extra)
    };
    let want_rs = answer(s.addr, &body("rs", 9), Some(key)).0;
    let want_all = answer(s.addr, &body("all", 9), Some(key)).0;

    let load = json!({"lora_name": "rs2", "lora_path": adapter("llama-rs")});
    assert_eq!(call("/v1/load_lora_adapter", load.clone(), false).status, 401, "loading needs the key");
    assert_eq!(call("/v1/load_lora_adapter", load.clone(), true).status, 200);
    assert_eq!(call("/v1/load_lora_adapter", load, true).status, 400, "a taken name");
    let bad = json!({"lora_name": "bad", "lora_path": adapter("qwen2-all")});
    let r = call("/v1/load_lora_adapter", bad, true);
    assert_eq!(r.status, 400, "another base's adapter");
    assert!(String::from_utf8_lossy(&r.body).contains("Qwen2ForCausalLM"), "{}", String::from_utf8_lossy(&r.body));
    // Loaded at run time, the same file gives the same bytes.
    assert_eq!(answer(s.addr, &body("rs2", 9), Some(key)).0, want_rs, "rs2 = rs");

    // One adapter loaded at a time: 12 concurrent requests over three adapters and the
    // base keep unloading and reloading them; every answer is its alone answer.
    let start = Arc::new(Barrier::new(12));
    let addr = s.addr;
    let threads: Vec<_> = (0..12)
        .map(|i| {
            let start = Arc::clone(&start);
            let model = ["all", "rs", "rs2", "tiny-llama"][i % 4];
            std::thread::spawn(move || {
                start.wait();
                (model, answer(addr, &body(model, 9), Some("sekret")).0)
            })
        })
        .collect();
    for t in threads {
        let (model, got) = t.join().expect("thread");
        match model {
            "all" => assert_eq!(got, want_all, "all under load"),
            "rs" | "rs2" => assert_eq!(got, want_rs, "{model} under load"),
            _ => {}
        }
    }
    let models = s.get("/v1/models");
    assert_eq!(models.status, 401, "/v1/models is behind the key too");
    let r = request(s.addr, "GET", "/v1/models", b"", &[("Authorization", auth.as_str())]).json();
    let loaded = r["data"].as_array().expect("data").iter().filter(|m| m["lora"]["loaded"] == true).count();
    assert_eq!(loaded, 1, "--max-loras 1 keeps one loaded: {r}");

    assert_eq!(call("/v1/unload_lora_adapter", json!({"lora_name": "rs2"}), true).status, 200);
    assert_eq!(call("/v1/unload_lora_adapter", json!({"lora_name": "rs2"}), true).status, 404);
    let r = call("/v1/completions", body("rs2", 9), true);
    assert_eq!(r.status, 404, "an unloaded adapter is an unknown model");
}
