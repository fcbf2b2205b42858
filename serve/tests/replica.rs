//! What a router reads from one replica (docs/scale-out.md): `/health` is 503 while the
//! model loads and while draining after SIGTERM, 200 otherwise; `/load` counts in-flight
//! completion requests as vLLM's does; `/metrics` carries the vLLM-named gauges of the
//! Gateway API Inference Extension's model-server protocol with their types and ranges.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

#[test]
fn health_is_503_while_loading_then_the_loader_returns_its_value() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
    let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
    let (atx, arx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            atx.send(listener.local_addr().expect("addr")).expect("send");
            tl_serve::replica::while_loading(&listener, async move { rx.await.expect("value") }).await
        })
    });
    let addr: SocketAddr = arx.recv_timeout(Duration::from_secs(10)).expect("addr");
    for path in ["/health", "/v1/completions"] {
        let r = request(addr, "GET", path, b"", &[]);
        assert_eq!(r.status, 503, "{path}");
        assert_eq!(r.json(), json!({"status": "loading"}));
        assert_eq!(r.header("retry-after"), Some("1"));
    }
    tx.send(7).expect("send");
    assert_eq!(server.join().expect("join"), 7);
}

#[test]
fn the_binary_answers_503_loading_until_the_model_is_loaded() {
    // SmolLM2 takes long enough to load (its 100 MB are read for the fingerprint, then
    // mapped) for a 2 ms poll to see the loading phase.
    let Some(model) = smollm2() else { return };
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_serve"))
        .args(["--model", &model.to_string_lossy(), "--port", &port.to_string(), "--threads", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let t0 = Instant::now();
    let mut loading = 0;
    loop {
        assert!(t0.elapsed() < Duration::from_secs(60), "never ready");
        if std::net::TcpStream::connect(addr).is_err() {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        let r = request(addr, "GET", "/health", b"", &[]);
        if r.status == 200 {
            break;
        }
        assert_eq!((r.status, r.json()), (503, json!({"status": "loading"})));
        loading += 1;
    }
    assert!(loading > 0, "the port was never seen answering 503 while loading");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("line");
    assert!(line.starts_with(&format!("listening on http://{addr}")), "{line:?}");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn after_sigterm_health_is_503_and_new_requests_are_refused_while_in_flight_ones_finish() {
    let mut p = Proc::spawn(&["--shutdown-grace", "20"], &[]);
    let body = r#"{"prompt": "Hello", "max_tokens": 200, "seed": 1, "stream": true}"#;
    let mut c = connect(p.addr, "POST", "/v1/completions", body.as_bytes(), &[]);
    assert_eq!(read_head(&mut c).0, 200);
    assert_eq!(request(p.addr, "GET", "/health", b"", &[]).status, 200);
    let ok = Command::new("kill").args(["-TERM", &p.child.id().to_string()]).status().expect("kill");
    assert!(ok.success());
    // Draining: still accepting, saying 503, until the stream is done.
    let t0 = Instant::now();
    let mut saw = false;
    while t0.elapsed() < Duration::from_secs(5) {
        let r = request(p.addr, "GET", "/health", b"", &[]);
        if r.status == 503 {
            assert_eq!(r.json(), json!({"status": "draining"}));
            let q = request(p.addr, "POST", "/v1/completions", br#"{"prompt": "x", "max_tokens": 2}"#, &[]);
            assert_eq!(q.status, 503);
            assert_eq!(q.json()["error"]["code"], json!("shutting_down"));
            assert!(q.header("retry-after").is_some());
            saw = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(saw, "health never said 503 while draining");
    let mut rest = Vec::new();
    while let Some(chunk) = read_chunk(&mut c) {
        rest.extend(chunk);
    }
    assert!(String::from_utf8_lossy(&rest).contains("[DONE]"), "the in-flight stream finished");
    let t0 = Instant::now();
    while p.alive() {
        assert!(t0.elapsed() < Duration::from_secs(20), "did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn load_counts_in_flight_completion_requests_as_vllm_does() {
    let s = Server::start(options(tiny(), 64, 16, 4, 16));
    assert_eq!(s.get("/load").json(), json!({"server_load": 0}));
    let body = r#"{"prompt": "Hello", "max_tokens": 200, "seed": 1, "stream": true}"#;
    let mut c = connect(s.addr, "POST", "/v1/completions", body.as_bytes(), &[]);
    assert_eq!(read_head(&mut c).0, 200);
    // The stream is open: one request in flight (the /load request itself is not one).
    assert_eq!(s.get("/load").json(), json!({"server_load": 1}));
    while read_chunk(&mut c).is_some() {}
    let t0 = Instant::now();
    while s.get("/load").json() != json!({"server_load": 0}) {
        assert!(t0.elapsed() < Duration::from_secs(5), "the finished stream is still counted");
        std::thread::sleep(Duration::from_millis(10));
    }
    let r = s.post("/v1/completions", &json!({"prompt": "Hi", "max_tokens": 3}));
    assert_eq!(r.status, 200);
    assert_eq!(s.get("/load").json(), json!({"server_load": 0}));
}

/// `(type, value)` of a metric family's sample in an exposition.
fn sample(text: &str, family: &str, line_start: &str) -> (String, f64) {
    let kind = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("# TYPE {family} ")))
        .unwrap_or_else(|| panic!("no # TYPE for {family}"))
        .to_string();
    let v = text
        .lines()
        .find(|l| l.starts_with(line_start) && l[line_start.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no sample {line_start}"));
    (kind, v)
}

#[test]
fn metrics_carry_the_gateway_protocols_vllm_gauges() {
    let s = Server::start(options(tiny(), 64, 16, 4, 16));
    let text = || String::from_utf8(s.get("/metrics").body).expect("utf8");
    let t = text();
    assert!(t.trim_end().ends_with("# EOF"), "the exposition still ends with # EOF");
    assert_eq!(sample(&t, "vllm:num_requests_waiting", "vllm:num_requests_waiting"), ("gauge".into(), 0.0));
    assert_eq!(sample(&t, "vllm:num_requests_running", "vllm:num_requests_running"), ("gauge".into(), 0.0));
    assert_eq!(sample(&t, "vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc"), ("gauge".into(), 0.0));
    let info = "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"64\"}";
    assert_eq!(sample(&t, "vllm:cache_config_info", info), ("gauge".into(), 1.0));

    // While a stream runs: one running, a usage fraction in (0, 1] equal to tl's blocks.
    let body = r#"{"prompt": "Hello", "max_tokens": 200, "seed": 1, "stream": true}"#;
    let mut c = connect(s.addr, "POST", "/v1/completions", body.as_bytes(), &[]);
    assert_eq!(read_head(&mut c).0, 200);
    let _ = read_chunk(&mut c);
    let t = text();
    let (_, running) = sample(&t, "vllm:num_requests_running", "vllm:num_requests_running");
    let (_, usage) = sample(&t, "vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc");
    let (_, in_use) = sample(&t, "tl_kv_blocks", "tl_kv_blocks{state=\"in_use\"}");
    if running == 1.0 {
        assert!(usage > 0.0 && usage <= 1.0, "{usage}");
        assert_eq!(usage, in_use / 64.0);
    }
    while read_chunk(&mut c).is_some() {}
    let (kind, hits) = sample(&text(), "vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total");
    assert_eq!(kind, "counter");
    assert!(hits >= 0.0);
}
