//! Headless Chromium driven over the DevTools protocol, for the chat page test.
//!
//! Chromium comes from scripts/chromium.sh (Debian's package, installed when missing).
//! The protocol runs over `--remote-debugging-pipe`: Chromium reads commands on its fd 3
//! and writes answers and events on its fd 4, each a JSON text ended by a NUL byte. bash
//! maps those onto the child's stdin and stdout, so the test needs no websocket client
//! and opens no debugging port. A reader thread turns the stream into a channel, and
//! every wait has a deadline: a stuck page fails the test, it never hangs it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long one protocol command may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// The Chromium binary: scripts/chromium.sh prints its path (installing it first if needed).
pub fn chromium() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/chromium.sh");
    let out = Command::new(&script).stderr(Stdio::inherit()).output().expect("run scripts/chromium.sh");
    assert!(out.status.success(), "scripts/chromium.sh failed: {}", out.status);
    let path = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim().to_string();
    assert!(Path::new(&path).is_file(), "scripts/chromium.sh printed {path:?}, not a file");
    PathBuf::from(path)
}

/// One headless browser with one page attached; killed on drop.
pub struct Browser {
    child: Child,
    input: ChildStdin,
    messages: Receiver<Value>,
    next_id: u64,
    session: Option<String>,
    /// Every event received so far (method, params), in order.
    pub events: Vec<(String, Value)>,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Start Chromium and attach to a new blank page with the Page, Runtime, Network and
    /// Log domains on.
    pub fn launch() -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>&2"#)
            .arg(chromium())
            .args([
                "--headless",
                // CI runs the suite as root, where Chromium's sandbox cannot start; the
                // browser loads only the test's own loopback pages.
                "--no-sandbox",
                "--disable-gpu",
                "--remote-debugging-pipe",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--window-size=1200,900",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromium");
        let input = child.stdin.take().expect("stdin");
        let output = child.stdout.take().expect("stdout");
        let (tx, messages) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(output);
            let mut buf = Vec::new();
            while matches!(r.read_until(0, &mut buf), Ok(n) if n > 0) {
                if buf.last() == Some(&0) {
                    buf.pop();
                }
                let Ok(v) = serde_json::from_slice::<Value>(&buf) else { break };
                if tx.send(v).is_err() {
                    break;
                }
                buf.clear();
            }
        });
        let mut b =
            Browser { child, input, messages, next_id: 0, session: None, events: Vec::new(), _profile: profile };
        let target = b.call("Target.createTarget", json!({"url": "about:blank"}));
        let target = target["targetId"].as_str().expect("targetId").to_string();
        let attached = b.call("Target.attachToTarget", json!({"targetId": target, "flatten": true}));
        b.session = Some(attached["sessionId"].as_str().expect("sessionId").to_string());
        for domain in ["Page", "Runtime", "Network", "Log"] {
            b.call(&format!("{domain}.enable"), json!({}));
        }
        b.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": 1200, "height": 900, "deviceScaleFactor": 1, "mobile": false}),
        );
        b
    }

    /// Send one command (to the attached page once there is one) and wait for its result;
    /// events that arrive meanwhile are kept in `events`.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = &self.session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        self.input.write_all(&bytes).and_then(|()| self.input.flush()).expect("write to chromium");
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = match self.messages.recv_timeout(left) {
                Ok(v) => v,
                Err(RecvTimeoutError::Timeout) => panic!("{method}: no answer from chromium in {CALL_TIMEOUT:?}"),
                Err(RecvTimeoutError::Disconnected) => panic!("{method}: chromium closed the pipe"),
            };
            if v["id"].as_u64() == Some(id) {
                if let Some(e) = v.get("error") {
                    panic!("{method}: {e}");
                }
                return v["result"].clone();
            }
            if let Some(m) = v["method"].as_str() {
                self.events.push((m.to_string(), v["params"].clone()));
            }
        }
    }

    /// Evaluate `expr` in the page (awaiting a promise) and return its JSON value; a
    /// thrown exception fails the test.
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call("Runtime.evaluate", json!({"expression": expr, "returnByValue": true, "awaitPromise": true}));
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expr}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Poll `expr` every 20 ms until it is truthy; returns its value. Fails after `limit`.
    pub fn wait_for(&mut self, what: &str, expr: &str, limit: Duration) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let v = self.eval(expr);
            if !matches!(v, Value::Null | Value::Bool(false)) && v != json!("") && v != json!(0) {
                return v;
            }
            if Instant::now() >= deadline {
                // What the page shows, and what went wrong in it, say why.
                let shown = self.eval("document.body.innerText");
                let errors = self.page_errors();
                panic!(
                    "timed out after {limit:?} waiting for {what} ({expr}); the page shows {shown}; errors: {errors:?}"
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Load `url` and wait until the document has loaded.
    pub fn open(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url}));
        self.wait_for("the page to load", "document.readyState === 'complete'", Duration::from_secs(20));
    }

    /// Click the centre of the element `selector` with real mouse events.
    pub fn click(&mut self, selector: &str) {
        let js = format!(
            "(() => {{ const e = document.querySelector({s}); e.scrollIntoView({{block: 'center'}}); \
             const r = e.getBoundingClientRect(); \
             return [r.x + r.width / 2, r.y + r.height / 2]; }})()",
            s = json!(selector)
        );
        let at = self.eval(&js);
        let (x, y) = (at[0].as_f64().expect("x"), at[1].as_f64().expect("y"));
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }

    /// Focus `selector`, clear it, and type `text` into it as keyboard input would.
    pub fn type_into(&mut self, selector: &str, text: &str) {
        self.eval(&format!(
            "(() => {{ const e = document.querySelector({s}); e.focus(); e.select(); }})()",
            s = json!(selector)
        ));
        self.call(
            "Input.dispatchKeyEvent",
            json!({"type": "keyDown", "key": "Delete", "code": "Delete", "windowsVirtualKeyCode": 46}),
        );
        self.call(
            "Input.dispatchKeyEvent",
            json!({"type": "keyUp", "key": "Delete", "code": "Delete", "windowsVirtualKeyCode": 46}),
        );
        if !text.is_empty() {
            self.call("Input.insertText", json!({"text": text}));
        }
    }

    /// A PNG of the page, written to `path`.
    pub fn screenshot(&mut self, path: &Path) {
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64_decode(r["data"].as_str().expect("screenshot data"));
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "the screenshot is not a PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("screenshot dir");
        }
        std::fs::write(path, png).expect("write screenshot");
    }

    /// The JSON bodies of every POST the page sent to `path`, in order (from the Network
    /// domain: what actually left the browser).
    pub fn posted(&mut self, path: &str) -> Vec<Value> {
        self.eval("0"); // collect events that arrived since the last call
        self.events
            .iter()
            .filter(|(m, p)| {
                m == "Network.requestWillBeSent"
                    && p["request"]["method"] == "POST"
                    && p["request"]["url"].as_str().is_some_and(|u| u.ends_with(path))
            })
            .map(|(_, p)| {
                let body = p["request"]["postData"].as_str().expect("postData");
                serde_json::from_str(body).expect("the page posted JSON")
            })
            .collect()
    }

    /// Console errors, uncaught exceptions and CSP violations reported so far.
    pub fn page_errors(&mut self) -> Vec<String> {
        self.eval("0");
        self.events
            .iter()
            .filter_map(|(m, p)| match m.as_str() {
                "Runtime.exceptionThrown" => Some(p["exceptionDetails"].to_string()),
                "Log.entryAdded" if p["entry"]["level"] == "error" => Some(p["entry"]["text"].to_string()),
                "Runtime.consoleAPICalled" if p["type"] == "error" => Some(p["args"].to_string()),
                _ => None,
            })
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Standard base64 (the screenshot's encoding).
fn base64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c:?}"),
    };
    let digits: Vec<u8> = s.bytes().filter(|&c| c != b'=').map(value).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for group in digits.chunks(4) {
        let mut n = 0u32;
        for (i, &d) in group.iter().enumerate() {
            n |= u32::from(d) << (18 - 6 * i);
        }
        out.extend_from_slice(&n.to_be_bytes()[1..group.len()]);
    }
    out
}
