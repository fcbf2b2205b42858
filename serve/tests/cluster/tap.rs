//! A transparent TCP tap between a router and a replica: it forwards bytes both ways
//! untouched and keeps a copy, so a test can read what the router sent a replica and
//! what that replica answered before the router rewrote it (vllm-router re-serializes
//! P/D answers and replaces their usage: the replica's own bytes are the evidence).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// Bytes one connection carried: (client to replica, replica to client).
type Transcript = Arc<Mutex<(Vec<u8>, Vec<u8>)>>;

/// A tap listening on a loopback port, forwarding to `to`. Its threads end with the
/// test process (the router holds its connections open).
pub struct Tap {
    pub addr: SocketAddr,
    conns: Arc<Mutex<Vec<Transcript>>>,
}

/// One request and the answer to it, as they crossed the tap.
pub struct Exchange {
    pub method_path: String,
    pub request: Vec<u8>,
    pub status: u16,
    pub response: Vec<u8>,
}

impl Exchange {
    pub fn request_json(&self) -> Value {
        serde_json::from_slice(&self.request).expect("request JSON")
    }
    pub fn response_json(&self) -> Value {
        serde_json::from_slice(&self.response)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.response)))
    }
}

impl Tap {
    pub fn new(to: SocketAddr) -> Tap {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind tap");
        let addr = listener.local_addr().expect("tap addr");
        let conns: Arc<Mutex<Vec<Transcript>>> = Arc::default();
        let all = Arc::clone(&conns);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(to) else { continue };
                let t: Transcript = Arc::default();
                all.lock().unwrap().push(Arc::clone(&t));
                let (c2, s2) = (client.try_clone().expect("clone"), server.try_clone().expect("clone"));
                let t2 = Arc::clone(&t);
                std::thread::spawn(move || pump(client, server, &t, true));
                std::thread::spawn(move || pump(s2, c2, &t2, false));
            }
        });
        Tap { addr, conns }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every exchange so far whose request line is `method_path` ("POST /v1/...").
    pub fn exchanges(&self, method_path: &str) -> Vec<Exchange> {
        let mut out = Vec::new();
        for t in self.conns.lock().unwrap().iter() {
            let (up, down) = &*t.lock().unwrap();
            let (reqs, resps) = (messages(up), messages(down));
            for ((head, request), (rhead, response)) in reqs.into_iter().zip(resps) {
                let line = head.lines().next().unwrap_or_default();
                let mp = line.rsplit_once(' ').map_or(line, |(a, _)| a).to_string();
                if mp == method_path {
                    let status = rhead.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("status");
                    out.push(Exchange { method_path: mp, request, status, response });
                }
            }
        }
        out
    }
}

/// Copy `from` to `to`, recording each chunk before it is forwarded (so by the time the
/// router has an answer, the tap has it too).
fn pump(mut from: TcpStream, mut to: TcpStream, t: &Transcript, upstream: bool) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        {
            let mut g = t.lock().unwrap();
            let side = if upstream { &mut g.0 } else { &mut g.1 };
            side.extend_from_slice(&buf[..n]);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// The complete HTTP/1.1 messages in `bytes`: (head, body), bodies by Content-Length
/// or chunked; an incomplete trailing message is left out.
fn messages(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(end) = find(&bytes[at..], b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&bytes[at..at + end]).to_string();
        let mut p = at + end + 4;
        let field = |name: &str| {
            head.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case(name).then(|| v.trim().to_ascii_lowercase())
            })
        };
        let body = if field("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            let mut body = Vec::new();
            loop {
                let Some(e) = find(&bytes[p..], b"\r\n") else { return out };
                let size = std::str::from_utf8(&bytes[p..p + e])
                    .ok()
                    .and_then(|s| usize::from_str_radix(s.split(';').next().unwrap_or_default().trim(), 16).ok());
                let size = size.expect("chunk size");
                p += e + 2;
                if p + size + 2 > bytes.len() {
                    return out;
                }
                body.extend_from_slice(&bytes[p..p + size]);
                p += size + 2;
                if size == 0 {
                    break;
                }
            }
            body
        } else {
            let n: usize = field("content-length").map_or(0, |v| v.parse().expect("content-length"));
            if p + n > bytes.len() {
                return out;
            }
            p += n;
            bytes[p - n..p].to_vec()
        };
        out.push((head, body));
        at = p;
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
