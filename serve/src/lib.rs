//! tl-serve: an OpenAI-compatible HTTP server over [`tl_engine::Engine`], with Anthropic's
//! Messages API beside it (messages.rs).
//!
//! axum on tokio answers HTTP; the engine steps on its own thread; each request's
//! choices stream back through channels. docs/serving.md describes the API.
#![deny(missing_docs)]

// Link every plugin crate so their inventory registrations exist (families/src/lib.rs
// says why naming the crate is needed).
use tl_families as _;

mod answer;
pub mod api;
mod auth;
mod chat;
pub mod cmd;
mod completions;
pub mod embeddings;
mod encoder;
mod encoder_text;
mod error;
mod extra;
mod fields;
mod generate;
mod http;
mod input;
pub mod lora;
mod lora_routes;
pub mod messages;
pub mod metrics;
pub mod multi;
mod options;
pub mod page;
mod pd;
mod pd_node;
pub mod plan;
pub mod pooling;
pub mod prompt;
pub mod reasoning;
mod render;
pub mod replica;
pub mod rerank;
mod response_store;
pub mod responses;
mod routes;
pub mod score;
mod server;
mod similarity;
mod state;
mod stream;
pub mod structured;
mod submit;
pub mod tools;
pub mod verify;

use std::future::Future;
use std::sync::Arc;

pub use lora::LoraSpec;
pub use options::{KvDisk, Limits, Options, ServeError};
pub use prompt::FALLBACK_TEMPLATE;
pub use routes::router;
pub use state::AppState;

/// Serve on `listener` until `signal` resolves; then stop accepting, let in-flight
/// requests finish for the grace period (the engine drops what is left), and return
/// once every connection is closed and the engine thread has exited. The [`Limits`]
/// apply to every connection.
pub async fn run(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    signal: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    state.pd.set_addr(state.scale.advertise_host.as_deref(), listener.local_addr()?);
    replica::spawn_lease_expiry(&state);
    server::serve(listener, Arc::clone(&state), signal).await?;
    let st = Arc::clone(&state);
    // join blocks until the engine thread exits; keep it off the async workers.
    let _ = tokio::task::spawn_blocking(move || st.engine.join()).await;
    Ok(())
}
