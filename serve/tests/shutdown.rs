//! The `serve` binary: SIGTERM stops accepting, lets in-flight requests finish (or drops
//! them after the grace period) and exits 0; bad flags fail in one line.

mod common;

use std::io::BufReader;
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn spawn(grace: u64) -> (Child, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_serve"))
        .args(["--model", &tiny().to_string_lossy(), "--port", "0", "--threads", "1"])
        .args(["--shutdown-grace", &grace.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn serve");
    let addr = listening_addr(&mut child);
    (child, addr)
}

fn term(child: &Child) {
    let ok = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
    assert!(ok.success());
}

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            return st;
        }
        if t0.elapsed() > within {
            let _ = child.kill();
            panic!("serve did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The rest of an SSE stream's `data:` payloads.
fn rest(mut c: BufReader<TcpStream>) -> Vec<String> {
    let mut body = Vec::new();
    while let Some(chunk) = read_chunk(&mut c) {
        body.extend(chunk);
    }
    String::from_utf8_lossy(&body).split("\n\n").filter_map(|e| e.strip_prefix("data: ").map(str::to_string)).collect()
}

#[test]
fn sigterm_finishes_in_flight_requests_and_exits_0() {
    let (mut child, addr) = spawn(10);
    let body = r#"{"prompt": "Hello", "max_tokens": 200, "seed": 1, "stream": true}"#;
    let mut c = connect(addr, "POST", "/v1/completions", body.as_bytes(), &[]);
    assert_eq!(read_head(&mut c).0, 200);
    term(&child);
    let events = rest(c);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{events:?}");
    assert!(events.iter().any(|e| e.contains("\"finish_reason\":\"length\"")), "not finished: {events:?}");
    let status = wait_exit(&mut child, Duration::from_secs(20));
    assert_eq!(status.code(), Some(0));
    assert!(TcpStream::connect(addr).is_err(), "still accepting after exit");
}

#[test]
fn past_the_grace_period_requests_are_dropped_and_it_still_exits_0() {
    let (mut child, addr) = spawn(0);
    let body = r#"{"prompt": "Hello", "max_tokens": 240, "seed": 1, "stream": true}"#;
    let mut c = connect(addr, "POST", "/v1/completions", body.as_bytes(), &[]);
    assert_eq!(read_head(&mut c).0, 200);
    term(&child);
    let events = rest(c);
    // Either it was cut (an error event) or it had already finished; both end cleanly.
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{events:?}");
    assert!(events.iter().any(|e| e.contains("shutting_down") || e.contains("\"finish_reason\"")), "{events:?}");
    assert_eq!(wait_exit(&mut child, Duration::from_secs(20)).code(), Some(0));
}

#[test]
fn bad_flags_fail_in_one_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_serve"))
        .args(["--model", "/no/such/model", "--port", "0"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("/no/such/model"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_serve")).arg("--bogus").output().expect("run");
    assert_eq!(out.status.code(), Some(2));
}
