//! Several models behind one endpoint (`tl serve A --model B`, `--models-dir DIR`).
//!
//! Each model is served by exactly what serves it alone: its own [`AppState`] (engine, KV
//! pool, tokenizer, metrics) and its own route table, so every promise a model keeps alone
//! it keeps here (a seeded answer is the same bits whichever other models are loaded or
//! busy). This front only picks the model: it reads the request's `model` field (or the
//! `model` query parameter; the only model when there is one), loads that model on first
//! use, and hands the request over unchanged. It answers `/v1/models` (every configured
//! model with its state), `POST /models/load` and `/models/unload` (behind the API key),
//! `/health` and `/metrics` (each model's series with a `model` label) itself.
//!
//! Unloading: after `keep_alive` without a request, or when loading another would pass
//! `models_max`, the least recently used model with no request in flight goes (its engine
//! stops and its memory is freed). A request counts as in flight from the moment the front
//! picks its model until its response body (a stream included) is finished or dropped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::json;
use tower::ServiceExt;

use crate::error::ApiError;
use crate::options::{Limits, Options, ServeError};
use crate::state::AppState;

/// How the front manages its models.
#[derive(Debug, Clone)]
pub struct MultiOptions {
    /// Unload a model after this long without a request (`None`: keep it loaded).
    pub keep_alive: Option<Duration>,
    /// The most models loaded at once (0: no limit).
    pub models_max: usize,
    /// The most bytes the loaded models may hold together (weights + KV pools; `None`: no
    /// limit). A model's figure is what it held when last loaded, else its files' size.
    pub models_memory: Option<u64>,
    /// The API key for the front's own routes (each model checks its routes itself).
    pub api_key: Option<String>,
    /// The largest request body the front reads to find `model`.
    pub max_body: usize,
    /// Connection limits.
    pub limits: Limits,
    /// How long in-flight requests get at shutdown.
    pub grace: Duration,
}

#[derive(Clone)]
struct Loaded {
    state: Arc<AppState>,
    router: Router,
    in_flight: Arc<AtomicUsize>,
}

struct Slot {
    opts: Options,
    loaded: Option<Loaded>,
    last_used: Instant,
    loads: u64,
    /// Bytes it held when last loaded (`None`: never loaded).
    held: Option<u64>,
}

impl Slot {
    fn cost(&self) -> u64 {
        self.held.unwrap_or_else(|| crate::state::disk_bytes(&self.opts.model))
    }
}

/// The front: every configured model, loaded or not.
pub struct Multi {
    opts: MultiOptions,
    slots: Mutex<BTreeMap<String, Slot>>,
    /// One load at a time: two models loading at once could pass the memory the limit is for.
    load_lock: tokio::sync::Mutex<()>,
    created: u64,
}

/// The models of `--models-dir`: each `.gguf` file and each directory with a config.json.
pub fn models_in(dir: &Path) -> Result<Vec<PathBuf>, ServeError> {
    let rd = std::fs::read_dir(dir).map_err(|e| ServeError::Config(format!("{}: {e}", dir.display())))?;
    let mut out: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "gguf") || p.join("config.json").is_file())
        .collect();
    out.sort();
    if out.is_empty() {
        return Err(ServeError::Config(format!("{}: no .gguf file or model directory", dir.display())));
    }
    Ok(out)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn not_found(id: &str, ids: &[String]) -> ApiError {
    ApiError {
        param: Some("model".into()),
        ..ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "model_not_found",
            format!("the model {id:?} does not exist; this server serves {ids:?}"),
        )
    }
}

impl Multi {
    /// The front over `models` (one [`Options`] each; ids must differ). Nothing loads yet.
    pub fn new(models: Vec<Options>, opts: MultiOptions) -> Result<Arc<Multi>, ServeError> {
        let mut slots = BTreeMap::new();
        for o in models {
            let id = crate::state::model_id(&o);
            if slots.contains_key(&id) {
                return Err(ServeError::Config(format!("two models are called {id:?}; rename one directory or file")));
            }
            slots.insert(id, Slot { opts: o, loaded: None, last_used: Instant::now(), loads: 0, held: None });
        }
        let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Ok(Arc::new(Multi { opts, slots: Mutex::new(slots), load_lock: tokio::sync::Mutex::new(()), created }))
    }

