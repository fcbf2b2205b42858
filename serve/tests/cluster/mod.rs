//! Replicas, routers and requests for the scale-out tests (docs/scale-out.md): `serve`
//! processes on loopback (1 thread each), HAProxy and vllm-router as installed by
//! scripts/scale_tools.sh, and a blocking HTTP client that knows which replica answered
//! from the replicas' own counters.
#![allow(dead_code)]

pub mod tap;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{listening_addr, metric, request, tiny, Resp};

/// One `serve` replica, killed on drop.
pub struct Replica {
    pub child: Child,
    pub addr: SocketAddr,
    /// Its stderr, when spawned by [`Replica::logged`].
    log: Option<tempfile::NamedTempFile>,
}

impl Replica {
    /// `serve --model MODEL --port 0 --threads 1 ARGS...` with a small KV pool.
    pub fn spawn(model: &Path, args: &[&str]) -> Replica {
        let pool = ["--kv-blocks", "256", "--block-tokens", "16", "--max-batch-tokens", "128"];
        Replica::start(model, &[&pool[..], args].concat(), false)
    }

    /// `serve --model MODEL --port 0 --threads 1 ARGS...`, every other setting the
    /// default (docs/scale-out.md's command lines), stderr kept for [`Replica::log`].
    pub fn logged(model: &Path, args: &[&str]) -> Replica {
        Replica::start(model, args, true)
    }

