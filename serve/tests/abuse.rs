//! The server under abuse, over loopback: concurrent streaming clients that leave
//! mid-stream, clients that never read, slow senders, oversized and malformed bodies,
//! and a burst of thousands of requests against a small queue. Throughout, the server
//! answers every request with a response or a status, stays up, keeps its resident size
//! bounded, and ends with no KV block in use.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

const FLAGS: &[&str] = &[
    "--max-queue",
    "4",
    "--max-seqs",
    "4",
    "--kv-blocks",
    "64",
    "--block-tokens",
    "16",
    "--max-body",
    "65536",
    "--header-timeout",
    "1",
    "--body-timeout",
    "1",
    "--write-stall",
    "1",
    "--request-timeout",
    "30",
];

/// Every `data:` payload until the stream or connection ends.
fn drain(mut c: std::io::BufReader<TcpStream>) -> Vec<u8> {
    let mut body = Vec::new();
    while let Some(chunk) = read_chunk(&mut c) {
        body.extend(chunk);
    }
    body
}

fn streaming_clients_leave_mid_stream(addr: SocketAddr) {
    let handles: Vec<_> = (0..32)
        .map(|i| {
            std::thread::spawn(move || {
                let body = json!({"prompt": format!("client {i} says"), "max_tokens": 200, "seed": i, "stream": true});
                let mut c = connect(addr, "POST", "/v1/completions", body.to_string().as_bytes(), &[]);
                let (status, _) = read_head(&mut c);
                assert!(status == 200 || status == 503, "status {status}");
                for _ in 0..(i % 4) {
                    if read_chunk(&mut c).is_none() {
                        break;
                    }
                }
                // Dropped here: mid-stream, or before reading anything.
            })
        })
        .collect();
    for h in handles {
        h.join().expect("client thread");
    }
}

/// Clients that send a large streaming request and never read: the server goes on
/// answering others, and closes them once a write has been blocked for --write-stall.
fn clients_never_read(p: &Proc) -> Vec<TcpStream> {
    let body = json!({"messages": [{"role": "user", "content": "talk"}], "max_tokens": 200, "n": 4, "seed": 3,
                      "logprobs": true, "top_logprobs": 20, "stream": true});
    let stuck: Vec<TcpStream> = (0..2)
        .map(|_| {
            // The queue may still hold the previous phase's abandoned requests (they are
            // reaped at the next step): a 503 then is the bound working; try again.
            for _ in 0..200 {
                let mut c = connect(p.addr, "POST", "/v1/chat/completions", body.to_string().as_bytes(), &[]);
                match read_head(&mut c).0 {
                    200 => return c.into_inner(), // and not another byte read until the end of the test
                    503 => std::thread::sleep(std::time::Duration::from_millis(50)),
                    s => panic!("status {s}"),
                }
            }
            panic!("still 503 after 10 s");
        })
        .collect();
    // Meanwhile others are served.
    for i in 0..4 {
        let r = p.post("/v1/completions", &json!({"prompt": "hi", "max_tokens": 4, "seed": i}), &[]);
        assert!(r.status == 200 || r.status == 503, "{}", r.status);
    }
    stuck
}

fn slow_senders_and_bad_bodies(addr: SocketAddr) {
    // Twenty connections trickling a head; each is cut off after the header timeout.
    let slow: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut c = TcpStream::connect(addr).expect("connect");
            c.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le").expect("partial head");
            c
        })
        .collect();
    // Served meanwhile.
    let t0 = Instant::now();
    let r =
        request(addr, "POST", "/v1/completions", json!({"prompt": "hi", "max_tokens": 2}).to_string().as_bytes(), &[]);
    assert!(r.status == 200 || r.status == 503);
    assert!(t0.elapsed() < Duration::from_secs(5));
    for mut c in slow {
        c.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let mut buf = [0u8; 256];
        let n = c.read(&mut buf).unwrap_or(0);
        // Closed (0 bytes, or a 408 from hyper and then closed): never an open connection.
        assert!(n == 0 || buf.starts_with(b"HTTP/1.1 408"), "{:?}", String::from_utf8_lossy(&buf[..n]));
    }
    let bad: [(&[u8], u16, &str); 4] = [
        (b"{\"prompt\": \"\xff\xfe\", \"max_tokens\": 1}", 400, "invalid_json"),
        (
            &b"{\"prompt\": \"".iter().chain(&[0xc3u8, 0x28]).chain(b"\"}").copied().collect::<Vec<u8>>(),
            400,
            "invalid_json",
        ),
        (&[b'['; 100_000], 413, "request_too_large"),
        (&b"{\"prompt\": ".iter().chain(&[b'['; 5000]).copied().collect::<Vec<u8>>(), 400, "invalid_json"),
    ];
    let nested = format!("{{\"prompt\": {}1{}}}", "[".repeat(40), "]".repeat(40));
    let bad = bad.into_iter().chain([(nested.as_bytes(), 400, "invalid_value")]);
    for (body, status, code) in bad {
        let r = request(addr, "POST", "/v1/completions", body, &[]);
        assert_eq!(r.status, status, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["error"]["code"], code);
    }
    let deep = format!("{}1{}", "[".repeat(3000), "]".repeat(3000));
    let r = request(addr, "POST", "/v1/completions", format!("{{\"prompt\": {deep}}}").as_bytes(), &[]);
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"].as_str().is_some_and(|m| m.contains("recursion limit")), "{:?}", r.json());
}