    fn ids(&self) -> Vec<String> {
        lock(&self.slots).keys().cloned().collect()
    }

    /// The loaded models' ids (for tests and logs).
    pub fn loaded(&self) -> Vec<String> {
        lock(&self.slots).iter().filter(|(_, s)| s.loaded.is_some()).map(|(k, _)| k.clone()).collect()
    }

    /// The loaded model `id`, counted in flight; `None` when it is not loaded.
    fn take(&self, id: &str) -> Result<Option<Loaded>, ApiError> {
        let mut slots = lock(&self.slots);
        let ids: Vec<String> = slots.keys().cloned().collect();
        let slot = slots.get_mut(id).ok_or_else(|| not_found(id, &ids))?;
        slot.last_used = Instant::now();
        Ok(slot.loaded.clone().inspect(|l| {
            l.in_flight.fetch_add(1, Ordering::SeqCst);
        }))
    }

    /// Unload least recently used idle models until `keep` fits: fewer than `models_max`
    /// loaded, and its bytes within `models_memory` beside the others'.
    fn make_room(&self, keep: &str) -> Result<(), ApiError> {
        let mut gone = Vec::new();
        let r = (|| {
            let mut slots = lock(&self.slots);
            let need = slots.get(keep).map_or(0, Slot::cost);
            if let Some(budget) = self.opts.models_memory.filter(|b| need > *b) {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    "model_too_large",
                    format!("{keep:?} needs {} MiB, more than --models-memory ({} MiB)", need >> 20, budget >> 20),
                ));
            }
            loop {
                let loaded = slots.values().filter(|s| s.loaded.is_some());
                let (count, used) = loaded.fold((0, 0u64), |(n, b), s| (n + 1, b + s.cost()));
                let over_count = self.opts.models_max > 0 && count >= self.opts.models_max;
                let over_bytes = self.opts.models_memory.is_some_and(|b| used + need > b);
                if !over_count && !over_bytes {
                    return Ok(());
                }
                let lru = slots
                    .iter()
                    .filter(|(k, s)| {
                        *k != keep && s.loaded.as_ref().is_some_and(|l| l.in_flight.load(Ordering::SeqCst) == 0)
                    })
                    .min_by_key(|(_, s)| s.last_used)
                    .map(|(k, _)| k.clone());
                let Some(lru) = lru else {
                    return Err(ApiError {
                        retry_after: Some(1),
                        ..ApiError::new(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "server_error",
                            "models_busy",
                            format!("the loaded models ({count}) all have requests in flight; try again"),
                        )
                    });
                };
                gone.extend(slots.get_mut(&lru).and_then(|s| s.loaded.take()));
            }
        })();
        drop_off_thread(gone);
        r
    }

    /// Model `id`, loaded if it was not, counted in flight.
    async fn acquire(&self, id: &str) -> Result<Loaded, ApiError> {
        if let Some(l) = self.take(id)? {
            return Ok(l);
        }
        let _one = self.load_lock.lock().await;
        // Another request may have loaded it while this one waited.
        if let Some(l) = self.take(id)? {
            return Ok(l);
        }
        self.make_room(id)?;
        let opts = lock(&self.slots).get(id).map(|s| s.opts.clone()).ok_or_else(|| not_found(id, &self.ids()))?;
        let state = tokio::task::spawn_blocking(move || AppState::load(&opts))
            .await
            .map_err(|e| {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "load_failed", e.to_string())
            })?
            .map_err(|e| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    "load_failed",
                    format!("loading {id:?}: {e}"),
                )
            })?;
        // A model's own figure is known once loaded: one larger than the whole budget goes
        // again at once (and is refused up front from now on).
        if let Some(budget) = self.opts.models_memory.filter(|b| state.memory_bytes > *b) {
            let held = state.memory_bytes;
            if let Some(s) = lock(&self.slots).get_mut(id) {
                s.held = Some(held);
            }
            tokio::task::spawn_blocking(move || drop(state));
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "model_too_large",
                format!("{id:?} needs {} MiB, more than --models-memory ({} MiB)", held >> 20, budget >> 20),
            ));
        }
        let loaded = Loaded { router: crate::routes::router(Arc::clone(&state)), state, in_flight: Arc::default() };
        {
            let mut slots = lock(&self.slots);
            if let Some(s) = slots.get_mut(id) {
                s.held = Some(loaded.state.memory_bytes);
                s.loaded = Some(loaded);
                s.loads += 1;
            }
        }
        self.take(id)?.ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "unloaded",
                "the model was unloaded while loading; try again",
            )
        })
    }

    /// Unload `id` now; refused while it has requests in flight.
    fn unload(&self, id: &str) -> Result<bool, ApiError> {
        let gone = {
            let mut slots = lock(&self.slots);
            let ids: Vec<String> = slots.keys().cloned().collect();
            let slot = slots.get_mut(id).ok_or_else(|| not_found(id, &ids))?;
            match &slot.loaded {
                None => return Ok(false),
                Some(l) if l.in_flight.load(Ordering::SeqCst) > 0 => {
                    return Err(ApiError::new(
                        StatusCode::CONFLICT,
                        "invalid_request_error",
                        "model_busy",
                        format!("{id:?} has {} requests in flight", l.in_flight.load(Ordering::SeqCst)),
                    ))
                }
                Some(_) => slot.loaded.take(),
            }
        };
        drop_off_thread(gone.into_iter().collect());
        Ok(true)
    }

    /// Unload every model idle for longer than keep-alive.
    fn expire(&self) {
        let Some(keep) = self.opts.keep_alive else { return };
        let gone: Vec<Loaded> = {
            let mut slots = lock(&self.slots);
            slots
                .values_mut()
                .filter(|s| {
                    s.last_used.elapsed() >= keep
                        && s.loaded.as_ref().is_some_and(|l| l.in_flight.load(Ordering::SeqCst) == 0)
                })
                .filter_map(|s| s.loaded.take())
                .collect()
        };
        drop_off_thread(gone);
    }

    /// Stop every loaded engine (in-flight work gets `grace`), for shutdown.
    pub(crate) fn shutdown(&self, grace: Duration) {
        for s in lock(&self.slots).values() {
            if let Some(l) = &s.loaded {
                l.state.engine.shutdown(grace);
            }
        }
    }

    /// Whether every loaded engine has stopped.
    pub(crate) fn stopped(&self) -> bool {
        lock(&self.slots).values().all(|s| s.loaded.as_ref().is_none_or(|l| l.state.engine.stats().stopped))
    }

    fn listing(&self) -> serde_json::Value {
        let slots = lock(&self.slots);
        let data: Vec<_> = slots
            .iter()
            .map(|(id, s)| {
                let state = if s.loaded.is_some() { "loaded" } else { "unloaded" };
                json!({"id": id, "object": "model", "created": self.created, "owned_by": "tl",
                       "status": {"value": state, "loads": s.loads, "bytes": s.cost()}})
            })
            .collect();
        json!({"object": "list", "data": data})
    }

    fn metrics(&self) -> String {
        let slots = lock(&self.slots);
        let texts: Vec<(String, String)> = slots
            .iter()
            .filter_map(|(id, s)| {
                s.loaded.as_ref().map(|l| (id.clone(), l.state.metrics.encode(&l.state.engine.stats())))
            })
            .collect();
        crate::metrics::merge_labelled(&texts)
    }
}

