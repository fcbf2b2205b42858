//! Replicas behind vllm-router (PyPI, installed by scripts/scale_tools.sh), with the
//! command lines docs/scale-out.md shows: round robin spreads, `consistent_hash` keeps
//! an `X-Session-ID` on one replica, `cache_aware` sends shared-prefix requests to the
//! replica that has the prefix (its prefix-cache hits rise, the others' do not), retries
//! carry a killed replica's requests to the others with answers equal to one server's,
//! and `--vllm-pd-disaggregation` drives tl's prefill and decode roles (1 + 1, then
//! 1 + 2) to answers bit-identical to one server.

mod cluster;
mod common;

use cluster::*;
use serde_json::{json, Value};

fn workers(rs: &[&Replica]) -> Vec<String> {
    let mut v = vec!["--worker-urls".to_string()];
    v.extend(rs.iter().map(|r| r.url()));
    v
}

fn args(extra: &[&str]) -> Vec<String> {
    extra.iter().map(|s| s.to_string()).collect()
}

#[test]
fn round_robin_spreads_and_consistent_hash_keeps_a_session_on_one_replica() {
    let rs = [Replica::tiny(&[]), Replica::tiny(&[]), Replica::tiny(&[])];
    let refs: Vec<&Replica> = rs.iter().collect();
    let rr = vllm_router(&[workers(&refs), args(&["--policy", "round_robin"])].concat());
    let before = counts(&refs);
    for i in 0..9 {
        let r = post_via(rr.addr, &completion(&format!("Spread {i}:"), 4, Some(i)), &[]);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }
    let d = deltas(&refs, &before);
    assert_eq!(d.iter().sum::<f64>(), 9.0, "{d:?}");
    assert!(d.iter().all(|&x| x >= 2.0), "round robin left a replica idle: {d:?}");
    drop(rr);

    let ch = vllm_router(&[workers(&refs), args(&["--policy", "consistent_hash"])].concat());
    for s in 0..4 {
        let before = counts(&refs);
        let sid = format!("session-{s}");
        for i in 0..3 {
            let r =
                post_via(ch.addr, &completion(&format!("Turn {i} of {sid}:"), 4, Some(i)), &[("X-Session-ID", &sid)]);
            assert_eq!(r.status, 200);
        }
        let d = deltas(&refs, &before);
        assert_eq!(d.iter().filter(|&&x| x > 0.0).count(), 1, "session {sid} spread over {d:?}");
        assert_eq!(d.iter().sum::<f64>(), 3.0);
    }
}

#[test]
fn cache_aware_sends_shared_prefix_requests_to_the_replica_that_has_them() {
    let rs = [Replica::tiny(&[]), Replica::tiny(&[]), Replica::tiny(&[])];
    let refs: Vec<&Replica> = rs.iter().collect();
    let router = vllm_router(&[workers(&refs), args(&["--policy", "cache_aware"])].concat());
    assert_shared_prefixes_stay_home(router.addr, &refs, 100);
}

#[test]
fn retries_carry_a_killed_replicas_requests_with_equal_answers() {
    let mut rs = vec![Replica::tiny(&[]), Replica::tiny(&[]), Replica::tiny(&[])];
    let jobs: Vec<serde_json::Value> =
        (0..24).map(|i| completion(&format!("Job {i} says"), 40, Some(2000 + i))).collect();
    let want: Vec<serde_json::Value> = jobs.iter().map(|b| answer(&rs[0].post(b))).collect();
    let refs: Vec<&Replica> = rs.iter().collect();
    // Round robin over three workers sends a retry back to the killed one a third of the
    // time until its circuit opens; with the router's default retry count a job was lost
    // to that once (CI, 2026-12-06): 12 tries leave ~(1/3)^11 per job.
    let router = vllm_router(
        &[
            workers(&refs),
            args(&["--policy", "round_robin", "--retry-initial-backoff-ms", "20", "--retry-max-retries", "12"]),
        ]
        .concat(),
    );
    drop(refs);
    assert_kill_mid_load_loses_nothing(&mut rs, 2, router.addr, &jobs, &want);
}

/// P/D behind `vllm-router --vllm-pd-disaggregation --kv-connector nixl`.
fn pd_router(prefill: &[&Replica], decode: &[&Replica]) -> Router {
    let mut a = args(&["--vllm-pd-disaggregation", "--kv-connector", "nixl", "--policy", "round_robin"]);
    for p in prefill {
        a.extend(["--prefill".to_string(), p.url()]);
    }
    for d in decode {
        a.extend(["--decode".to_string(), d.url()]);
    }
    vllm_router(&a)
}

fn check_pd(router: &Router, one: &Replica, prompts: &[String]) -> usize {
    let mut n = 0;
    for (k, prompt) in prompts.iter().enumerate() {
        for seed in [None, Some(70 + k as i64)] {
            let body = completion(prompt, 16, seed);
            let want = answer(&one.post(&body));
            let got = answer(&post_via(router.addr, &body, &[]));
            assert_eq!(got, want, "prompt {prompt:?} seed {seed:?}: P/D through vllm-router differs from one server");
            n += 1;
        }
    }
    n
}

