//! Disaggregated prefill/decode over `kv_transfer_params`, driven the way vLLM's toy
//! proxy and vllm-router drive it (docs/scale-out.md), by a plain HTTP client: the
//! prefill leg (`max_tokens = 1`, `stream = false`, `do_remote_decode`), then the
//! original request with the prefill answer's `kv_transfer_params` copied verbatim to
//! the decode server. The answer must equal one server's, bit for bit; the decode server
//! computes only the last prompt token; the prefill server frees the blocks after the
//! fetch and after an expired lease; a failed fetch follows `--pd-fetch-failure`.

mod cluster;
mod common;

use std::time::{Duration, Instant};

use cluster::*;
use serde_json::{json, Value};

/// The prefill leg of `body`, as the toy proxy and vllm-router build it.
fn prefill_leg(body: &Value) -> Value {
    let mut p = body.clone();
    p["max_tokens"] = json!(1);
    p["stream"] = json!(false);
    p.as_object_mut().unwrap().remove("stream_options");
    p["kv_transfer_params"] = json!({"do_remote_decode": true, "do_remote_prefill": false,
        "remote_engine_id": null, "remote_block_ids": null, "remote_host": null, "remote_port": null});
    p
}

/// Run `body` through prefill server `p` and decode server `d`; the decode answer.
fn disaggregated(p: &Replica, d: &Replica, body: &Value) -> common::Resp {
    let r = p.post(&prefill_leg(body));
    assert_eq!(r.status, 200, "prefill: {}", String::from_utf8_lossy(&r.body));
    let kv = r.json()["kv_transfer_params"].clone();
    assert_eq!(kv["do_remote_prefill"], json!(true), "{kv}");
    let mut b = body.clone();
    b["kv_transfer_params"] = kv;
    d.post(&b)
}

/// Tokens fed through D's forward so far (the step-tokens histogram's sum).
fn fed(r: &Replica) -> f64 {
    r.metric("tl_step_tokens_sum")
}

/// Tokens a decode that computed only the last prompt token feeds for an answer: the
/// last prompt token, then every sampled token but the last, plus one more when the
/// last sampled was the end-of-sequence token (sampled, not counted in the usage).
fn decode_only_feed(v: &Value) -> f64 {
    let c = v["usage"]["completion_tokens"].as_f64().unwrap();
    let stop = v["choices"][0]["finish_reason"] == json!("stop");
    c + if stop { 1.0 } else { 0.0 }
}

#[test]
fn prefill_decode_answers_equal_one_server_and_decode_computes_one_prompt_token() {
    let (p, d, one) = (Replica::tiny(&[]), Replica::tiny(&[]), Replica::tiny(&[]));
    // Byte tokens: lengths around the 16-token block edge (L - 1 = 32 is block aligned),
    // shorter than a block, and several blocks.
    let prompts = ["Hi there", "0123456789abcdef0", &"x".repeat(33), &cluster::words(7, 12), "Once upon a time"];
    let mut n = 0.0;
    for (k, prompt) in prompts.iter().enumerate() {
        for seed in [None, Some(40 + k as i64)] {
            let body = completion(prompt, 24, seed);
            let want = answer(&one.post(&body));
            let fed0 = fed(&d);
            let r = disaggregated(&p, &d, &body);
            assert_eq!(answer(&r), want, "prompt {prompt:?} seed {seed:?}: P/D differs from one server");
            assert_eq!(fed(&d) - fed0, decode_only_feed(&r.json()), "D computed more than the last prompt token");
            n += 1.0;
        }
    }
    assert_eq!(d.metric("tl_pd_remote_prefills_total"), n);
    assert_eq!(d.metric("tl_pd_prompt_tokens_computed_total"), n);
    assert!(d.metric("tl_pd_imported_blocks_total") >= 1.0);
    // The repeated prompts found their blocks in D's own prefix cache the second time.
    assert!(d.metric("tl_pd_local_blocks_total") >= 1.0);
    assert_eq!(d.metric("tl_pd_fetch_failures_total"), 0.0);
    // P freed every lease on fetch.
    assert_eq!(p.metric("tl_pd_leases"), 0.0);
    assert_eq!(p.metric("tl_pd_leases_fetched_total"), n);
    // Gauges the engine publishes after the step that answered: the response can reach us
    // first, so wait for them (a leak still fails, after the timeout).
    wait_metric(&p, "tl_kv_blocks{state=\"in_use\"}", 0.0, Duration::from_secs(5));
    wait_metric(&d, "tl_kv_blocks{state=\"in_use\"}", 0.0, Duration::from_secs(5));
}

