//! The chat page at `/` (docs/serving.md, "The chat page"): three small files embedded in
//! the binary, served with a Content-Security-Policy that allows this origin only (no
//! inline script or style, no other host), so the page can reach nothing but this
//! server's own API.
//!
//! The page is plain HTML, CSS and ES modules (serve/assets/): no build step, no CDN.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// Every embedded file: its name under `/assets/`, its content type, its bytes.
const ASSETS: &[(&str, &str, &str)] = &[
    ("app.js", "text/javascript; charset=utf-8", include_str!("../assets/app.js")),
    ("sse.js", "text/javascript; charset=utf-8", include_str!("../assets/sse.js")),
    ("style.css", "text/css; charset=utf-8", include_str!("../assets/style.css")),
];

const INDEX: &str = include_str!("../assets/index.html");

/// Self only: scripts, styles, images and fetches from this origin; no frames, no forms
/// posted elsewhere, no `<base>` rewriting, and nobody may frame the page.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The page's routes: `GET /` and `GET /assets/{name}`.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/assets/{name}", get(asset))
        // Browsers ask for it on every page; there is none (an empty answer, not a 404).
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
}

fn answer(content_type: &'static str, body: &'static str) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    // The assets change only with the binary; `no-cache` revalidates instead of showing
    // an old page against a new server.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

async fn index() -> Response {
    answer("text/html; charset=utf-8", INDEX)
}

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, ty, body)) => answer(ty, body),
        None => crate::http::not_found().await,
    }
}