#[test]
fn pd_behind_vllm_router_one_prefill_then_two_decodes_equals_one_server() {
    let (p, d1, d2, one) = (Replica::tiny(&[]), Replica::tiny(&[]), Replica::tiny(&[]), Replica::tiny(&[]));
    let prompts: Vec<String> = (0..3).map(|k| words(300 + k, 6 + 5 * k as usize)).collect();

    let router = pd_router(&[&p], &[&d1]);
    let n = check_pd(&router, &one, &prompts) as f64;
    assert_eq!(d1.metric("tl_pd_remote_prefills_total"), n);
    assert_eq!(d1.metric("tl_pd_prompt_tokens_computed_total"), n, "one prompt token computed per request");
    assert!(d1.metric("tl_pd_imported_blocks_total") >= 1.0);
    assert_eq!(p.metric("tl_pd_leases_fetched_total"), n);
    assert_eq!(p.metric("tl_pd_leases"), 0.0);
    assert_eq!(p.metric("tl_kv_blocks{state=\"in_use\"}"), 0.0);
    drop(router);

    let router = pd_router(&[&p], &[&d1, &d2]);
    let before = (d1.metric("tl_pd_remote_prefills_total"), d2.metric("tl_pd_remote_prefills_total"));
    let m = check_pd(&router, &one, &prompts) as f64;
    let after = (d1.metric("tl_pd_remote_prefills_total"), d2.metric("tl_pd_remote_prefills_total"));
    assert_eq!(after.0 - before.0 + after.1 - before.1, m);
    assert!(after.0 > before.0 && after.1 > before.1, "both decode servers took requests: {before:?} {after:?}");
    assert_eq!(p.metric("tl_pd_leases"), 0.0);
    assert_eq!(d2.metric("tl_pd_fetch_failures_total"), 0.0);
}

#[test]
fn smollm2_pd_behind_vllm_router_equals_one_server() {
    let Some(model) = common::smollm2() else { return };
    let (p, d, one) = (Replica::spawn(&model, &[]), Replica::spawn(&model, &[]), Replica::spawn(&model, &[]));
    let router = pd_router(&[&p], &[&d]);
    let prompt = "Question: what is the capital of France? Answer:".to_string();
    let n = check_pd(&router, &one, &[prompt]) as f64;
    assert_eq!(d.metric("tl_pd_prompt_tokens_computed_total"), n);
    assert_eq!(p.metric("tl_pd_leases"), 0.0);
}

/// The raw text of every `"logprob":` number in an answer, in order (the bytes a client
/// parses: comparing them as text is comparing the f64 values bit for bit).
fn logprob_texts(body: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(body);
    text.split("\"logprob\":")
        .skip(1)
        .map(|rest| rest.chars().take_while(|c| c.is_ascii_digit() || "+-.eE".contains(*c)).collect())
        .collect()
}

/// Whether a JSON number survives a parser that rounds `significand as f64` and then
/// scales by an exact power of ten (serde_json's default, vllm-router's): one correct
/// rounding, so exact, when the decimal significand fits in 53 bits and the power of ten
/// is at most 10^22. Shortest round-trip output of an f64 needs up to 17 digits, and a
/// 17-digit significand does not fit: those may come back one ulp off.
fn survives(num: &str) -> bool {
    let num = num.trim_start_matches('-');
    let (mantissa, exp) = num.split_once(['e', 'E']).map_or((num, 0), |(m, e)| (m, e.parse::<i32>().expect("exp")));
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{int}{frac}");
    let scale = exp - frac.len() as i32;
    digits.trim_start_matches('0').parse::<u64>().map_or(digits.trim_matches('0').is_empty(), |m| m <= 1 << 53)
        && (-22..=22).contains(&scale)
}

/// The answer with every `logprob` value removed (compared as text, separately).
fn without_logprobs(mut v: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("logprob");
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}

