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
    let router =
        vllm_router(&[workers(&refs), args(&["--policy", "round_robin", "--retry-initial-backoff-ms", "20"])].concat());
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
