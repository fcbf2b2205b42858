//! The chat page at `/` (docs/serving.md, "The chat page"): its assets over plain HTTP
//! (content types, the Content-Security-Policy, nothing fetched from elsewhere), and the
//! page itself driven in headless Chromium (tests/browser): typing, sending, streaming,
//! Stop, Regenerate, the JSON-schema box, the API key prompt. Each answer the page shows is
//! checked against the same seeded request sent straight to the API, and each request body
//! the page sent (as the browser's Network domain saw it) against the fields that were
//! filled in. Screenshots go to target/tmp/chat-page-*.png.

mod browser;
mod common;

use std::time::{Duration, Instant};

use browser::Browser;
use common::{options, smollm2, tiny, Server};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);

fn screenshot(b: &mut Browser, name: &str) {
    b.screenshot(&std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("chat-page-{name}.png")));
}

/// The page's idea of the last assistant message: (text, finish).
const LAST: &str = "(() => { const li = [...document.querySelectorAll('#messages li.assistant')].pop(); \
     return li && li.dataset.finish !== undefined ? [li.querySelector('.content').textContent, li.dataset.finish] : null; })()";

/// Wait until the answer in flight is finished; its text and finish reason.
fn finished(b: &mut Browser) -> (String, String) {
    b.wait_for("Send to be enabled again", "!document.getElementById('send').disabled", WAIT);
    let v = b.wait_for("a finished answer", LAST, WAIT);
    (v[0].as_str().expect("text").to_string(), v[1].as_str().expect("finish").to_string())
}

fn text_of(b: &mut Browser, selector: &str) -> String {
    b.eval(&format!("document.querySelector({}).textContent", json!(selector))).as_str().expect("text").to_string()
}

fn assistant_count(b: &mut Browser) -> usize {
    b.eval("document.querySelectorAll('#messages li.assistant').length").as_u64().expect("count") as usize
}

/// The same body, answered without streaming: (content, finish_reason, fingerprint).
fn direct(server: &Server, page_body: &Value) -> (String, String, String) {
    let mut body = page_body.clone();
    body["stream"] = json!(false);
    let r = server.post("/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let j = r.json();
    let c = &j["choices"][0];
    let s = |v: &Value| v.as_str().expect("string").to_string();
    (s(&c["message"]["content"]), s(&c["finish_reason"]), s(&j["system_fingerprint"]))
}

/// Open the page and wait for the model name to be shown.
fn open(b: &mut Browser, server: &Server) -> String {
    b.open(&format!("http://{}/", server.addr));
    let shown =
        b.wait_for("the model name", "(t => t !== '…' && t)(document.getElementById('model').textContent)", WAIT);
    shown.as_str().expect("model").to_string()
}

fn no_page_errors(b: &mut Browser) {
    // A refused request's own "Failed to load resource" line (source "network") is the
    // page working; anything else (an exception, a CSP refusal) is a bug.
    let errors: Vec<String> = b.page_errors().into_iter().filter(|e| !e.contains("Failed to load resource")).collect();
    assert!(errors.is_empty(), "page errors: {errors:#?}");
}

#[test]
fn the_page_and_its_assets_are_served_self_contained() {
    let mut o = options(tiny(), 64, 16, 8, 64);
    o.api_key = Some("page-key".into());
    let server = Server::start(o);
    let index = server.get("/");
    assert_eq!(index.status, 200);
    assert_eq!(index.header("content-type"), Some("text/html; charset=utf-8"));
    let html = String::from_utf8(index.body.clone()).expect("utf8");
    // Every file the page loads: the stylesheet and module script in index.html, and
    // the modules app.js imports.
    const JS: &str = "text/javascript; charset=utf-8";
    let mut wanted = vec![("/assets/style.css".to_string(), "text/css; charset=utf-8"), ("/assets/app.js".into(), JS)];
    for (path, _) in &wanted {
        assert!(html.contains(&format!("\"{path}\"")), "index.html does not load {path}");
    }
    let app = String::from_utf8(server.get("/assets/app.js").body).expect("utf8");
    for line in app.lines().filter(|l| l.starts_with("import ")) {
        let module = line.split('"').nth(1).expect("a quoted module path");
        wanted.push((format!("/assets/{}", module.trim_start_matches("./")), JS));
    }
    assert!(wanted.len() >= 3, "app.js imports no module: {wanted:?}");
    wanted.push(("/".into(), "text/html; charset=utf-8"));
    for (path, ty) in &wanted {
        // The page and its files are open even with --api-key: the page asks for the key.
        let r = server.get(path);
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("content-type"), Some(*ty), "{path}");
        assert_eq!(r.header("content-security-policy"), Some(tl_serve::page::CSP), "{path}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"), "{path}");
        let body = String::from_utf8(r.body).expect("utf8");
        // No network fetch, no CDN: nothing names another origin.
        assert!(
            !body.contains("http://") && !body.contains("https://") && !body.contains("//cdn"),
            "{path} names another origin"
        );
    }
    // Scripts only from files (the CSP refuses inline ones anyway).
    assert_eq!(html.matches("<script").count(), html.matches("<script type=\"module\" src=").count());
    assert!(!html.contains("style="), "inline style in index.html");
    let csp = tl_serve::page::CSP;
    for directive in ["default-src 'none'", "script-src 'self'", "connect-src 'self'", "style-src 'self'"] {
        assert!(csp.contains(directive), "CSP lacks {directive}");
    }
    assert!(!csp.contains("unsafe"), "CSP allows unsafe-*");
    let missing = server.get("/assets/nope.js");
    assert_eq!(missing.status, 404);
    assert_eq!(server.get("/assets/../Cargo.toml").status, 404);
    // The API itself still wants the key.
    assert_eq!(server.get("/v1/models").status, 401);
}