/// Issue 35's setup exactly: docs/scale-out.md's P/D command lines (two `serve --threads 1`
/// with default settings, `vllm-router --vllm-pd-disaggregation --prefill P --decode D
/// --kv-connector nixl --prometheus-port N`, no policy), one seeded chat request with
/// logprobs and a system prompt of several KV blocks. Taps between the router and each
/// server record what the servers themselves answered.
#[test]
fn smollm2_pd_chat_through_vllm_router_hands_off_the_kv_and_equals_one_server() {
    let Some(model) = common::smollm2() else { return };
    let (p, d, one) = (Replica::logged(&model, &[]), Replica::logged(&model, &[]), Replica::logged(&model, &[]));
    let (tp, td) = (tap::Tap::new(p.addr), tap::Tap::new(d.addr));
    let router = vllm_router(&args(&[
        "--vllm-pd-disaggregation",
        "--prefill",
        &tp.url(),
        "--decode",
        &td.url(),
        "--kv-connector",
        "nixl",
    ]));
    let body = json!({"seed": 7, "temperature": 0.8, "max_tokens": 24, "logprobs": true, "top_logprobs": 2,
        "messages": [{"role": "system", "content": "You are a helpful assistant. ".repeat(12)},
                     {"role": "user", "content": "Write one sentence about the sea."}]});
    let chat = |addr| common::request(addr, "POST", "/v1/chat/completions", body.to_string().as_bytes(), &[]);
    let want = chat(one.addr);
    assert_eq!(want.status, 200, "{}", String::from_utf8_lossy(&want.body));
    let fed0 = d.metric("tl_step_tokens_sum");
    let got = chat(router.addr);
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    let (want_v, got_v) = (want.json(), got.json());
    let prompt = want_v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt > 2 * 16, "the system prompt spans several KV blocks: {prompt} tokens");

    // The decode server's own answer, before the router touched it.
    let legs = td.exchanges("POST /v1/chat/completions");
    assert_eq!(legs.len(), 1, "one decode leg");
    let dv = legs[0].response_json();
    assert_eq!(legs[0].request_json()["kv_transfer_params"]["do_remote_prefill"], json!(true));
    // The hand-off happened: D took every prompt position but the last from P's KV and
    // says so in cached_tokens (as vLLM counts KV loaded through a connector).
    let cached = dv["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
    assert_eq!(cached, Some(prompt - 1), "decode-side cached_tokens: {}", dv["usage"]);
    assert_eq!(d.metric("tl_pd_kv_fetches_total"), 1.0);
    assert_eq!(d.metric("tl_pd_preloaded_tokens_total"), (prompt - 1) as f64);
    assert_eq!(d.metric("tl_pd_imported_blocks_total"), (prompt - 1).div_ceil(16) as f64, "fetched blocks");
    assert_eq!(d.metric("tl_pd_prompt_tokens_computed_total"), 1.0, "D prefilled one token");
    assert_eq!(d.metric("tl_pd_recomputed_total"), 0.0);
    assert_eq!(d.metric("tl_pd_fetch_failures_total"), 0.0);
    assert_eq!(d.metric("tl_prefix_cache_hit_tokens_total"), 0.0, "received positions are no prefix-cache hits");
    let completion = got_v["usage"]["completion_tokens"].as_f64().unwrap();
    let stop = if got_v["choices"][0]["finish_reason"] == json!("stop") { 1.0 } else { 0.0 };
    assert_eq!(d.metric("tl_step_tokens_sum") - fed0, completion + stop, "D's forward: the last prompt token + decode");
    assert_eq!(p.metric("tl_pd_leases_fetched_total"), 1.0);
    assert_eq!(p.metric("tl_pd_unleased_prefills_total"), 0.0);
    assert_eq!(p.metric("tl_pd_leases"), 0.0);
    assert!(!d.log().contains("pd:") && !p.log().contains("pd:"), "no fallback: {}{}", p.log(), d.log());
    // Through the router, cached_tokens is the prefill server's (vllm-router's end-to-end
    // accounting: it copies P's prompt_tokens_details over D's; docs/scale-out.md).
    let pv = tp.exchanges("POST /v1/chat/completions")[0].response_json();
    assert_eq!(got_v["usage"]["prompt_tokens_details"], pv["usage"]["prompt_tokens_details"]);

    // tl's answers are bit-identical: D's own logprob bytes equal one server's.
    let (one_lp, d_lp, r_lp) = (logprob_texts(&want.body), logprob_texts(&legs[0].response), logprob_texts(&got.body));
    assert_eq!(one_lp.len(), 24 * 3, "24 tokens, each with 2 top logprobs");
    assert_eq!(d_lp, one_lp, "the decode server's own logprobs differ from one server's");
    assert_eq!(without_logprobs(dv["choices"].clone()), without_logprobs(want_v["choices"].clone()));
    // Through the router: everything but the logprobs is equal; a logprob is equal when
    // its decimal survives the router's float parser, else at most one ulp off.
    assert_eq!(without_logprobs(got_v["choices"].clone()), without_logprobs(want_v["choices"].clone()));
    let mut exact = 0;
    for (w, g) in one_lp.iter().zip(&r_lp) {
        if survives(w) {
            assert_eq!(g, w, "a logprob the router's parser keeps exactly changed");
            exact += 1;
        } else {
            let (a, b) = (w.parse::<f64>().unwrap(), g.parse::<f64>().unwrap());
            assert!(a.to_bits().abs_diff(b.to_bits()) <= 1, "{w} came back as {g}: more than one ulp");
        }
    }
    assert!(exact >= one_lp.len() / 4, "only {exact} of {} logprobs compared exactly", one_lp.len());
}
