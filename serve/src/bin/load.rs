//! load: N concurrent streaming clients against a running `serve` for a bounded time.
//!
//! `load --addr 127.0.0.1:8080 --model NAME [--concurrency 16] [--seconds 20] [--max-tokens 32]`
//! Each client loops: one streamed chat request (a shared system prompt, a varying
//! question, its own seed), timing the first token and the gaps between tokens. Prints
//! one summary line: requests answered / refused (by status) / failed, output tokens per
//! second, TTFT and inter-token latency p50/p99, and the KV blocks in use at the end.
//! Against tl's `serve` a second line says where the first token waited (from /metrics,
//! the level's deltas): queue wait, step and forward time, tokens and prefill tokens per
//! step, prompt tokens served from the prefix cache. `--server llama-server` runs the same
//! clients against llama.cpp's server (no tl metrics, no KV check).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{json, Value};

/// Load-test a running serve.
#[derive(Parser, Debug, Clone)]
struct Cli {
    /// host:port of the server.
    #[arg(long)]
    addr: String,
    /// The model name the server serves.
    #[arg(long)]
    model: String,
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// How long to keep sending (requests in flight at the end are awaited).
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// max_tokens of each request.
    #[arg(long, default_value_t = 32)]
    max_tokens: u32,
    /// What answers: `tl` (serve: its metrics are read and its pool checked) or
    /// `llama-server`.
    #[arg(long, default_value = "tl", value_parser = ["tl", "llama-server"])]
    server: String,
    /// The name printed at the start of the summary line (default: --server).
    #[arg(long)]
    label: Option<String>,
}

#[derive(Default)]
struct Tally {
    ok: usize,
    refused: Vec<u16>,
    failed: Vec<String>,
    tokens: usize,
    prompt_tokens: usize,
    ttft: Vec<f64>,
    itl: Vec<f64>,
}

fn http(addr: &str, method: &str, path: &str, body: &str) -> std::io::Result<BufReader<TcpStream>> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(300)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    Ok(BufReader::new(s))
}

/// Status and whether the body is chunked.
fn head(r: &mut BufReader<TcpStream>) -> std::io::Result<(u16, bool)> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status = line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut chunked = false;
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        chunked |= line.to_ascii_lowercase().starts_with("transfer-encoding: chunked");
    }
    Ok((status, chunked))
}

/// What one streamed request measured.
struct Done {
    tokens: usize,
    prompt_tokens: usize,
    ttft: f64,
    gaps: Vec<f64>,
}