#[test]
fn the_chat_page_answers_as_the_api_does() {
    let server = Server::start(options(tiny(), 64, 16, 8, 64));
    let mut b = Browser::launch();
    let model = open(&mut b, &server);
    assert_eq!(model, server.get("/v1/models").json()["data"][0]["id"].as_str().expect("id"));
    assert_eq!(text_of(&mut b, "#fingerprint"), "–", "no fingerprint before a response");

    // Type the settings and a message as a user would, and click Send.
    b.type_into("[name=seed]", "7");
    b.type_into("[name=max_tokens]", "40");
    b.type_into("[name=temperature]", "0.9");
    b.type_into("[name=top_k]", "50");
    b.type_into("#input", "Hello, page");
    b.click("#send");
    let (text, finish) = finished(&mut b);
    let sent = b.posted("/v1/chat/completions");
    assert_eq!(sent.len(), 1);
    let want = json!({"model": model, "messages": [{"role": "user", "content": "Hello, page"}], "stream": true,
        "seed": 7, "max_tokens": 40, "temperature": 0.9, "top_k": 50});
    assert_eq!(sent[0], want, "the page sent more or less than the filled-in fields");
    let (api_text, api_finish, fingerprint) = direct(&server, &sent[0]);
    assert!(!api_text.is_empty());
    assert_eq!(text, api_text, "the page shows another answer than the API gives");
    assert_eq!(finish, api_finish);
    assert_eq!(text_of(&mut b, "#fingerprint"), fingerprint);
    assert_eq!(text_of(&mut b, "#messages li.user .content"), "Hello, page");

    // Regenerate: the same request again, the answer replaced (one assistant message).
    b.click("#regenerate");
    let (again, _) = finished(&mut b);
    let sent = b.posted("/v1/chat/completions");
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[1], sent[0], "Regenerate sends the same conversation");
    assert_eq!(again, text, "the same seed gives the same answer");
    assert_eq!(assistant_count(&mut b), 1);

    // A second turn carries the conversation as the page shows it.
    b.type_into("[name=seed]", "8");
    b.type_into("[name=max_tokens]", "12");
    b.type_into("#input", "Once more");
    b.click("#send");
    let (second, _) = finished(&mut b);
    let sent = b.posted("/v1/chat/completions");
    assert_eq!(sent.len(), 3);
    assert_eq!(
        sent[2]["messages"],
        json!([{"role": "user", "content": "Hello, page"}, {"role": "assistant", "content": text},
            {"role": "user", "content": "Once more"}])
    );
    assert_eq!(second, direct(&server, &sent[2]).0);
    screenshot(&mut b, "tiny");

    // The JSON-schema box: not JSON is refused in the page (nothing sent) ...
    b.click("#clear");
    assert_eq!(assistant_count(&mut b), 0);
    b.type_into("#schema", "{\"type\": ");
    b.type_into("#input", "JSON please");
    b.click("#send");
    b.wait_for("the schema error", "!document.getElementById('schema-error').hidden", WAIT);
    assert!(text_of(&mut b, "#schema-error").contains("not JSON"));
    assert_eq!(b.posted("/v1/chat/completions").len(), 3, "an invalid schema was sent");
    // ... a schema the server refuses shows its 400 ...
    b.type_into("#schema", r#"{"type": "no-such-type"}"#);
    b.click("#send");
    b.wait_for("the server's error", "!document.getElementById('error').hidden", WAIT);
    let error = text_of(&mut b, "#error");
    assert!(error.starts_with("HTTP 400: "), "{error}");
    assert_eq!(b.posted("/v1/chat/completions").len(), 4);
    assert_eq!(assistant_count(&mut b), 0, "a refused request leaves no answer");
    // ... and a good one gives JSON that matches it.
    let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"},
        "n": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["ok", "n"], "additionalProperties": false});
    b.type_into("#schema", &schema.to_string());
    b.type_into("[name=max_tokens]", "40");
    b.click("#regenerate"); // the user's message is still there: send it again
    let (answer, finish) = finished(&mut b);
    assert!(
        b.eval("document.getElementById('error').hidden").as_bool().expect("bool"),
        "the earlier error is still shown"
    );
    let sent = b.posted("/v1/chat/completions");
    let last = sent.last().expect("sent");
    assert_eq!(
        last["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "page", "schema": schema, "strict": true}})
    );
    assert_eq!(finish, "stop");
    let v: Value = serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer:?}"));
    assert!(v["ok"].is_boolean() && v["n"].as_u64().is_some_and(|n| n <= 9), "{v}");
    assert_eq!(v.as_object().map(|o| o.len()), Some(2), "{v}");
    assert_eq!(answer, direct(&server, last).0);
    no_page_errors(&mut b);
}

