//! A server on an ephemeral loopback port, and a small HTTP/1.1 client over a raw
//! TcpStream (so the tests see exactly the bytes on the wire, chunked or not).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tl_core::{EngineConfig, KvConfig};
use tl_serve::{AppState, Options};

#[path = "../../../engine/tests/support/mod.rs"]
mod support;
#[allow(unused_imports)] // not every test file uses both
pub use support::{crate_fixture, fixture, smollm2, tiny};

pub fn options(model: PathBuf, n_blocks: u32, block_tokens: u32, max_seqs: usize, max_queue: usize) -> Options {
    Options {
        model,
        model_name: None,
        engine: EngineConfig {
            max_batch_tokens: 128,
            max_seqs,
            prefill_chunk: 32,
            threads: 2,
            kv: KvConfig { block_tokens, n_blocks: Some(n_blocks), ..KvConfig::default() },
            ..EngineConfig::default()
        },
        max_queue,
        max_body: 64 << 10,
        shutdown_grace: Duration::from_secs(5),
        api_key: None,
        limits: tl_serve::Limits::default(),
        scale: tl_serve::replica::ScaleOptions::default(),
        speculate: None,
        draft_model: None,
        spec_step_rows: 0,
        spec_p_min: 0.0,
        spec_costs: false,
        reasoning_format: Default::default(),
        kv_disk: None,
        loras: Vec::new(),
        max_loras: 0,
        pooling: None,
    }
}

/// The official `openai` client's Python (target/venv-openai, built by
/// scripts/openai_venv.sh, or `TL_OPENAI_VENV`); `None` (the test skips loudly) when it
/// is missing, unless TL_REQUIRE_MODEL is set (CI), which fails.
pub fn openai_python() -> Option<PathBuf> {
    let venv = std::env::var_os("TL_OPENAI_VENV")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv-openai"), PathBuf::from);
    let py = venv.join("bin/python");
    if py.is_file() {
        return Some(py);
    }
    assert!(std::env::var_os("TL_REQUIRE_MODEL").is_none(), "{} is missing: run scripts/openai_venv.sh", py.display());
    eprintln!("\nSKIPPED: {} is missing (run scripts/openai_venv.sh)", py.display());
    None
}

/// A running in-process server; dropping it shuts it down and waits.
pub struct Server {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    pub fn start(opts: Options) -> Server {
        let (atx, arx) = std::sync::mpsc::channel();
        let (stx, srx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
            rt.block_on(async move {
                let state: Arc<AppState> = AppState::load(&opts).expect("load");
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
                atx.send(listener.local_addr().expect("addr")).expect("send addr");
                tl_serve::run(listener, state, async move {
                    let _ = srx.await;
                })
                .await
                .expect("serve");
            });
        });
        let addr = arx.recv_timeout(Duration::from_secs(60)).expect("server did not start");
        Server { addr, stop: Some(stx), thread: Some(thread) }
    }

    pub fn get(&self, path: &str) -> Resp {
        request(self.addr, "GET", path, b"", &[])
    }

    pub fn post(&self, path: &str, body: &Value) -> Resp {
        request(self.addr, "POST", path, body.to_string().as_bytes(), &[])
    }

    /// A metric's value from /metrics (first line starting with `name`).
    pub fn metric(&self, name: &str) -> f64 {
        metric(self.addr, name)
    }

    /// Wait until no KV block is in use and nothing runs or waits.
    pub fn assert_pool_clean(&self) {
        assert_pool_clean(self.addr, 100)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The `data:` payloads of an SSE body.
    pub fn events(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.body)
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: ").map(str::to_string))
            .collect()
    }
}

pub fn connect(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    extra: &[(&str, &str)],
) -> BufReader<TcpStream> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(120))).expect("timeout");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).expect("write");
    let _ = s.write_all(body);
    BufReader::new(s)
}

/// Status line and headers.
pub fn read_head(r: &mut BufReader<TcpStream>) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    r.read_line(&mut line).expect("status line");
    let status = line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).expect("header");
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    (status, headers)
}

/// One chunk of a chunked body (None at the end).
pub fn read_chunk(r: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let n = usize::from_str_radix(line.trim(), 16).ok()?;
    let mut buf = vec![0; n + 2];
    r.read_exact(&mut buf).ok()?;
    buf.truncate(n);
    (n > 0).then_some(buf)
}

pub fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8], extra: &[(&str, &str)]) -> Resp {
    let mut r = connect(addr, method, path, body, extra);
    let (status, headers) = read_head(&mut r);
    let chunked = headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let mut body = Vec::new();
    if chunked {
        while let Some(c) = read_chunk(&mut r) {
            body.extend(c);
        }
    } else {
        let _ = r.read_to_end(&mut body);
    }
    Resp { status, headers, body }
}

/// The `serve` binary on an ephemeral loopback port, killed on drop; `rss_kib` reads its
/// resident size.
pub struct Proc {
    pub child: std::process::Child,
    pub addr: SocketAddr,
}

impl Proc {
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> Proc {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_serve"));
        cmd.args(["--model", &tiny().to_string_lossy(), "--port", "0", "--threads", "1"]).args(args);
        cmd.env_remove("TL_API_KEY");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child =
            cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null()).spawn().expect("spawn");
        let addr = listening_addr(&mut child);
        Proc { child, addr }
    }

    pub fn post(&self, path: &str, body: &Value, extra: &[(&str, &str)]) -> Resp {
        request(self.addr, "POST", path, body.to_string().as_bytes(), extra)
    }

    pub fn metric(&self, name: &str) -> f64 {
        metric(self.addr, name)
    }

    /// Wait until no KV block is in use and nothing runs or waits.
    pub fn assert_pool_clean(&self) {
        assert_pool_clean(self.addr, 200)
    }

    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// Still running (not exited).
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address a spawned `serve` prints on its first stdout line.
pub fn listening_addr(child: &mut std::process::Child) -> SocketAddr {
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("first line");
    line.split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
}

/// A metric's value from /metrics (first line starting with `name`).
pub fn metric(addr: SocketAddr, name: &str) -> f64 {
    let text = String::from_utf8(request(addr, "GET", "/metrics", b"", &[]).body).expect("utf8");
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} missing in:\n{text}"))
}

/// Wait (up to `tries` x 50 ms) until no KV block is in use and nothing runs or waits.
pub fn assert_pool_clean(addr: SocketAddr, tries: usize) {
    for _ in 0..tries {
        if metric(addr, "tl_kv_blocks{state=\"in_use\"}") == 0.0
            && metric(addr, "tl_running_sequences") == 0.0
            && metric(addr, "tl_queue_depth") == 0.0
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("pool not clean");
}

/// A thinking chat template whose generation prompt opens the thinking (as DeepSeek-R1's
/// and Qwen3's do): the answer starts inside it.
pub const OPENS: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + \
    '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}";

/// The tiny Qwen3 fixture copied into `dir` with `template` as its chat template.
pub fn qwen3_with_template(dir: &std::path::Path, template: &str) -> PathBuf {
    let src = crate_fixture("arch-qwen3", "tiny-qwen3");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), dir.join(f)).expect("copy fixture");
    }
    std::fs::write(dir.join("chat_template.jinja"), template).expect("template");
    dir.to_path_buf()
}