/// Dropping a model stops and joins its engine thread: never on an async worker.
fn drop_off_thread(gone: Vec<Loaded>) {
    if !gone.is_empty() {
        tokio::task::spawn_blocking(move || drop(gone));
    }
}

/// Decrements the model's in-flight count when the response body is finished or dropped.
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn model_of(body: &[u8], query: Option<&str>) -> Option<String> {
    let from_query = query.and_then(|q| {
        q.split('&').find_map(|kv| kv.strip_prefix("model=").map(|v| v.replace("%3A", ":").replace("%2F", "/")))
    });
    let from_body =
        serde_json::from_slice::<serde_json::Value>(body).ok().and_then(|v| v["model"].as_str().map(str::to_string));
    from_body.or(from_query)
}

/// Answer one request: the front's own routes, or the chosen model's.
async fn dispatch(multi: Arc<Multi>, req: Request) -> Response {
    if let Some(r) = crate::auth::refusal(multi.opts.api_key.as_deref().map(str::as_bytes), &req) {
        return r;
    }
    let path = req.uri().path().to_string();
    match (req.method().as_str(), path.as_str()) {
        ("GET", "/v1/models") => return axum::Json(multi.listing()).into_response(),
        ("GET", "/health") => return axum::Json(json!({"status": "ok"})).into_response(),
        ("GET", "/metrics") => {
            return ([("content-type", "text/plain; version=0.0.4")], multi.metrics()).into_response()
        }
        _ => {}
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, multi.opts.max_body).await {
        Ok(b) => b,
        Err(_) => {
            return ApiError::bad("", format!("the body is larger than {} bytes", multi.opts.max_body)).into_response()
        }
    };
    let named = model_of(&bytes, parts.uri.query()).or_else(|| path.strip_prefix("/v1/models/").map(str::to_string));
    if matches!(path.as_str(), "/models/load" | "/models/unload") && parts.method == "POST" {
        let Some(id) = named else { return ApiError::bad("model", "name the model: {\"model\": ID}").into_response() };
        let r = if path == "/models/load" {
            multi.acquire(&id).await.map(|l| {
                l.in_flight.fetch_sub(1, Ordering::SeqCst);
            })
        } else {
            multi.unload(&id).map(|_| ())
        };
        return r.map_or_else(IntoResponse::into_response, |()| axum::Json(json!({"success": true})).into_response());
    }
    let ids = multi.ids();
    let id = match named {
        Some(m) => m,
        None if ids.len() == 1 => ids[0].clone(),
        None => {
            return ApiError::bad("model", format!("name the model: this server serves {ids:?}")).into_response();
        }
    };
    let loaded = match multi.acquire(&id).await {
        Ok(l) => l,
        Err(e) => return e.into_response(),
    };
    let guard = InFlight(Arc::clone(&loaded.in_flight));
    let req = Request::from_parts(parts, Body::from(bytes));
    let resp = match loaded.router.clone().oneshot(req).await {
        Ok(r) => r,
        Err(never) => match never {},
    };
    let (parts, body) = resp.into_parts();
    let body = Body::new(body.map_frame(move |f| {
        let _ = &guard;
        f
    }));
    Response::from_parts(parts, body)
}

/// The front's route table: everything goes through [`dispatch`].
pub fn router(multi: Arc<Multi>) -> Router {
    Router::new().fallback(move |req: Request| dispatch(Arc::clone(&multi), req))
}

/// Serve on `listener` until `signal`, unloading idle models every second.
pub async fn run(
    listener: tokio::net::TcpListener,
    multi: Arc<Multi>,
    signal: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let m = Arc::clone(&multi);
    let ticker = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            m.expire();
        }
    });
    let app = router(Arc::clone(&multi));
    let drain = Arc::clone(&multi);
    let r = crate::server::serve_app(listener, app, multi.opts.limits, multi.opts.grace, drain, signal).await;
    ticker.abort();
    multi.shutdown(Duration::ZERO);
    let gone: Vec<Loaded> = lock(&multi.slots).values_mut().filter_map(|s| s.loaded.take()).collect();
    let _ = tokio::task::spawn_blocking(move || drop(gone)).await;
    r
}

impl crate::server::Drain for Multi {
    fn shutdown(&self, grace: Duration) {
        Multi::shutdown(self, grace);
    }

    fn stopped(&self) -> bool {
        Multi::stopped(self)
    }
}
