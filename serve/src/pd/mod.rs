//! Disaggregated prefill/decode over vLLM's `kv_transfer_params` (docs/scale-out.md).
//!
//! The wire protocol is the one vllm-router (`--vllm-pd-disaggregation --kv-connector
//! nixl`), llm-d's P/D sidecar and vLLM's toy proxy drive: the orchestrator sends the
//! prefill server the request with `max_tokens = 1`, `stream = false` and
//! `kv_transfer_params = {"do_remote_decode": true}`; the prefill server answers with
//! top-level `kv_transfer_params` naming its KV; the orchestrator copies them verbatim
//! into the original request and sends that to the decode server. Where NIXL reads GPU
//! memory, a tl decode server fetches the blocks it lacks over HTTP from
//! `GET /v1/kv/{remote_request_id}` on the prefill server (behind the same API key),
//! which answers with the KV envelope (docs/formats/kv-block.md) and releases the lease.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::{json, Value};
use tl_engine::{Request, UnboundedReceiver};

use crate::error::ApiError;
use crate::http::counted;
use crate::options::FetchFailure;
use crate::state::AppState;

/// The envelope version this server writes and reads.
const KV_VERSION: u32 = tl_kv::ENVELOPE_VERSION;

/// What the answer of a P/D request adds.
pub(crate) enum Outcome {
    /// Not a P/D request.
    None,
    /// A prefill: name the lease in the answer.
    Prefill(String),
}

/// The fields of `kv_transfer_params` this server reads (others are ignored).
#[derive(Deserialize, Debug, Default)]
struct Params {
    #[serde(default)]
    do_remote_decode: Option<bool>,
    #[serde(default)]
    do_remote_prefill: Option<bool>,
    remote_request_id: Option<String>,
    remote_host: Option<String>,
    remote_port: Option<u16>,
    tl_kv_version: Option<u32>,
    tl_fingerprint: Option<String>,
}

/// Submit `reqs` as the request's `kv_transfer_params` say: a prefill holds its KV, a
/// decode fetches and imports it first, anything else is an ordinary submit.
pub(crate) async fn submit(
    st: &Arc<AppState>,
    params: &Value,
    stream: bool,
    mut reqs: Vec<Request>,
) -> Result<(Vec<UnboundedReceiver<tl_engine::Event>>, Outcome), ApiError> {
    let p: Params = match params {
        Value::Null => Params::default(),
        v => serde_json::from_value(v.clone())
            .map_err(|e| ApiError::bad("kv_transfer_params", format!("kv_transfer_params: {e}")))?,
    };
    let single = reqs.len() == 1;
    if p.do_remote_decode == Some(true) {
        if single && !stream {
            let id = format!("{:016x}{:016x}", crate::api::random_seed(), crate::api::random_seed());
            let req = reqs.pop().ok_or_else(|| ApiError::bad("n", "no choice"))?;
            let rx = st.engine.submit_held(req, id.clone(), st.scale.pd_lease)?;
            return Ok((vec![rx], Outcome::Prefill(id)));
        }
        // Served as an ordinary request: the answer names no KV, so the decode leg will
        // prefill the whole prompt. Nothing else would tell the operator why.
        let cause = if stream { "the prefill leg streams".to_string() } else { format!("n = {}", reqs.len()) };
        unleased(st, &cause);
    }
    if p.do_remote_prefill == Some(true) {
        st.pd.remote_prefills.fetch_add(1, Ordering::Relaxed);
        let origin = Origin(&p);
        if !single {
            // Each choice needs its own last block: the prefix cache path serves them.
            recompute(st, &origin, &format!("n = {} choices, a hand-off serves one", reqs.len()));
            release_remote(st, &p);
            return Ok((st.engine.submit_all(reqs)?, Outcome::None));
        }
        let req = reqs.pop().ok_or_else(|| ApiError::bad("n", "no choice"))?;
        match decode(st, &p, &req).await {
            Ok(preload) => {
                let computed = req.prompt.len() - 1;
                st.pd.kv_fetches.fetch_add(1, Ordering::Relaxed);
                st.pd.preloaded_tokens.fetch_add(computed, Ordering::Relaxed);
                st.pd.local_blocks.fetch_add(preload.n_local(), Ordering::Relaxed);
                st.pd.imported_blocks.fetch_add(preload.n_blocks() - preload.n_local(), Ordering::Relaxed);
                st.pd.computed_tokens.fetch_add(req.prompt.len() - computed, Ordering::Relaxed);
                return Ok((vec![st.engine.submit_preloaded(req, preload)?], Outcome::None));
            }
            Err(e) => {
                st.pd.fetch_failed.fetch_add(1, Ordering::Relaxed);
                if st.scale.pd_fetch_failure == FetchFailure::Fail {
                    eprintln!("pd: hand-off of {origin} failed: {e}; answering 502 (--pd-fetch-failure fail)");
                    return Err(ApiError::new(
                        StatusCode::BAD_GATEWAY,
                        "server_error",
                        "kv_transfer_failed",
                        format!("fetching the prefill's KV failed: {e}"),
                    ));
                }
                recompute(st, &origin, &e);
                st.pd.computed_tokens.fetch_add(req.prompt.len(), Ordering::Relaxed);
                reqs.push(req);
            }
        }
    }
    Ok((st.engine.submit_all(reqs)?, Outcome::None))
}

