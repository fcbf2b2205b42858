//! Reasoning (`--reasoning-format`): a thinking template's `<think>` text comes back as
//! `reasoning_content`, streamed as `delta.reasoning_content`, counted in
//! `completion_tokens_details.reasoning_tokens`; the tokens are the ones `none` returns.
//! On the tiny random Qwen3 fixture, under a template that opens the thinking in the
//! generation prompt (as DeepSeek-R1's and Qwen3's thinking templates do) and one that
//! only mentions it.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{openai_python, options, qwen3_with_template, Server, OPENS};
use serde_json::{json, Value};
use tl_serve::reasoning::ReasoningFormat;

/// A template that knows the tags (a comment here) but leaves the answer to open them.
const MENTIONS: &str = "{# a thinking template: <think> #}{% for message in messages %}{{'<|im_start|>' + \
    message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}\
    {% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

fn server(model: PathBuf, format: ReasoningFormat) -> Server {
    let mut o = options(model, 64, 16, 4, 64);
    o.reasoning_format = format;
    Server::start(o)
}

fn body(seed: u64, stream: bool) -> Value {
    json!({
        "messages": [{"role": "user", "content": "Why is the sky blue?"}],
        "max_tokens": 24, "seed": seed, "temperature": 1.0, "stream": stream,
        "stream_options": {"include_usage": true},
    })
}

/// (reasoning, content, reasoning_tokens, completion_tokens) of a JSON answer.
fn split_answer(s: &Server, seed: u64) -> (Option<String>, String, u64, u64) {
    let r = s.post("/v1/chat/completions", &body(seed, false));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    let m = &v["choices"][0]["message"];
    let usage = &v["usage"];
    (
        m["reasoning_content"].as_str().map(str::to_string),
        m["content"].as_str().expect("content").to_string(),
        usage["completion_tokens_details"]["reasoning_tokens"].as_u64().expect("reasoning_tokens"),
        usage["completion_tokens"].as_u64().expect("completion_tokens"),
    )
}

/// The same, streamed: the deltas concatenated.
fn split_stream(s: &Server, seed: u64) -> (Option<String>, String, u64, u64) {
    let r = s.post("/v1/chat/completions", &body(seed, true));
    assert_eq!(r.status, 200);
    let (mut reasoning, mut content, mut usage) = (None::<String>, String::new(), Value::Null);
    for e in r.events() {
        if e == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(&e).expect("chunk");
        if !v["usage"].is_null() {
            usage = v["usage"].clone();
        }
        let Some(d) = v["choices"].get(0).map(|c| &c["delta"]) else { continue };
        if let Some(t) = d["reasoning_content"].as_str() {
            reasoning.get_or_insert_with(String::new).push_str(t);
        }
        content.push_str(d["content"].as_str().unwrap_or(""));
    }
    (
        reasoning,
        content,
        usage["completion_tokens_details"]["reasoning_tokens"].as_u64().expect("reasoning_tokens"),
        usage["completion_tokens"].as_u64().expect("completion_tokens"),
    )
}

/// How `text` (the answer as `none` returns it) splits when the prompt opened the
/// thinking: reasoning up to `</think>`, the answer after it without its leading space.
fn expected(text: &str) -> (Option<String>, String) {
    match text.split_once("</think>") {
        Some((r, c)) => (Some(r.to_string()).filter(|r| !r.is_empty()), c.trim_start().to_string()),
        None => (Some(text.to_string()).filter(|r| !r.is_empty()), String::new()),
    }
}

#[test]
fn an_opened_thinking_comes_back_as_reasoning_content_streamed_or_not() {
    let d = tempfile::tempdir().expect("tempdir");
    let m = qwen3_with_template(d.path(), OPENS);
    let raw = server(m.clone(), ReasoningFormat::None);
    let split = server(m, ReasoningFormat::Deepseek);
    for seed in [1, 2, 3] {
        let (none_reasoning, text, none_tokens, n) = split_answer(&raw, seed);
        assert_eq!((none_reasoning, none_tokens), (None, 0), "none leaves the answer whole");
        let (reasoning, content, tokens, n2) = split_answer(&split, seed);
        assert_eq!(n, n2, "seed {seed}: the same tokens either way");
        assert_eq!((reasoning.clone(), content.clone()), expected(&text), "seed {seed}");
        if !text.contains("</think>") {
            assert_eq!(tokens, n, "seed {seed}: every token was thinking");
        }
        assert!(tokens <= n);
        let streamed = split_stream(&split, seed);
        assert_eq!(streamed, (reasoning, content, tokens, n), "seed {seed}: streamed as answered");
    }
}