    fn start(model: &Path, args: &[&str], keep_log: bool) -> Replica {
        let log = keep_log.then(|| tempfile::NamedTempFile::new().expect("log file"));
        let stderr = match &log {
            Some(f) => Stdio::from(f.reopen().expect("reopen log")),
            None => Stdio::null(),
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_serve"))
            .args(["--model", &model.to_string_lossy(), "--port", "0", "--threads", "1"])
            .args(args)
            .env_remove("TL_API_KEY")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn serve");
        let addr = listening_addr(&mut child);
        Replica { child, addr, log }
    }

    /// What it wrote to stderr so far (spawned by [`Replica::logged`]).
    pub fn log(&self) -> String {
        let f = self.log.as_ref().expect("spawned with Replica::logged");
        std::fs::read_to_string(f.path()).expect("read log")
    }

    pub fn tiny(args: &[&str]) -> Replica {
        Replica::spawn(&tiny(), args)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn metric(&self, name: &str) -> f64 {
        metric(self.addr, name)
    }

    /// A counter's value, 0 before its first increment (a labelled counter appears then).
    pub fn counter(&self, name: &str) -> f64 {
        let text = String::from_utf8(request(self.addr, "GET", "/metrics", b"", &[]).body).expect("utf8");
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .map_or(0.0, |v| v.parse().expect("a number"))
    }

    /// Completions answered 200 so far.
    pub fn served(&self) -> f64 {
        self.counter("tl_requests_total{endpoint=\"/v1/completions\",code=\"200\"}")
    }

    pub fn post(&self, body: &Value) -> Resp {
        request(self.addr, "POST", "/v1/completions", body.to_string().as_bytes(), &[])
    }

    /// SIGKILL, by pid.
    pub fn kill(&mut self) {
        let ok = Command::new("kill").args(["-KILL", &self.child.id().to_string()]).status().expect("kill");
        assert!(ok.success());
        let _ = self.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free loopback port (bound and released: the router binds it next).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// Wait until `GET path` on `addr` answers `want`, for at most `within`.
pub fn wait_status(addr: SocketAddr, path: &str, want: u16, within: Duration) {
    let t0 = Instant::now();
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            let r = request(addr, "GET", path, b"", &[]);
            if r.status == want {
                return;
            }
        }
        assert!(t0.elapsed() < within, "GET {path} on {addr} did not answer {want} within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A router process (HAProxy or vllm-router), killed on drop.
pub struct Router {
    pub child: Child,
    pub addr: SocketAddr,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn haproxy_bin() -> PathBuf {
    for p in ["/usr/sbin/haproxy", "/usr/bin/haproxy", "/usr/local/sbin/haproxy"] {
        if std::path::Path::new(p).is_file() {
            return PathBuf::from(p);
        }
    }
    panic!("haproxy is not installed: run scripts/scale_tools.sh (scripts/test.sh does)");
}

/// HAProxy in the foreground with `config` (`{PORT}` is replaced by its port).
pub fn haproxy(config: &str) -> Router {
    let port = free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("haproxy.cfg");
    std::fs::write(&cfg, config.replace("{PORT}", &port.to_string())).expect("write cfg");
    let child = Command::new(haproxy_bin())
        .args(["-db", "-f"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn haproxy");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    Router { child, addr, _dir: Some(dir) }
}

/// The HAProxy backend lines for `replicas`: active `GET /health` checks every 200 ms.
pub fn haproxy_servers(replicas: &[&Replica]) -> String {
    replicas
        .iter()
        .enumerate()
        .map(|(i, r)| format!("    server r{i} {} check inter 200ms fall 2 rise 1\n", r.addr))
        .collect()
}

fn vllm_router_bin() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv-vllm-router/bin/vllm-router");
    assert!(p.is_file(), "{} is missing: run scripts/scale_tools.sh (scripts/test.sh does)", p.display());
    p
}

/// vllm-router on a free port (and its metrics on another) with `args`; returns once it
/// answers `/health`. A router that exits first (a port taken meanwhile: `free_port`
/// releases it) is started again on others; its logs are shown when it never gets ready.
pub fn vllm_router(args: &[String]) -> Router {
    let mut exits = String::new();
    for _ in 0..3 {
        let (port, metrics) = (free_port(), free_port());
        let dir = tempfile::tempdir().expect("tempdir");
        let log = std::fs::File::create(dir.path().join("router.log")).expect("log");
        let mut child = Command::new(vllm_router_bin())
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            // Its Prometheus exporter binds 29000 unless told: a second router running
            // meanwhile (the tests run in parallel) panicked at start on that port.
            .args(["--prometheus-port", &metrics.to_string()])
            .args(["--health-check-interval-secs", "1", "--worker-startup-check-interval", "1"])
            .args(["--log-level", "warning"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn vllm-router");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let t0 = Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                let text = std::fs::read_to_string(dir.path().join("router.log")).unwrap_or_default();
                exits += &format!("--- port {port}: {status}\n{text}\n");
                break; // start again
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
                && request(addr, "GET", "/health", b"", &[]).status == 200
            {
                return Router { child, addr, _dir: Some(dir) };
            }
            if t0.elapsed() > Duration::from_secs(90) {
                let _ = child.kill();
                let text = std::fs::read_to_string(dir.path().join("router.log")).unwrap_or_default();
                panic!("vllm-router on {addr} was not ready within 90 s:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    panic!("vllm-router exited at start three times:\n{exits}");
}

/// A completion request body: `max_tokens` tokens, seeded sampling at temperature 0.8
/// (or greedy with `seed == None`).
pub fn completion(prompt: &str, max_tokens: usize, seed: Option<i64>) -> Value {
    match seed {
        Some(s) => json!({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.8, "seed": s, "logprobs": 1}),
        None => json!({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "logprobs": 1}),
    }
}

/// What must be equal bit for bit between two answers: the text, the token strings and
/// their logprobs (as JSON numbers: the f64 round-trips exactly), the finish reason.
pub fn answer(r: &Resp) -> Value {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    let c = &v["choices"][0];
    json!({"text": c["text"], "logprobs": c["logprobs"]["token_logprobs"], "tokens": c["logprobs"]["tokens"],
           "finish": c["finish_reason"]})
}

/// POST a completion through `addr` with extra headers.
pub fn post_via(addr: SocketAddr, body: &Value, headers: &[(&str, &str)]) -> Resp {
    request(addr, "POST", "/v1/completions", body.to_string().as_bytes(), headers)
}

/// Which replicas' served counters rose between `before` and now.
pub fn deltas(replicas: &[&Replica], before: &[f64]) -> Vec<f64> {
    replicas.iter().zip(before).map(|(r, b)| r.served() - b).collect()
}

pub fn counts(replicas: &[&Replica]) -> Vec<f64> {
    replicas.iter().map(|r| r.served()).collect()
}

/// A long prompt of `words` words from `seed` (shared prefixes for the cache tests).
pub fn words(seed: u64, n: usize) -> String {
    const W: [&str; 16] = [
        "river", "stone", "lamp", "orbit", "maple", "copper", "violet", "harbor", "signal", "meadow", "pixel",
        "canyon", "ember", "quartz", "willow", "falcon",
    ];
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            W[(x % 16) as usize]
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Three groups of 4 requests, each group sharing a ~130-token prefix (from `seed`),
/// through the router at `addr`: each group lands on one replica only, whose prefix-cache
/// hits rise by at least 3 requests x 7 full blocks, while the others' do not rise.
pub fn assert_shared_prefixes_stay_home(addr: SocketAddr, replicas: &[&Replica], seed: u64) {
    let hits = |r: &Replica| r.metric("tl_prefix_cache_hit_tokens_total");
    for group in 0..3u64 {
        let prefix = words(seed + group, 20); // ~130 byte tokens: 8 full blocks
        let (served0, hits0) = (counts(replicas), replicas.iter().map(|r| hits(r)).collect::<Vec<_>>());
        for i in 0..4 {
            let r = post_via(addr, &completion(&format!("{prefix} #{i}"), 4, Some(i)), &[]);
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        }
        let d = deltas(replicas, &served0);
        let home: Vec<usize> = (0..replicas.len()).filter(|&k| d[k] > 0.0).collect();
        assert_eq!(home.len(), 1, "group {group}: shared-prefix requests spread over {d:?}");
        for (k, r) in replicas.iter().enumerate() {
            let rose = hits(r) - hits0[k];
            if k == home[0] {
                assert!(rose >= 3.0 * 16.0 * 7.0, "group {group}: replica {k} hit only {rose} prefix tokens");
            } else {
                assert_eq!(rose, 0.0, "group {group}: replica {k} was not sent the prefix");
            }
        }
    }
}

/// Send `jobs` through the router at `addr` from 4 client threads, kill `replicas[victim]`
/// while it is computing once the load is under way, and check that every job was
/// answered 200 with the answer of one server alone (`want`). Returns the victim's served
/// count at the moment of the kill.
pub fn assert_kill_mid_load_loses_nothing(
    replicas: &mut [Replica],
    victim: usize,
    addr: SocketAddr,
    jobs: &[Value],
    want: &[Value],
) -> f64 {
    use std::sync::{Arc, Mutex};
    let queue = Arc::new(Mutex::new((0..jobs.len()).collect::<Vec<_>>()));
    let done = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (queue, done, jobs) = (Arc::clone(&queue), Arc::clone(&done), jobs.to_vec());
            std::thread::spawn(move || loop {
                let Some(i) = queue.lock().unwrap().pop() else { return };
                let r = post_via(addr, &jobs[i], &[]);
                done.lock().unwrap().push((i, r));
            })
        })
        .collect();
    let t0 = Instant::now();
    while !(done.lock().unwrap().len() >= 4 && replicas[victim].metric("tl_running_sequences") >= 1.0) {
        assert!(t0.elapsed() < Duration::from_secs(60), "replica {victim} never got a request");
        std::thread::sleep(Duration::from_millis(2));
    }
    let served = replicas[victim].served();
    replicas[victim].kill();
    for w in workers {
        w.join().expect("worker");
    }
    let done = done.lock().unwrap();
    assert_eq!(done.len(), jobs.len());
    for (i, r) in done.iter() {
        assert_eq!(r.status, 200, "job {i} lost: {}", String::from_utf8_lossy(&r.body));
        assert_eq!(answer(r), want[*i], "job {i}: the retried answer differs from one server's");
    }
    served
}
