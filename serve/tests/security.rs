//! Security: the API key on every /v1 route (OpenAI's 401 body otherwise), loopback by
//! default, and the request limits that are on by default.

mod common;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

fn assert_401(r: &Resp) {
    assert_eq!(r.status, 401, "{}", String::from_utf8_lossy(&r.body));
    let e = r.json();
    assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
    assert_eq!(e["error"]["code"], "invalid_api_key", "{e}");
    assert_eq!(e["error"]["param"], Value::Null, "{e}");
    assert!(e["error"]["message"].as_str().is_some_and(|m| m.contains("API key")), "{e}");
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
}

#[test]
fn an_api_key_is_required_on_every_v1_route() {
    let mut o = options(tiny(), 64, 16, 4, 16);
    o.api_key = Some("sk-test-0123456789".into());
    let s = Server::start(o);
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "seed": 1});
    let comp = json!({"prompt": "hi", "max_tokens": 2, "seed": 1});
    let routes: [(&str, &str, Value); 4] = [
        ("POST", "/v1/chat/completions", chat.clone()),
        ("POST", "/v1/completions", comp.clone()),
        ("GET", "/v1/models", Value::Null),
        ("GET", "/v1/no-such-route", Value::Null),
    ];
    let wrong: [&[(&str, &str)]; 6] = [
        &[],
        &[("Authorization", "Bearer sk-test-012345678")],   // a prefix
        &[("Authorization", "Bearer sk-test-01234567890")], // one byte more
        &[("Authorization", "Bearer sk-test-0123456780")],  // last byte differs
        &[("Authorization", "Basic sk-test-0123456789")],   // another scheme
        &[("Authorization", "sk-test-0123456789")],         // no scheme
    ];
    for (method, path, body) in &routes {
        let bytes = if body.is_null() { Vec::new() } else { body.to_string().into_bytes() };
        for h in wrong {
            assert_401(&request(s.addr, method, path, &bytes, h));
        }
        let ok = request(s.addr, method, path, &bytes, &[("Authorization", "Bearer sk-test-0123456789")]);
        let want = if path.ends_with("no-such-route") { 404 } else { 200 };
        assert_eq!(ok.status, want, "{path}: {}", String::from_utf8_lossy(&ok.body));
        // The scheme is case-insensitive (RFC 9110).
        let ok = request(s.addr, method, path, &bytes, &[("Authorization", "bearer sk-test-0123456789")]);
        assert_eq!(ok.status, want, "{path}");
    }
    // Health and metrics stay open for probes.
    assert_eq!(s.get("/health").status, 200);
    assert_eq!(s.get("/metrics").status, 200);
    s.assert_pool_clean();
}

#[test]
fn without_a_key_nothing_is_required() {
    let s = Server::start(options(tiny(), 64, 16, 4, 16));
    assert_eq!(s.get("/v1/models").status, 200);
}

#[test]
fn the_binary_takes_the_key_from_the_environment_and_listens_on_loopback() {
    let p = Proc::spawn(&[], &[("TL_API_KEY", "from-env")]);
    assert!(p.addr.ip().is_loopback(), "{}", p.addr);
    let body = json!({"prompt": "hi", "max_tokens": 2});
    assert_401(&p.post("/v1/completions", &body, &[]));
    assert_eq!(p.post("/v1/completions", &body, &[("Authorization", "Bearer from-env")]).status, 200);
    // --api-key wins over the environment.
    let p = Proc::spawn(&["--api-key", "from-flag"], &[("TL_API_KEY", "from-env")]);
    assert_401(&p.post("/v1/completions", &body, &[("Authorization", "Bearer from-env")]));
    assert_eq!(p.post("/v1/completions", &body, &[("Authorization", "Bearer from-flag")]).status, 200);
}

#[test]
fn an_empty_key_is_refused_at_startup_in_one_line() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_serve"))
        .args(["--model", &tiny().to_string_lossy(), "--port", "0", "--api-key", " "])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("API key is empty"), "{err}");
}

/// A kept-alive connection that has been served once (so the server has accepted it).
fn served_keep_alive(addr: std::net::SocketAddr) -> BufReader<TcpStream> {
    let mut c = TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
    let mut r = BufReader::new(c);
    let (status, headers) = read_head(&mut r);
    assert_eq!(status, 200);
    let len: usize =
        headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("content-length")).expect("length").1.parse().expect("n");
    r.read_exact(&mut vec![0; len]).expect("body");
    r
}

#[test]
fn connections_past_the_cap_wait_until_one_closes() {
    let mut o = options(tiny(), 64, 16, 4, 16);
    o.limits.max_connections = 2;
    let s = Server::start(o);
    let a = served_keep_alive(s.addr);
    let _b = served_keep_alive(s.addr);
    // A third connection completes its handshake in the backlog, but nothing serves it...
    let mut c = TcpStream::connect(s.addr).expect("connect");
    c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("write");
    c.set_read_timeout(Some(Duration::from_millis(700))).expect("timeout");
    let mut buf = [0u8; 64];
    match c.read(&mut buf) {
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
        other => panic!("a third connection was served past the cap of 2: {other:?}"),
    }
    // ...until one of the two closes.
    drop(a);
    let got = closed_within(c, Duration::from_secs(10));
    assert!(got.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&got));
}