#[test]
fn the_chat_page_asks_for_the_api_key() {
    let mut o = options(tiny(), 64, 16, 8, 64);
    o.api_key = Some("page-key".into());
    let server = Server::start(o);
    let mut b = Browser::launch();
    b.open(&format!("http://{}/", server.addr));
    b.wait_for("the key prompt", "!document.getElementById('key-form').hidden", WAIT);
    assert_eq!(text_of(&mut b, "#model"), "…");
    b.type_into("#key", "page-key");
    b.click("#key-form button");
    b.wait_for("the model name", "document.getElementById('model').textContent !== '…'", WAIT);
    b.type_into("[name=seed]", "3");
    b.type_into("[name=max_tokens]", "8");
    b.type_into("#input", "hi");
    b.click("#send");
    let (text, _) = finished(&mut b);
    let sent: Vec<Value> = b
        .events
        .iter()
        .filter(|(m, p)| m == "Network.requestWillBeSent" && p["request"]["method"] == "POST")
        .map(|(_, p)| p["request"]["headers"]["Authorization"].clone())
        .collect();
    assert_eq!(sent, vec![json!("Bearer page-key")]);
    let mut body = b.posted("/v1/chat/completions").remove(0);
    body["stream"] = json!(false);
    let r = common::request(
        server.addr,
        "POST",
        "/v1/chat/completions",
        body.to_string().as_bytes(),
        &[("Authorization", "Bearer page-key")],
    );
    assert_eq!(text, r.json()["choices"][0]["message"]["content"].as_str().expect("content"));
    // Memory only: nothing stored where another visit could read it.
    let stored = b.eval("localStorage.length + sessionStorage.length + document.cookie.length");
    assert_eq!(stored, json!(0));
    no_page_errors(&mut b);
}

