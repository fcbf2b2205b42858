//! A local server in the hub's and PyPI's URL and header layout (the real ones are not
//! reachable from CI): `/api/models/ORG/REPO/revision/REV`, `/ORG/REPO/resolve/REV/FILE`
//! (Range requests, `X-Repo-Commit`, `X-Linked-Etag` for LFS files and a quoted git-sha1
//! `ETag` for the rest, 401 without the right token, 404), and a PEP 691 simple index with
//! its files. It logs every request, and can cut one transfer half way.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use sha1::Sha1;
use sha2::{Digest, Sha256};

pub fn sha256(b: &[u8]) -> String {
    Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

pub fn git_sha1(b: &[u8]) -> String {
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", b.len()).as_bytes());
    h.update(b);
    h.finalize().iter().map(|x| format!("{x:02x}")).collect()
}

#[derive(Clone)]
pub struct HubFile {
    pub bytes: Vec<u8>,
    /// Served as an LFS file (`X-Linked-Etag` = sha256) or a git file (`ETag` = blob sha1).
    pub lfs: bool,
    /// An etag to announce instead of the true one (a corrupted upload).
    pub lie: Option<String>,
}

#[derive(Clone, Default)]
pub struct HubRepo {
    pub commit: String,
    pub files: Vec<(String, HubFile)>,
    /// The bearer token this repository needs (gated).
    pub token: Option<String>,
}

#[derive(Default)]
pub struct State {
    pub repos: HashMap<String, HubRepo>,
    /// PyPI: package -> (wheel file name, bytes).
    pub wheels: HashMap<String, (String, Vec<u8>)>,
    /// Paths whose next full transfer is cut after this many bytes.
    pub cut: HashMap<String, usize>,
    /// "METHOD PATH RANGE" of every request.
    pub log: Vec<String>,
}

pub struct Server {
    pub url: String,
    pub state: Arc<Mutex<State>>,
}

impl Server {
    pub fn start(state: State) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(state));
        let s = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let s = s.clone();
                std::thread::spawn(move || serve(stream, &s));
            }
        });
        Server { url, state }
    }

    pub fn log(&self) -> Vec<String> {
        self.state.lock().unwrap().log.clone()
    }
}

fn respond(stream: &mut TcpStream, status: &str, headers: &[(String, String)], body: &[u8], cut: Option<usize>) {
    let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(&body[..cut.unwrap_or(body.len()).min(body.len())]);
    let _ = stream.flush();
}

fn serve(mut stream: TcpStream, state: &Mutex<State>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let range = headers.get("range").cloned().unwrap_or_default();
    let mut st = state.lock().unwrap();
    st.log.push(format!("{method} {path} {range}").trim().to_string());
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let json = |v: serde_json::Value| {
        (vec![("Content-Type".to_string(), "application/json".to_string())], v.to_string().into_bytes())
    };
    // PyPI.
    if segs.first() == Some(&"simple") && segs.len() >= 2 {
        let Some((name, _)) = st.wheels.get(segs[1]) else {
            return respond(&mut stream, "404 Not Found", &[], b"", None);
        };
        let bytes = &st.wheels[segs[1]].1;
        let (h, b) = json(
            serde_json::json!({"files": [{"filename": name, "url": format!("../../files/{name}"), "hashes": {"sha256": sha256(bytes)}}]}),
        );
        return respond(&mut stream, "200 OK", &h, &b, None);
    }
    if segs.first() == Some(&"files") && segs.len() == 2 {
        let Some((_, bytes)) = st.wheels.values().find(|(n, _)| n == segs[1]).cloned() else {
            return respond(&mut stream, "404 Not Found", &[], b"", None);
        };
        let cut = st.cut.remove(&path);
        return ranged(&mut stream, &range, &bytes, vec![], cut);
    }
    // The hub: /api/models/ORG/REPO/revision/REV and /ORG/REPO/resolve/REV/FILE...
    let (repo_id, api) = if segs.first() == Some(&"api") && segs.len() >= 4 {
        (format!("{}/{}", segs[2], segs[3]), true)
    } else if segs.len() >= 5 && segs[2] == "resolve" {
        (format!("{}/{}", segs[0], segs[1]), false)
    } else {
        return respond(&mut stream, "404 Not Found", &[], b"", None);
    };
    let Some(repo) = st.repos.get(&repo_id).cloned() else {
        return respond(&mut stream, "404 Not Found", &[], b"{\"error\":\"Repository not found\"}", None);
    };
    if let Some(t) = &repo.token {
        if headers.get("authorization") != Some(&format!("Bearer {t}")) {
            return respond(&mut stream, "401 Unauthorized", &[], b"{\"error\":\"Invalid credentials\"}", None);
        }
    }
    if api {
        let siblings: Vec<_> = repo.files.iter().map(|(n, _)| serde_json::json!({"rfilename": n})).collect();
        let (h, b) = json(serde_json::json!({"id": repo_id, "sha": repo.commit, "siblings": siblings}));
        return respond(&mut stream, "200 OK", &h, &b, None);
    }
    let file = segs[4..].join("/");
    let Some((_, f)) = repo.files.iter().find(|(n, _)| *n == file) else {
        return respond(&mut stream, "404 Not Found", &[], b"{\"error\":\"Entry not found\"}", None);
    };
    let mut h = vec![("X-Repo-Commit".to_string(), repo.commit.clone())];
    if f.lfs {
        h.push(("X-Linked-Etag".into(), format!("\"{}\"", f.lie.clone().unwrap_or_else(|| sha256(&f.bytes)))));
        h.push(("ETag".into(), "\"cdn-etag\"".into()));
    } else {
        h.push(("ETag".into(), format!("\"{}\"", f.lie.clone().unwrap_or_else(|| git_sha1(&f.bytes)))));
    }
    let cut = if range == "bytes=0-0" { None } else { st.cut.remove(&path) };
    ranged(&mut stream, &range, &f.bytes, h, cut)
}

fn ranged(stream: &mut TcpStream, range: &str, bytes: &[u8], mut h: Vec<(String, String)>, cut: Option<usize>) {
    let Some(spec) = range.strip_prefix("bytes=") else {
        return respond(stream, "200 OK", &h, bytes, cut);
    };
    let (a, b) = spec.split_once('-').unwrap_or((spec, ""));
    let a: usize = a.parse().unwrap_or(0);
    let b: usize = if b.is_empty() { bytes.len().saturating_sub(1) } else { b.parse().unwrap_or(0) };
    if a >= bytes.len() {
        return respond(stream, "416 Range Not Satisfiable", &[], b"", None);
    }
    h.push(("Content-Range".into(), format!("bytes {a}-{b}/{}", bytes.len())));
    respond(stream, "206 Partial Content", &h, &bytes[a..=b.min(bytes.len() - 1)], cut)
}