fn wait_metric(r: &Replica, name: &str, want: f64, within: Duration) {
    let t0 = Instant::now();
    while r.metric(name) != want {
        assert!(t0.elapsed() < within, "{name} = {} did not reach {want} within {within:?}", r.metric(name));
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_unfetched_lease_expires_and_frees_its_blocks_then_the_fetch_policy_decides() {
    let p = Replica::tiny(&["--pd-lease", "2"]);
    let fail = Replica::logged(&common::tiny(), &[]);
    let recompute = Replica::logged(&common::tiny(), &["--pd-fetch-failure", "recompute"]);
    let one = Replica::tiny(&[]);
    let body = completion(&cluster::words(3, 10), 16, Some(5));
    let r = p.post(&prefill_leg(&body));
    let kv = r.json()["kv_transfer_params"].clone();
    assert_eq!(
        kv["remote_block_ids"].as_array().map(Vec::len),
        Some(kv["tl_tokens"].as_u64().unwrap().div_ceil(16) as usize)
    );
    assert_eq!(p.metric("tl_pd_leases"), 1.0);
    // The gauge is published after the step that answered, which a loaded machine can run
    // after the response reached us: poll it, well inside the 2 s lease.
    let t0 = Instant::now();
    while p.metric("tl_kv_blocks{state=\"in_use\"}") < 1.0 && t0.elapsed() < Duration::from_millis(1500) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(p.metric("tl_kv_blocks{state=\"in_use\"}") >= 1.0, "the lease holds blocks");
    wait_metric(&p, "tl_pd_leases", 0.0, Duration::from_secs(5));
    assert_eq!(p.metric("tl_pd_leases_expired_total"), 1.0);
    assert_eq!(p.metric("tl_kv_blocks{state=\"in_use\"}"), 0.0);

    let mut b = body.clone();
    b["kv_transfer_params"] = kv;
    let r = fail.post(&b);
    assert_eq!(r.status, 502, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["error"]["code"], json!("kv_transfer_failed"));
    assert_eq!(fail.metric("tl_pd_fetch_failures_total"), 1.0);
    let r = recompute.post(&b);
    assert_eq!(answer(&r), answer(&one.post(&body)), "a recomputed answer equals one server's");
    assert_eq!(recompute.metric("tl_pd_recomputed_total"), 1.0);
    assert_eq!(recompute.metric("tl_pd_kv_fetches_total"), 0.0);
    // One log line per failed hand-off, naming the lease and the cause.
    let lease = format!(
        "lease {} on 127.0.0.1:{}",
        b["kv_transfer_params"]["remote_request_id"].as_str().unwrap(),
        p.addr.port()
    );
    assert_one_line(&fail.log(), &[&lease, "kv_lease_not_found", "answering 502"]);
    assert_one_line(&recompute.log(), &[&lease, "kv_lease_not_found", "recomputing the prompt"]);
}

/// `log` has exactly one `pd:` line, and it contains each of `parts`.
fn assert_one_line(log: &str, parts: &[&str]) {
    let lines: Vec<&str> = log.lines().filter(|l| l.starts_with("pd: ")).collect();
    assert_eq!(lines.len(), 1, "one pd: line expected in:\n{log}");
    for part in parts {
        assert!(lines[0].contains(part), "{part:?} missing from {:?}", lines[0]);
    }
}

#[test]
fn legs_that_cannot_hand_off_are_counted_and_logged_with_their_cause() {
    let (p, d, one) =
        (Replica::logged(&common::tiny(), &[]), Replica::logged(&common::tiny(), &[]), Replica::tiny(&[]));
    // A prefill leg of n = 2 choices is served without a lease: its answer names no KV.
    let mut body = completion(&cluster::words(4, 10), 8, Some(3));
    body["n"] = json!(2);
    let r = p.post(&prefill_leg(&body));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json().get("kv_transfer_params"), None);
    assert_eq!(p.metric("tl_pd_unleased_prefills_total"), 1.0);
    assert_eq!(p.metric("tl_pd_leases"), 0.0);
    assert_one_line(&p.log(), &["without a KV lease", "n = 2"]);
    // A decode leg of n = 2 choices given a lease recomputes (each choice needs its own
    // last block) and answers as one server.
    let mut single = body.clone();
    single["n"] = json!(1);
    let mut b = body.clone();
    b["kv_transfer_params"] = p.post(&prefill_leg(&single)).json()["kv_transfer_params"].clone();
    let r = d.post(&b);
    let want = one.post(&body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["choices"], want.json()["choices"]);
    assert_eq!(d.metric("tl_pd_recomputed_total"), 1.0);
    assert_eq!(d.metric("tl_pd_kv_fetches_total"), 0.0);
    assert_one_line(&d.log(), &["not used", "n = 2 choices", "recomputing the prompt"]);
    // D freed the unused lease (in the background) rather than leaving it to expire.
    wait_metric(&p, "tl_pd_leases", 0.0, Duration::from_secs(5));
    assert_eq!(p.metric("tl_pd_leases_fetched_total"), 1.0);
    assert_eq!(p.metric("tl_pd_leases_expired_total"), 0.0);
}

#[test]
fn a_prefill_server_killed_before_the_fetch_gives_the_configured_behaviour() {
    let mut p = Replica::tiny(&[]);
    let fail = Replica::tiny(&[]);
    let recompute = Replica::tiny(&["--pd-fetch-failure", "recompute"]);
    let body = completion("The prefill server is gone", 20, Some(9));
    let want = answer(&fail.post(&body)); // one server's answer
    let r = p.post(&prefill_leg(&body));
    let mut b = body.clone();
    b["kv_transfer_params"] = r.json()["kv_transfer_params"].clone();
    p.kill();
    let r = fail.post(&b);
    assert_eq!(r.status, 502, "{}", String::from_utf8_lossy(&r.body));
    let r = recompute.post(&b);
    assert_eq!(answer(&r), want);
    assert_eq!(recompute.metric("tl_pd_fetch_failures_total"), 1.0);
}

#[test]
fn the_kv_route_checks_the_key_and_the_decode_side_checks_the_fingerprint() {
    let key = [("Authorization", "Bearer k3y")];
    let p = Replica::tiny(&["--api-key", "k3y"]);
    let d = Replica::tiny(&["--api-key", "k3y"]);
    let body = completion("Keyed prefill", 12, Some(2));
    let want = answer(&common::request(d.addr, "POST", "/v1/completions", body.to_string().as_bytes(), &key));
    let post =
        |r: &Replica, b: &Value| common::request(r.addr, "POST", "/v1/completions", b.to_string().as_bytes(), &key);

    // The KV route is a /v1 route: no key, no KV (and the lease stays).
    let kv = post(&p, &prefill_leg(&body)).json()["kv_transfer_params"].clone();
    let id = kv["remote_request_id"].as_str().unwrap().to_string();
    assert_eq!(common::request(p.addr, "GET", &format!("/v1/kv/{id}"), b"", &[]).status, 401);
    assert_eq!(p.metric("tl_pd_leases"), 1.0);
    // With the same key on both sides the hand-off works.
    let mut b = body.clone();
    b["kv_transfer_params"] = kv;
    assert_eq!(answer(&post(&d, &b)), want);
    assert_eq!(p.metric("tl_pd_leases"), 0.0);
    // A lease is fetched once.
    assert_eq!(common::request(p.addr, "GET", &format!("/v1/kv/{id}"), b"", &key).status, 404);

    // Another model's (or version's) KV is refused before any fetch.
    let mut kv = post(&p, &prefill_leg(&body)).json()["kv_transfer_params"].clone();
    let fingerprint = kv["tl_fingerprint"].clone();
    kv["tl_fingerprint"] = json!("fp_0000000000000000");
    let mut b = body.clone();
    b["kv_transfer_params"] = kv.clone();
    let r = post(&d, &b);
    assert_eq!(r.status, 502);
    assert!(String::from_utf8_lossy(&r.body).contains("fingerprint"), "{}", String::from_utf8_lossy(&r.body));
    kv["tl_fingerprint"] = fingerprint;
    kv["tl_kv_version"] = json!(99);
    b["kv_transfer_params"] = kv;
    let r = post(&d, &b);
    assert_eq!(r.status, 502);
    assert!(String::from_utf8_lossy(&r.body).contains("version"), "{}", String::from_utf8_lossy(&r.body));
}

#[test]
fn smollm2_prefill_decode_equals_one_server() {
    let Some(model) = common::smollm2() else { return };
    let (p, d, one) = (Replica::spawn(&model, &[]), Replica::spawn(&model, &[]), Replica::spawn(&model, &[]));
    let prompt = "The three primary colours are red, yellow and blue. Mixing red and yellow gives";
    for seed in [None, Some(11)] {
        let body = completion(prompt, 8, seed);
        let want = answer(&one.post(&body));
        let fed0 = fed(&d);
        let r = disaggregated(&p, &d, &body);
        assert_eq!(answer(&r), want, "seed {seed:?}");
        assert_eq!(fed(&d) - fed0, decode_only_feed(&r.json()));
    }
    assert_eq!(p.metric("tl_pd_leases"), 0.0);
    assert!(d.metric("tl_pd_imported_blocks_total") >= 1.0);
}

#[test]
fn the_advertised_host_is_the_one_the_decode_server_fetches_from() {
    let p = Replica::tiny(&["--advertise-host", "localhost"]);
    let d = Replica::tiny(&[]);
    let body = completion("Advertised", 8, None);
    let kv = p.post(&prefill_leg(&body)).json()["kv_transfer_params"].clone();
    assert_eq!(kv["remote_host"], json!("localhost"));
    assert_eq!(kv["remote_port"], json!(p.addr.port()));
    let mut b = body.clone();
    b["kv_transfer_params"] = kv;
    assert_eq!(answer(&d.post(&b)), answer(&p.post(&body)));
    assert_eq!(p.metric("tl_pd_leases_fetched_total"), 1.0);
}

#[test]
fn a_streamed_decode_leg_streams_the_one_server_text() {
    let (p, d, one) = (Replica::tiny(&[]), Replica::tiny(&[]), Replica::tiny(&[]));
    let body = completion(&cluster::words(9, 8), 30, Some(21));
    let want = answer(&one.post(&body))["text"].clone();
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r = disaggregated(&p, &d, &streamed); // the prefill leg is made non-streaming
    assert_eq!(r.status, 200);
    let mut text = String::new();
    for e in r.events() {
        if e == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(&e).expect("event");
        text.push_str(v["choices"][0]["text"].as_str().expect("text"));
    }
    assert_eq!(json!(text), want);
    assert_eq!(d.metric("tl_pd_prompt_tokens_computed_total"), 1.0);
    assert_eq!(p.metric("tl_pd_leases"), 0.0);
}