#[test]
fn a_template_that_only_mentions_the_tags_leaves_an_answer_that_does_not_think_whole() {
    let d = tempfile::tempdir().expect("tempdir");
    let m = qwen3_with_template(d.path(), MENTIONS);
    let raw = server(m.clone(), ReasoningFormat::None);
    let split = server(m, ReasoningFormat::Deepseek);
    for seed in [4, 5] {
        let want = split_answer(&raw, seed);
        // The random model does not open `<think>`: the answer is unchanged.
        assert!(!want.1.trim_start().starts_with("<think>"));
        assert_eq!(split_answer(&split, seed), want, "seed {seed}");
        assert_eq!(split_stream(&split, seed), want, "seed {seed}: streamed");
    }
}

/// The official `openai` client reads the split (serve/tests/openai_reasoning.py).
#[test]
fn the_official_openai_client_reads_reasoning_content() {
    let Some(py) = openai_python() else { return };
    let d = tempfile::tempdir().expect("tempdir");
    let s = server(qwen3_with_template(d.path(), OPENS), ReasoningFormat::Deepseek);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/openai_reasoning.py");
    let out = Command::new(py)
        .arg(script)
        .arg(format!("http://{}/v1", s.addr))
        .arg(d.path().file_name().unwrap().to_string_lossy().as_ref())
        .output()
        .expect("run python");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "openai client failed:\n{text}");
    for check in ["chat ok", "streamed chat ok"] {
        assert!(text.contains(check), "{check} missing:\n{text}");
    }
    s.assert_pool_clean();
}

/// Qwen3's own chat template, from the llama.cpp source that scripts/build_llama_cpp.sh
/// --source unpacks (its models/templates/ collects the real ones); `None`, skipping
/// loudly, when that source is not there (scripts/test.sh does not fetch it).
fn qwen3_template() -> Option<String> {
    let cache = std::env::var_os("TL_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/tl")))?;
    let src = cache.join("llama.cpp/src");
    let found = std::fs::read_dir(&src).ok().into_iter().flatten().flatten().find_map(|d| {
        let t = d.path().join("vendor/llama.cpp/models/templates/Qwen-Qwen3-0.6B.jinja");
        std::fs::read_to_string(t).ok()
    });
    if found.is_none() {
        eprintln!(
            "\nSKIPPED: no Qwen-Qwen3-0.6B.jinja under {} (run scripts/build_llama_cpp.sh --source)",
            src.display()
        );
    }
    found
}

/// Qwen3's real template: it thinks (the split applies) but leaves the answer to open the
/// thinking, and `chat_template_kwargs: {"enable_thinking": false}` closes it in the
/// prompt (19 more prompt bytes, each a token of the byte-level fixture).
#[test]
fn qwen3s_template_honours_enable_thinking_and_splits_only_what_thinks() {
    let Some(template) = qwen3_template() else { return };
    let d = tempfile::tempdir().expect("tempdir");
    let m = qwen3_with_template(d.path(), &template);
    let raw = server(m.clone(), ReasoningFormat::None);
    let split = server(m, ReasoningFormat::Deepseek);
    for seed in [6, 7] {
        let want = split_answer(&raw, seed);
        assert_eq!(split_answer(&split, seed), want, "seed {seed}: an answer that does not think is unchanged");
        assert_eq!(split_stream(&split, seed), want, "seed {seed}: streamed");
    }
    let prompt_tokens = |kwargs: Value| {
        let mut b = body(8, false);
        b["chat_template_kwargs"] = kwargs;
        let r = split.post("/v1/chat/completions", &b);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        r.json()["usage"]["prompt_tokens"].as_u64().expect("prompt_tokens")
    };
    let thinking = prompt_tokens(Value::Null);
    assert_eq!(prompt_tokens(json!({"enable_thinking": true})), thinking);
    assert_eq!(prompt_tokens(json!({"enable_thinking": false})), thinking + "<think>\n\n</think>\n\n".len() as u64);
    let mut bad = body(8, false);
    bad["chat_template_kwargs"] = json!(["enable_thinking"]);
    let r = split.post("/v1/chat/completions", &bad);
    assert_eq!((r.status, r.json()["error"]["param"].clone()), (400, json!("chat_template_kwargs")));
    bad = body(8, false);
    bad["reasoning_effort"] = json!("extreme");
    assert_eq!(split.post("/v1/chat/completions", &bad).status, 400);
}