#[test]
fn the_chat_page_streams_and_stops_a_real_answer() {
    let Some(model) = smollm2() else { return };
    let server = Server::start(options(model, 256, 16, 8, 64));
    let mut b = Browser::launch();
    open(&mut b, &server);

    // A real answer, read from the DOM as it grows.
    b.type_into("[name=seed]", "1");
    b.type_into("[name=temperature]", "0");
    b.type_into("[name=max_tokens]", "40");
    b.type_into("#input", "What is the capital of France?");
    b.click("#send");
    let mut reads: Vec<String> = Vec::new();
    let deadline = Instant::now() + WAIT;
    while b.eval(LAST).is_null() {
        assert!(Instant::now() < deadline, "the answer did not finish");
        let now = b.eval("document.querySelector('#messages li.assistant .content')?.textContent ?? ''");
        let now = now.as_str().expect("text").to_string();
        if !now.is_empty() && reads.last() != Some(&now) {
            reads.push(now);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let (text, finish) = finished(&mut b);
    assert!(reads.len() >= 3, "the answer did not grow in steps: {reads:?}");
    for w in reads.windows(2) {
        assert!(w[1].starts_with(&w[0]) && w[1].len() > w[0].len(), "{reads:?}");
    }
    assert!(text.starts_with(reads.last().expect("reads")));
    let body = b.posted("/v1/chat/completions").remove(0);
    let (api_text, api_finish, _) = direct(&server, &body);
    assert_eq!((&text, &finish), (&api_text, &api_finish));
    assert!(text.contains("Paris"), "{text}");
    screenshot(&mut b, "smollm2");

    // Stop mid-stream: the answer stops growing, the server drops the sequence.
    b.click("#clear");
    b.type_into("[name=max_tokens]", "200");
    b.type_into("#input", "Write a long story about a dragon who learns to bake bread.");
    b.click("#send");
    b.wait_for("the first words", "document.querySelector('#messages li.assistant .content')?.textContent", WAIT);
    b.click("#stop");
    let (stopped, finish) = finished(&mut b);
    assert_eq!(finish, "stopped");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(b.eval(LAST)[0], json!(stopped), "the answer grew after Stop");
    common::assert_pool_clean(server.addr, 40);
    assert_eq!(server.metric("tl_cancelled_sequences_total"), 1.0);
    let body = b.posted("/v1/chat/completions").pop().expect("sent");
    let (full, _, _) = direct(&server, &body);
    assert!(full.starts_with(&stopped) && full.len() > stopped.len(), "stopped {stopped:?} of {full:?}");
    assert!(!b.eval("document.getElementById('send').disabled").as_bool().expect("bool"));
    no_page_errors(&mut b);
}

#[test]
fn the_page_reads_server_sent_events_split_anywhere() {
    // sse.js against the SSE format itself: CRLF and LF line ends, a comment, an event of
    // two data lines and a character of two bytes, with the stream cut into two reads at
    // every byte (a CRLF and the "é" split included).
    let server = Server::start(options(tiny(), 64, 16, 8, 64));
    let mut b = Browser::launch();
    b.open(&format!("http://{}/", server.addr));
    let got = b.eval(
        r#"(async () => {
            const { sseData } = await import('/assets/sse.js');
            const bytes = new TextEncoder().encode('data: h\u00e9llo\r\n\r\n: a comment\n\ndata: b\r\ndata:c\r\rdata: [DONE]\n\n');
            const results = [];
            for (let cut = 0; cut <= bytes.length; cut++) {
              const body = new ReadableStream({ start(c) {
                c.enqueue(bytes.slice(0, cut)); c.enqueue(bytes.slice(cut)); c.close(); } });
              const out = [];
              for await (const d of sseData(body)) out.push(d);
              results.push(JSON.stringify(out));
            }
            return [...new Set(results)];
        })()"#,
    );
    assert_eq!(got, json!([json!(["h\u{e9}llo", "b\nc", "[DONE]"]).to_string()]));
    no_page_errors(&mut b);
}