/// One streamed request, or a status.
fn one(cli: &Cli, i: usize) -> Result<Done, Result<u16, String>> {
    let questions = ["What is a cache?", "Name three colours.", "Why do cats purr?", "Explain rain in one line."];
    let body = json!({"model": cli.model, "seed": i, "temperature": 0.8, "max_tokens": cli.max_tokens,
        "stream": true, "stream_options": {"include_usage": true}, "logprobs": true,
        "messages": [{"role": "system", "content": "You are a helpful assistant. Answer briefly."},
                     {"role": "user", "content": questions[i % questions.len()]}]});
    let t0 = Instant::now();
    let io = |e: std::io::Error| -> Result<u16, String> { Err(e.to_string()) };
    let mut r = http(&cli.addr, "POST", "/v1/chat/completions", &body.to_string()).map_err(io)?;
    let (status, chunked) = head(&mut r).map_err(io)?;
    if status != 200 || !chunked {
        return Err(Ok(status));
    }
    let (mut first, mut last, mut gaps, mut tokens, mut prompt_tokens) = (None, t0, Vec::new(), 0, 0);
    let mut buf = String::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).map_err(io)?;
        let n = usize::from_str_radix(line.trim(), 16).map_err(|e| Err(format!("chunk size {line:?}: {e}")))?;
        if n == 0 {
            break;
        }
        let mut data = vec![0; n + 2];
        r.read_exact(&mut data).map_err(io)?;
        buf.push_str(&String::from_utf8_lossy(&data[..n]));
        while let Some(end) = buf.find("\n\n") {
            let ev: String = buf.drain(..end + 2).collect();
            let Some(payload) = ev.trim().strip_prefix("data: ") else { continue };
            if payload == "[DONE]" {
                continue;
            }
            let v: Value = serde_json::from_str(payload).map_err(|e| Err(format!("bad chunk: {e}")))?;
            if v.get("error").is_some() {
                return Err(Err(format!("stream error: {payload}")));
            }
            if let Some(u) = v["usage"]["completion_tokens"].as_u64() {
                tokens = u as usize;
                prompt_tokens = v["usage"]["prompt_tokens"].as_u64().unwrap_or(0) as usize;
            }
            let c = &v["choices"][0];
            // Tokens in this chunk: its logprobs entries, or one for a chunk of text from a
            // server that sends no logprobs.
            let k = match c["logprobs"]["content"].as_array() {
                Some(a) => a.len(),
                None => usize::from(c["delta"]["content"].as_str().is_some_and(|t| !t.is_empty())),
            };
            if k > 0 {
                let now = Instant::now();
                match first {
                    None => first = Some((now - t0).as_secs_f64()),
                    // A chunk may carry several tokens (held-back text): share the gap.
                    Some(_) => gaps.extend(std::iter::repeat_n((now - last).as_secs_f64() / k as f64, k)),
                }
                last = now;
            }
        }
    }
    Ok(Done { tokens, prompt_tokens, ttft: first.unwrap_or(0.0), gaps })
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn scrape(addr: &str) -> Option<String> {
    let mut r = http(addr, "GET", "/metrics", "").ok()?;
    let mut text = String::new();
    r.read_to_string(&mut text).ok()?;
    Some(text)
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.split([' ', '{']).next() == Some(name) || l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Where the first token waited, from two scrapes of tl's /metrics around the level.
fn breakdown(before: &str, after: &str, answered: usize) -> String {
    let d = |name: &str| metric(after, name).unwrap_or(0.0) - metric(before, name).unwrap_or(0.0);
    let mean = |name: &str| d(&format!("{name}_sum")) / d(&format!("{name}_count")).max(1.0);
    let steps = d("tl_step_seconds_count");
    format!(
        "engine: queue wait mean {:.0} ms; engine TTFT mean {:.0} ms; {:.0} steps, mean {:.0} ms (forward {:.0} ms), {:.1} tokens/step of which {:.1} prefill; prefix cache {:.1} prompt tokens/request",
        mean("tl_queue_wait_seconds") * 1e3,
        mean("tl_time_to_first_token_seconds") * 1e3,
        steps,
        mean("tl_step_seconds") * 1e3,
        mean("tl_step_forward_seconds") * 1e3,
        mean("tl_step_tokens"),
        mean("tl_step_prefill_tokens"),
        d("tl_prefix_cache_hit_tokens_total") / answered.max(1) as f64,
    )
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(2);
        }
    };
    let tl = cli.server == "tl";
    let before = if tl { scrape(&cli.addr).unwrap_or_default() } else { String::new() };
    let tally = Arc::new(Mutex::new(Tally::default()));
    let deadline = Instant::now() + Duration::from_secs(cli.seconds);
    let t0 = Instant::now();
    let workers: Vec<_> = (0..cli.concurrency)
        .map(|w| {
            let (cli, tally) = (cli.clone(), Arc::clone(&tally));
            std::thread::spawn(move || {
                let mut i = w;
                while Instant::now() < deadline {
                    let res = one(&cli, i);
                    i += cli.concurrency;
                    let Ok(mut t) = tally.lock() else { return };
                    match res {
                        Ok(d) => {
                            t.ok += 1;
                            t.tokens += d.tokens;
                            t.prompt_tokens += d.prompt_tokens;
                            t.ttft.push(d.ttft);
                            t.itl.extend(d.gaps);
                        }
                        Err(Ok(status)) => t.refused.push(status),
                        Err(Err(e)) => t.failed.push(e),
                    }
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    let wall = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(200));
    let after = if tl { scrape(&cli.addr).unwrap_or_default() } else { String::new() };
    let in_use = metric(&after, "tl_kv_blocks{state=\"in_use\"}");
    let Ok(mut t) = tally.lock() else { return ExitCode::FAILURE };
    let ms = |x: f64| x * 1e3;
    let (ttft50, ttft99) = (ms(pct(&mut t.ttft, 0.5)), ms(pct(&mut t.ttft, 0.99)));
    let (itl50, itl99) = (ms(pct(&mut t.itl, 0.5)), ms(pct(&mut t.itl, 0.99)));
    println!(
        "[{}] concurrency {:>3}: {} answered, {} refused {:?}, {} failed; {:.1} output tok/s over {:.1} s; \
         TTFT p50 {:.0} ms p99 {:.0} ms; ITL p50 {:.1} ms p99 {:.1} ms; {:.1} prompt tokens/request; \
         KV blocks in use at the end: {}",
        cli.label.as_deref().unwrap_or(&cli.server),
        cli.concurrency,
        t.ok,
        t.refused.len(),
        t.refused.iter().take(3).collect::<Vec<_>>(),
        t.failed.len(),
        t.tokens as f64 / wall,
        wall,
        ttft50,
        ttft99,
        itl50,
        itl99,
        t.prompt_tokens as f64 / t.ok.max(1) as f64,
        in_use.map_or("unknown".into(), |v| v.to_string()),
    );
    if tl {
        println!("    {}", breakdown(&before, &after, t.ok));
    }
    for f in t.failed.iter().take(3) {
        eprintln!("failed: {f}");
    }
    if t.failed.is_empty() && (!tl || in_use == Some(0.0)) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