#[test]
fn a_client_that_stops_reading_is_cut_off_after_the_write_stall() {
    let s = Server::start(short_limits());
    // Pipelined requests whose responses add up to far more than the socket buffers on
    // both sides (a few MiB on loopback): the server's writes block once they are full.
    let one = s.get("/metrics").body.len() + 200;
    let n = (64 << 20) / one + 1;
    let mut c = TcpStream::connect(s.addr).expect("connect");
    let writer = {
        let mut w = c.try_clone().expect("clone");
        std::thread::spawn(move || {
            let req = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(256);
            for _ in 0..n.div_ceil(256) {
                if w.write_all(&req).is_err() {
                    break; // the server closed the connection
                }
            }
        })
    };
    // Read nothing for well past the stall: the server must give up on this connection.
    std::thread::sleep(Duration::from_secs(4));
    c.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    let closed = loop {
        match c.read(&mut buf) {
            Ok(0) => break true,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => break false,
        }
    };
    let _ = writer.join();
    assert!(closed, "the connection stayed open");
    // Without the guard, every response arrives once the client reads again.
    assert!(got < n * (one - 200), "all {n} responses arrived ({got} bytes): nothing was cut off");
    assert_eq!(s.get("/health").status, 200);
}

#[test]
fn limits_are_on_by_default() {
    let d = tl_serve::Limits::default();
    assert!(d.max_header_bytes > 0 && d.max_header_bytes <= 64 << 10);
    for t in [d.header_timeout, d.body_timeout, d.request_timeout, d.write_stall] {
        assert!(t > Duration::ZERO && t <= Duration::from_secs(600), "{d:?}");
    }
    assert!(d.max_connections > 0 && d.max_connections <= 4096, "{d:?}");
}

fn short_limits() -> tl_serve::Options {
    let mut o = options(tiny(), 256, 16, 4, 16);
    o.limits = tl_serve::Limits {
        max_header_bytes: 16 << 10,
        header_timeout: Duration::from_secs(1),
        body_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(2),
        write_stall: Duration::from_secs(1),
        max_connections: 64,
    };
    o
}

/// Read until the server closes the connection (or `within` passes: then panic).
fn closed_within(mut c: TcpStream, within: Duration) -> Vec<u8> {
    c.set_read_timeout(Some(within)).expect("timeout");
    let t0 = Instant::now();
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) => return all,
            Ok(n) => all.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return all,
            Err(e) => panic!("not closed after {:?}: {e}", t0.elapsed()),
        }
    }
}

#[test]
fn oversized_heads_get_431_and_oversized_bodies_413() {
    let s = Server::start(short_limits());
    let big = "x".repeat(20 << 10);
    let r = request(s.addr, "GET", "/v1/models", b"", &[("X-Big", &big)]);
    assert_eq!(r.status, 431);
    let body = json!({"prompt": "x".repeat(80 << 10), "max_tokens": 1}).to_string();
    let r = request(s.addr, "POST", "/v1/completions", body.as_bytes(), &[]);
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["error"]["code"], "request_too_large");
    // Chunked, so no Content-Length to refuse up front: cut at the limit all the same.
    let mut c = TcpStream::connect(s.addr).expect("connect");
    let head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n";
    c.write_all(head.as_bytes()).expect("head");
    let chunk = vec![b' '; 16 << 10];
    for _ in 0..8 {
        if c.write_all(format!("{:x}\r\n", chunk.len()).as_bytes()).is_err()
            || c.write_all(&chunk).is_err()
            || c.write_all(b"\r\n").is_err()
        {
            break;
        }
    }
    let _ = c.write_all(b"0\r\n\r\n");
    let got = closed_within(c, Duration::from_secs(10));
    assert!(got.starts_with(b"HTTP/1.1 413"), "{}", String::from_utf8_lossy(&got));
    assert_eq!(s.get("/health").status, 200);
}

#[test]
fn slow_heads_are_cut_off_and_slow_bodies_get_408() {
    let s = Server::start(short_limits());
    // A head that never ends: the connection is closed after the header timeout.
    let mut c = TcpStream::connect(s.addr).expect("connect");
    c.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n").expect("head");
    let t0 = Instant::now();
    closed_within(c.try_clone().expect("clone"), Duration::from_secs(10));
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    // A connection that sends nothing at all.
    let c = TcpStream::connect(s.addr).expect("connect");
    closed_within(c, Duration::from_secs(10));
    // A body trickling in: 408 after the body timeout.
    let body = json!({"prompt": "hello", "max_tokens": 1}).to_string();
    let mut c = TcpStream::connect(s.addr).expect("connect");
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes()).expect("head");
    let t0 = Instant::now();
    for b in body.as_bytes().iter().take(8) {
        if c.write_all(&[*b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let got = closed_within(c, Duration::from_secs(10));
    assert!(got.starts_with(b"HTTP/1.1 408"), "{}", String::from_utf8_lossy(&got));
    assert!(String::from_utf8_lossy(&got).contains("request_timeout"));
    assert!(t0.elapsed() < Duration::from_secs(5));
    // Still serving.
    assert_eq!(s.post("/v1/completions", &json!({"prompt": "hi", "max_tokens": 1})).status, 200);
    s.assert_pool_clean();
}

#[test]
fn requests_past_the_request_timeout_end_and_free_their_blocks() {
    // A deadline that has passed before the first token: every generation times out.
    let mut o = short_limits();
    o.limits.request_timeout = Duration::ZERO;
    let s = Server::start(o);
    let long = json!({"prompt": "Hello", "max_tokens": 240, "seed": 1, "stream": true});
    let stream = s.post("/v1/completions", &long);
    assert_eq!(stream.status, 200);
    let ev = stream.events();
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert!(ev[0].contains("\"code\":\"timeout\""), "{ev:?}");
    assert_eq!(ev[1], "[DONE]");
    let mut plain = long.clone();
    plain["stream"] = json!(false);
    let r = s.post("/v1/completions", &plain);
    assert_eq!(r.status, 504, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["error"]["code"], "timeout");
    assert!(r.json()["error"]["message"].as_str().is_some_and(|m| m.contains("longer than 0 s")));
    s.assert_pool_clean();
    assert_eq!(s.get("/health").status, 200);
}