/// Thousands of requests from 32 threads against a queue of 4: each gets 200 or 503
/// with Retry-After, and no connection goes unanswered.
fn burst(addr: SocketAddr, total: usize) -> (usize, usize) {
    let next = Arc::new(AtomicUsize::new(0));
    let (ok, busy) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let handles: Vec<_> = (0..32)
        .map(|_| {
            let (next, ok, busy) = (Arc::clone(&next), Arc::clone(&ok), Arc::clone(&busy));
            std::thread::spawn(move || {
                while next.fetch_add(1, Ordering::Relaxed) < total {
                    let body = json!({"prompt": "burst", "max_tokens": 3, "seed": 1}).to_string();
                    let r = request(addr, "POST", "/v1/completions", body.as_bytes(), &[]);
                    match r.status {
                        200 => ok.fetch_add(1, Ordering::Relaxed),
                        503 => {
                            assert_eq!(r.header("retry-after"), Some("1"));
                            assert_eq!(r.json()["error"]["code"], "overloaded");
                            busy.fetch_add(1, Ordering::Relaxed)
                        }
                        s => panic!("status {s}: {}", String::from_utf8_lossy(&r.body)),
                    };
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("burst thread");
    }
    (ok.load(Ordering::Relaxed), busy.load(Ordering::Relaxed))
}

#[test]
fn the_server_survives_abuse_with_bounded_memory_and_no_kv_leak() {
    let t0 = Instant::now();
    let mut p = Proc::spawn(FLAGS, &[]);
    // Warm up (first allocations, thread pools), then take the resident size.
    let (ok, _) = burst(p.addr, 64);
    assert!(ok > 0);
    let rss0 = p.rss_kib();

    streaming_clients_leave_mid_stream(p.addr);
    p.assert_pool_clean();

    let stuck = clients_never_read(&p);
    slow_senders_and_bad_bodies(p.addr);
    let (ok, busy) = burst(p.addr, 2000);
    assert_eq!(ok + busy, 2000);
    assert!(ok > 0, "nothing served");
    // By now every never-reading client has been cut off (a blocked write for 1 s) or
    // has had its whole answer buffered: either way its sequences are gone.
    p.assert_pool_clean();
    for mut c in stuck {
        c.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let mut all = Vec::new();
        let _ = c.read_to_end(&mut all); // EOF or reset: the server closed it
        let text = String::from_utf8_lossy(&all);
        eprintln!("a client that stopped reading got {} more bytes, complete: {}", all.len(), text.contains("[DONE]"));
    }
    assert!(p.alive(), "the server died");
    assert_eq!(request(p.addr, "GET", "/health", b"", &[]).status, 200);
    let rss1 = p.rss_kib();
    eprintln!(
        "abuse: {ok} served, {busy} refused (503) of 2000; RSS {rss0} KiB -> {rss1} KiB; {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(rss1 < rss0 + 64 * 1024, "resident size grew from {rss0} KiB to {rss1} KiB");
    let done =
        drain(connect(p.addr, "POST", "/v1/completions", br#"{"prompt":"x","max_tokens":2,"stream":true}"#, &[]));
    assert!(String::from_utf8_lossy(&done).is_empty() || p.alive());
}