/// Where a decode request's KV was to come from, for the log lines.
struct Origin<'a>(&'a Params);

impl std::fmt::Display for Origin<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = self.0;
        let (id, host) = (p.remote_request_id.as_deref().unwrap_or("?"), p.remote_host.as_deref().unwrap_or("?"));
        write!(f, "lease {id} on {host}:{}", p.remote_port.map_or("?".into(), |n| n.to_string()))
    }
}

/// A decode request that prefills the prompt itself: counted, and one log line with
/// the cause (the answer is the same, only slower, so nothing else would show it).
fn recompute(st: &AppState, origin: &Origin, cause: &str) {
    st.pd.recomputed.fetch_add(1, Ordering::Relaxed);
    eprintln!("pd: hand-off of {origin} not used: {cause}; recomputing the prompt");
}

/// A prefill leg answered without a lease: counted, and one log line with the cause.
fn unleased(st: &AppState, cause: &str) {
    st.pd.unleased_prefills.fetch_add(1, Ordering::Relaxed);
    eprintln!("pd: prefill leg answered without a KV lease: {cause}; its decode leg will recompute the prompt");
}

/// Free the prefill's lease without taking a block (an empty range), as a hand-off's
/// fetch would have; else its blocks stay held until `--pd-lease` runs out. In the
/// background: the answer does not depend on it.
fn release_remote(st: &Arc<AppState>, p: &Params) {
    let (Some(id), Some(host), Some(port)) = (p.remote_request_id.clone(), p.remote_host.clone(), p.remote_port) else {
        return;
    };
    let st = Arc::clone(st);
    tokio::spawn(async move {
        let path = format!("/v1/kv/{id}?from=0&to=0");
        let r = tokio::time::timeout(st.scale.pd_fetch_timeout, fetch(&st, &host, port, &path)).await;
        if let Err(e) = r.map_err(|_| "timed out".to_string()).and_then(|r| r) {
            eprintln!("pd: releasing lease {id} on {host}:{port} failed: {e}; it expires after --pd-lease");
        }
    });
}

/// The decode side: hold the local prefix hits, fetch the rest from the prefill server,
/// check and import it.
async fn decode(st: &Arc<AppState>, p: &Params, req: &Request) -> Result<tl_engine::Preload, String> {
    if p.tl_kv_version.is_some_and(|v| v != KV_VERSION) {
        return Err(format!("KV envelope version {:?}, this server reads {KV_VERSION}", p.tl_kv_version));
    }
    match &p.tl_fingerprint {
        Some(f) if *f == st.fingerprint => {}
        f => return Err(format!("model fingerprint {f:?} differs from this server's {:?}", st.fingerprint)),
    }
    let (Some(id), Some(host), Some(port)) = (&p.remote_request_id, &p.remote_host, p.remote_port) else {
        return Err("kv_transfer_params lacks remote_request_id, remote_host or remote_port".into());
    };
    let mut preload = st.engine.hold_prefix_for(&req.prompt, req.adapter.as_ref()).map_err(|e| e.to_string())?;
    let need = preload.needed(req.prompt.len());
    // Even with every block local the fetch goes out (for no blocks): it frees the lease.
    let path = format!("/v1/kv/{id}?from={}&to={need}", preload.n_blocks());
    let bytes = tokio::time::timeout(st.scale.pd_fetch_timeout, fetch(st, host, port, &path))
        .await
        .map_err(|_| format!("GET {path} on {host}:{port} took over {:?}", st.scale.pd_fetch_timeout))??;
    st.engine.import_into(&mut preload, &req.prompt, &bytes).map_err(|e| e.to_string())?;
    Ok(preload)
}

/// GET `path` on the prefill server with this server's API key; the body when 200 and
/// its fingerprint header matches ours.
async fn fetch(st: &AppState, host: &str, port: u16, path: &str) -> Result<Bytes, String> {
    let stream =
        tokio::net::TcpStream::connect((host, port)).await.map_err(|e| format!("connect {host}:{port}: {e}"))?;
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(conn);
    let mut req = hyper::Request::get(path).header(header::HOST, format!("{host}:{port}"));
    if let Some(k) = &st.api_key {
        req = req.header(header::AUTHORIZATION, [b"Bearer ".as_slice(), k].concat());
    }
    let req = req.body(http_body_util::Empty::<Bytes>::new()).map_err(|e| e.to_string())?;
    let resp = send.send_request(req).await.map_err(|e| format!("GET {path}: {e}"))?;
    let status = resp.status();
    let theirs = resp.headers().get("x-tl-fingerprint").and_then(|v| v.to_str().ok()).map(str::to_string);
    let body = resp.into_body().collect().await.map_err(|e| format!("GET {path}: {e}"))?.to_bytes();
    if status != StatusCode::OK {
        return Err(format!("GET {path}: {status}: {}", String::from_utf8_lossy(&body)));
    }
    if theirs.as_deref() != Some(st.fingerprint.as_str()) {
        return Err(format!("the prefill server's fingerprint {theirs:?} differs from {:?}", st.fingerprint));
    }
    Ok(body)
}

