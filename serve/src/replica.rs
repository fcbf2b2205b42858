//! What a router needs from one replica (docs/scale-out.md): readiness on `/health`
//! (503 while the model loads and while draining after SIGTERM), `GET /load` (vLLM's
//! in-flight request count), and vLLM's gauge names beside tl's own on `/metrics`, so
//! vllm-router, HAProxy and the Gateway API Inference Extension's endpoint picker can
//! use a tl server as they use a vLLM one.

use std::fmt::Write as _;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, HttpBody as _};
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use hyper_util::rt::TokioIo;
use serde_json::json;

use crate::http::{counted, St};
pub use crate::options::{FetchFailure, ScaleOptions};
use crate::state::AppState;
pub use crate::state::Load;

struct LoadGuard(Arc<AppState>);

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.0.load.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Middleware: count the completion routes in [`Load`] for as long as their bodies live.
pub(crate) async fn track_load(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if path != "/v1/completions" && path != "/v1/chat/completions" {
        return next.run(req).await;
    }
    st.load.0.fetch_add(1, Ordering::Relaxed);
    let guard = LoadGuard(Arc::clone(&st));
    let r = next.run(req).await;
    if r.body().size_hint().exact().is_some() {
        return r; // a whole JSON answer: done once it is handed to hyper (guard drops here)
    }
    let (parts, body) = r.into_parts();
    let body = body.into_data_stream().map(move |chunk| {
        let _held = &guard; // moved in: dropped with the stream, after the last byte
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}

/// GET /load: `{"server_load": n}`, as vLLM's `--enable-server-load-tracking` route
/// (vllm-router's `power_of_two` polls it).
pub(crate) async fn load(State(st): State<Arc<AppState>>) -> Response {
    let n = st.load.0.load(Ordering::Relaxed);
    counted(&st, "/load", Ok(axum::Json(json!({ "server_load": n })).into_response()))
}

/// GET /health: 200 while the model is loaded and requests are accepted; 503 once a
/// shutdown began (the drain). While loading, [`while_loading`] answers 503 instead.
pub(crate) async fn health(State(st): State<Arc<AppState>>) -> Response {
    let r = if st.engine.accepting() {
        axum::Json(json!({"status": "ok"})).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({"status": "draining"}))).into_response()
    };
    counted(&st, "/health", Ok(r))
}

/// The vLLM-named gauges (GAIE model-server protocol) and the P/D figures, appended to
/// tl's exposition before its `# EOF`. Everything is read from atomics the engine thread
/// publishes: no pool lock, O(1), fit for a 50 ms scrape.
pub(crate) fn metrics_text(st: &AppState, mut text: String, stats: &tl_engine::Stats) -> String {
    let eof = text.rfind("# EOF").unwrap_or(text.len());
    let tail = text.split_off(eof);
    let total = stats.kv_blocks_total.max(1) as f64;
    let usage = stats.kv_blocks_in_use as f64 / total;
    let info = st.engine.info();
    let mut g = |name: &str, kind: &str, help: &str, line: String| {
        let _ = write!(text, "# HELP {name} {help}\n# TYPE {name} {kind}\n{line}\n");
    };
    g(
        "vllm:num_requests_waiting",
        "gauge",
        "Sequences waiting for admission (tl_queue_depth)",
        format!("vllm:num_requests_waiting {}", stats.waiting),
    );
    g(
        "vllm:num_requests_running",
        "gauge",
        "Sequences admitted (tl_running_sequences)",
        format!("vllm:num_requests_running {}", stats.running),
    );
    g(
        "vllm:kv_cache_usage_perc",
        "gauge",
        "KV blocks in use over all blocks, 0 to 1",
        format!("vllm:kv_cache_usage_perc {usage}"),
    );
    g(
        "vllm:cache_config_info",
        "gauge",
        "KV cache geometry",
        format!(
            "vllm:cache_config_info{{block_size=\"{}\",num_gpu_blocks=\"{}\"}} 1",
            info.block_tokens, info.n_blocks
        ),
    );
    g(
        "vllm:prefix_cache_hits",
        "counter",
        "Prompt tokens served from the prefix cache",
        format!("vllm:prefix_cache_hits_total {}", stats.prefix_hit_tokens),
    );
    crate::pd::metrics_text(st, &mut text);
    text.push_str(&tail);
    text
}

/// Serve `listener` with 503 `{"status": "loading"}` on every path (one request per
/// connection) until `load` resolves; returns its output. A router's health check sees
/// the replica as up but not ready, instead of refused.
pub async fn while_loading<T>(listener: &tokio::net::TcpListener, load: impl Future<Output = T>) -> T {
    let mut load = std::pin::pin!(load);
    loop {
        tokio::select! {
            out = &mut load => return out,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(|_req| async {
                        let mut r = (StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({"status": "loading"})))
                            .into_response();
                        r.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from(1));
                        Ok::<_, std::convert::Infallible>(r)
                    });
                    let mut http = hyper::server::conn::http1::Builder::new();
                    http.keep_alive(false);
                    let _ = tokio::time::timeout(
                        Duration::from_secs(10),
                        http.serve_connection(TokioIo::new(stream), svc),
                    )
                    .await;
                });
            }
        }
    }
}

/// Release expired P/D leases every 100 ms for as long as the server runs.
pub(crate) fn spawn_lease_expiry(st: &Arc<AppState>) {
    let st = Arc::downgrade(st);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tick.tick().await;
            let Some(st) = st.upgrade() else { return };
            if st.engine.stats().stopped {
                return;
            }
            let _ = st.engine.expire_leases();
        }
    });
}

/// GET /metrics.
pub(crate) async fn metrics(State(st): St) -> Response {
    let stats = st.engine.stats();
    let text = metrics_text(&st, st.metrics.encode(&stats), &stats);
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text)
        .into_response()
}
