//! Several models behind one endpoint (multi.rs): each model answers as it does alone
//! (same text and logprobs, seeded sampling) while three models share the server under
//! concurrent load with `--models-max 2` and unloads in the middle (no request lost, no
//! answer changed); keep-alive unloads an idle model and the next request loads it again;
//! `/models/load|unload` need the API key; an unknown model is OpenAI's 404 and a
//! missing one a 400; /metrics labels each model's series.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::{crate_fixture, options, request, tiny, Resp, Server};
use serde_json::{json, Value};
use tl_serve::multi::{Multi, MultiOptions};

struct Front {
    addr: SocketAddr,
    multi: Arc<Multi>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Front {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn models() -> Vec<std::path::PathBuf> {
    vec![tiny(), crate_fixture("arch-qwen3", "tiny-qwen3"), crate_fixture("arch-qwen2", "tiny-qwen2")]
}

fn front(keep_alive: Option<Duration>, models_max: usize, api_key: Option<&str>) -> Front {
    front_with(keep_alive, models_max, None, api_key)
}

fn front_with(
    keep_alive: Option<Duration>,
    models_max: usize,
    models_memory: Option<u64>,
    api_key: Option<&str>,
) -> Front {
    let mut opts: Vec<_> = models().into_iter().map(|m| options(m, 64, 16, 4, 64)).collect();
    for o in &mut opts {
        o.api_key = api_key.map(str::to_string);
    }
    let mo = MultiOptions {
        keep_alive,
        models_max,
        models_memory,
        api_key: api_key.map(str::to_string),
        max_body: 64 << 10,
        limits: tl_serve::Limits::default(),
        grace: Duration::from_secs(5),
    };
    let multi = Multi::new(opts, mo).expect("front");
    let m = Arc::clone(&multi);
    let (atx, arx) = std::sync::mpsc::channel();
    let (stx, srx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            atx.send(listener.local_addr().expect("addr")).expect("send");
            tl_serve::multi::run(listener, m, async move {
                let _ = srx.await;
            })
            .await
            .expect("serve");
        });
    });
    let addr = arx.recv_timeout(Duration::from_secs(30)).expect("front did not start");
    Front { addr, multi, stop: Some(stx), thread: Some(thread) }
}

fn ask(model: &str, prompt: usize) -> Value {
    json!({"model": model, "prompt": format!("Once upon a time {prompt}"), "max_tokens": 12, "seed": prompt,
           "temperature": 1.0, "logprobs": 2})
}

/// The part of an answer that must not change: text, token logprobs, token counts (not
/// how many prompt tokens a prefix hit saved: that depends on what ran before).
fn answer(r: &Resp) -> Value {
    let v = r.json();
    let u = &v["usage"];
    json!([v["choices"][0]["text"], v["choices"][0]["logprobs"], u["prompt_tokens"], u["completion_tokens"]])
}

fn post(addr: SocketAddr, path: &str, body: &Value, key: Option<&str>) -> Resp {
    let auth = key.map(|k| format!("Bearer {k}"));
    let extra: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
    request(addr, "POST", path, body.to_string().as_bytes(), &extra)
}

const IDS: [&str; 3] = ["tiny-llama", "tiny-qwen3", "tiny-qwen2"];