/// Add the prefill's `kv_transfer_params` to its answer (vLLM's NIXL connector fields,
/// plus the envelope version, the fingerprint and the block size).
pub(crate) fn annotate(st: &AppState, outcome: &Outcome, body: &mut Value) {
    let Outcome::Prefill(id) = outcome else { return };
    let Some(lease) = st.engine.lease(id) else {
        // Expired (`--pd-lease`) before the prefill even answered.
        unleased(st, &format!("lease {id} expired before the answer (--pd-lease)"));
        return;
    };
    let (host, port) = st.pd.addr.get().cloned().unwrap_or_else(|| ("127.0.0.1".into(), 0));
    body["kv_transfer_params"] = json!({
        "do_remote_prefill": true,
        "do_remote_decode": false,
        "remote_engine_id": st.pd.engine_id,
        "remote_request_id": id,
        "remote_block_ids": lease.blocks,
        "remote_host": host,
        "remote_port": port,
        "tp_size": 1,
        "tl_kv_version": KV_VERSION,
        "tl_fingerprint": st.fingerprint,
        "tl_block_tokens": st.engine.info().block_tokens,
        "tl_tokens": lease.tokens,
    });
}

/// `?from=&to=` of the KV route.
#[derive(Deserialize)]
pub(crate) struct Range {
    #[serde(default)]
    from: usize,
    to: Option<usize>,
}

/// GET /v1/kv/{id}: blocks `from..to` of a lease as a KV envelope; the lease is released.
pub(crate) async fn kv(State(st): State<Arc<AppState>>, Path(id): Path<String>, Query(r): Query<Range>) -> Response {
    let out = match st.engine.take_lease(&id, r.from, r.to) {
        Ok(buf) => {
            let mut resp = Response::new(Body::from(buf));
            let h = resp.headers_mut();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
            if let Ok(v) = HeaderValue::from_str(&st.fingerprint) {
                h.insert("x-tl-fingerprint", v);
            }
            h.insert("x-tl-kv-version", HeaderValue::from(KV_VERSION));
            Ok(resp)
        }
        Err(e @ tl_engine::PdError::UnknownLease { .. }) => {
            Err(ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", "kv_lease_not_found", e.to_string()))
        }
        Err(e @ tl_engine::PdError::Range { .. }) => Err(ApiError::bad("from", e.to_string())),
        Err(e) => {
            Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "internal_error", e.to_string()))
        }
    };
    counted(&st, "/v1/kv", out)
}

/// The P/D lines of /metrics.
pub(crate) fn metrics_text(st: &AppState, text: &mut String) {
    let l = st.engine.lease_counts();
    let pd = &st.pd;
    let n = |a: &AtomicUsize| a.load(Ordering::Relaxed);
    let rows: [(&str, &str, &str, usize); 13] = [
        ("tl_pd_leases", "gauge", "Prefill KV leases waiting for a fetch", l.held),
        ("tl_pd_lease_blocks", "gauge", "KV blocks held by prefill leases", l.held_blocks),
        ("tl_pd_leases_fetched", "counter", "Prefill leases released by a fetch", l.fetched),
        ("tl_pd_leases_expired", "counter", "Prefill leases released unfetched", l.expired),
        ("tl_pd_unleased_prefills", "counter", "Prefill legs answered without a KV lease", n(&pd.unleased_prefills)),
        ("tl_pd_remote_prefills", "counter", "Decode requests with do_remote_prefill", n(&pd.remote_prefills)),
        ("tl_pd_kv_fetches", "counter", "Hand-offs: KV fetched from a prefill server and imported", n(&pd.kv_fetches)),
        (
            "tl_pd_preloaded_tokens",
            "counter",
            "Prompt positions hand-offs started with (their cached_tokens)",
            n(&pd.preloaded_tokens),
        ),
        ("tl_pd_imported_blocks", "counter", "KV blocks imported from prefill servers", n(&pd.imported_blocks)),
        ("tl_pd_local_blocks", "counter", "Prompt blocks a decode found in its prefix cache", n(&pd.local_blocks)),
        (
            "tl_pd_prompt_tokens_computed",
            "counter",
            "Prompt tokens decode requests computed themselves",
            n(&pd.computed_tokens),
        ),
        ("tl_pd_fetch_failures", "counter", "KV fetches that failed or were refused", n(&pd.fetch_failed)),
        (
            "tl_pd_recomputed",
            "counter",
            "Decode requests that prefilled the prompt themselves (failed fetch, n > 1)",
            n(&pd.recomputed),
        ),
    ];
    for (name, kind, help, v) in rows {
        let suffix = if kind == "counter" { "_total" } else { "" };
        let _ = write!(text, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{suffix} {v}\n");
    }
}