#[test]
fn three_models_answer_as_alone_under_concurrent_load_with_lru_unloading_and_unloads() {
    // Each model alone, on its own server.
    let mut alone = Vec::new();
    for (i, m) in models().into_iter().enumerate() {
        let s = Server::start(options(m, 64, 16, 4, 64));
        alone.push((0..4).map(|p| answer(&s.post("/v1/completions", &ask(IDS[i], p)))).collect::<Vec<_>>());
    }
    let f = front(None, 2, None);
    let listed = request(f.addr, "GET", "/v1/models", b"", &[]).json();
    let states: Vec<_> =
        listed["data"].as_array().unwrap().iter().map(|m| (m["id"].clone(), m["status"]["value"].clone())).collect();
    assert_eq!(states.len(), 3);
    assert!(states.iter().all(|(_, s)| s == "unloaded"), "{listed}");
    let alone = Arc::new(alone);
    let (addr, multi) = (f.addr, Arc::clone(&f.multi));
    let mut clients = Vec::new();
    for c in 0..12 {
        let alone = Arc::clone(&alone);
        clients.push(std::thread::spawn(move || {
            let (m, p) = (c % 3, c / 3);
            for _ in 0..200 {
                let r = post(addr, "/v1/completions", &ask(IDS[m], p), None);
                // Both loaded models busy: the front says so with Retry-After; a client retries.
                if r.status == 503 {
                    assert_eq!(r.json()["error"]["code"], "models_busy", "{}", String::from_utf8_lossy(&r.body));
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
                assert_eq!(answer(&r), alone[m][p], "{} prompt {p} changed beside other models", IDS[m]);
                return;
            }
            panic!("{} prompt {p}: never answered", IDS[m]);
        }));
    }
    // Unload in the middle of the traffic: refused (409) while a model has requests in flight.
    let unloader = std::thread::spawn(move || {
        let mut codes = Vec::new();
        for i in 0..20 {
            codes.push(post(addr, "/models/unload", &json!({"model": IDS[i % 3]}), None).status);
            assert!(multi.loaded().len() <= 2, "{:?}", multi.loaded());
            std::thread::sleep(Duration::from_millis(15));
        }
        codes
    });
    for c in clients {
        c.join().expect("a client failed");
    }
    let codes = unloader.join().expect("unloader");
    assert!(codes.iter().all(|c| *c == 200 || *c == 409), "{codes:?}");
    assert!(f.multi.loaded().len() <= 2);
    // Every model still answers as alone afterwards.
    for (m, id) in IDS.iter().enumerate() {
        assert_eq!(answer(&post(f.addr, "/v1/completions", &ask(id, 3), None)), alone[m][3], "{id}");
    }
}

#[test]
fn keep_alive_unloads_an_idle_model_and_the_next_request_loads_it_again() {
    let f = front(Some(Duration::from_millis(700)), 0, None);
    let first = answer(&post(f.addr, "/v1/completions", &ask("tiny-qwen3", 1), None));
    assert_eq!(f.multi.loaded(), ["tiny-qwen3"]);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(f.multi.loaded().is_empty(), "{:?}", f.multi.loaded());
    let again = answer(&post(f.addr, "/v1/completions", &ask("tiny-qwen3", 1), None));
    assert_eq!(again, first);
    let listed = request(f.addr, "GET", "/v1/models", b"", &[]).json();
    let q3 = listed["data"].as_array().unwrap().iter().find(|m| m["id"] == "tiny-qwen3").unwrap().clone();
    assert_eq!((q3["status"]["value"].as_str(), q3["status"]["loads"].as_u64()), (Some("loaded"), Some(2)), "{q3}");
}

#[test]
fn the_front_refuses_unknown_and_unnamed_models_and_guards_load_with_the_key() {
    let f = front(None, 0, Some("sekrit"));
    let r = post(f.addr, "/models/load", &json!({"model": "tiny-llama"}), None);
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["code"], "invalid_api_key");
    let r = post(f.addr, "/models/load", &json!({"model": "tiny-llama"}), Some("sekrit"));
    assert_eq!((r.status, r.json()["success"].as_bool()), (200, Some(true)));
    assert_eq!(f.multi.loaded(), ["tiny-llama"]);
    let r = post(f.addr, "/v1/completions", &json!({"model": "gpt-4", "prompt": "x"}), Some("sekrit"));
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (404, Some("model_not_found")));
    assert_eq!(r.json()["error"]["param"], "model");
    let r = post(f.addr, "/v1/completions", &json!({"prompt": "x"}), Some("sekrit"));
    assert_eq!((r.status, r.json()["error"]["param"].as_str()), (400, Some("model")));
    // The model's own routes keep their key check.
    let r = post(f.addr, "/v1/completions", &ask("tiny-llama", 0), None);
    assert_eq!(r.status, 401);
    let r = post(f.addr, "/models/unload", &json!({"model": "tiny-llama"}), Some("sekrit"));
    assert_eq!(r.status, 200);
    assert!(f.multi.loaded().is_empty());
}

#[test]
fn metrics_carry_a_model_label_and_each_family_once() {
    let f = front(None, 0, None);
    for id in ["tiny-llama", "tiny-qwen3"] {
        assert_eq!(post(f.addr, "/v1/completions", &ask(id, 0), None).status, 200);
    }
    let text = String::from_utf8(request(f.addr, "GET", "/metrics", b"", &[]).body).unwrap();
    for id in ["tiny-llama", "tiny-qwen3"] {
        assert!(text.lines().any(|l| !l.starts_with('#') && l.contains(&format!("model=\"{id}\""))), "{id}: {text}");
    }
    let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
    let unique: std::collections::BTreeSet<_> = types.iter().collect();
    assert_eq!(types.len(), unique.len(), "a family printed twice:\n{text}");
    assert!(!text.lines().any(|l| !l.starts_with('#') && !l.contains("model=\"")), "an unlabelled sample:\n{text}");
}

#[test]
fn a_memory_budget_unloads_the_least_recently_used_model_to_fit_the_next() {
    // Learn each model's bytes (weights + KV pool) from a first load.
    let f = front(None, 0, None);
    let mut bytes = Vec::new();
    for id in IDS {
        assert_eq!(post(f.addr, "/models/load", &json!({"model": id}), None).status, 200);
        let listed = request(f.addr, "GET", "/v1/models", b"", &[]).json();
        let m = listed["data"].as_array().unwrap().iter().find(|m| m["id"] == id).unwrap().clone();
        bytes.push(m["status"]["bytes"].as_u64().unwrap());
    }
    drop(f);
    // A budget that holds the two largest together but not all three.
    let mut sorted = bytes.clone();
    sorted.sort();
    let budget = sorted[1] + sorted[2];
    assert!(budget < bytes.iter().sum::<u64>());
    let f = front_with(None, 0, Some(budget), None);
    for (i, id) in IDS.iter().enumerate().chain(IDS.iter().enumerate()) {
        let r = post(f.addr, "/v1/completions", &ask(id, i), None);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(f.multi.loaded().iter().filter(|m| m == id).count(), 1);
        // What is loaded fits the budget (each model's figure is known after its first load).
        let held: u64 = f.multi.loaded().iter().map(|m| bytes[IDS.iter().position(|x| x == m).unwrap()]).sum();
        assert!(held <= budget, "{:?} hold {held} > {budget}", f.multi.loaded());
    }
    // A model larger than the whole budget is refused, naming it.
    drop(f);
    let f = front_with(None, 0, Some(sorted[0] / 2), None);
    let r = post(f.addr, "/v1/completions", &ask("tiny-llama", 0), None);
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_str()),
        (503, Some("model_too_large")),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
}
