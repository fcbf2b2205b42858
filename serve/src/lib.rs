//! tl-serve: an OpenAI-compatible HTTP server over [`tl_engine::Engine`], with Anthropic's
//! Messages API beside it (messages.rs).
//!
//! axum on tokio answers HTTP; the engine steps on its own thread; each request's
//! choices stream back through channels. docs/serving.md describes the API.
#![deny(missing_docs)]

// Link every plugin crate so their inventory registrations exist.
use tl_arch_bigram as _;
use tl_arch_gemma3 as _;
use tl_arch_gemma4 as _;
use tl_arch_gpt_oss as _;
use tl_arch_llama as _;
use tl_arch_mistral as _;
use tl_arch_mixtral as _;
use tl_arch_olmoe as _;
use tl_arch_qwen2 as _;
use tl_arch_qwen3 as _;
use tl_arch_qwen3_5 as _;
use tl_arch_qwen3_moe as _;
use tl_kv as _;
use tl_sampling as _;

mod answer;
pub mod api;
mod auth;
mod chat;
mod completions;
pub mod embeddings;
mod error;
mod extra;
mod fields;
mod generate;
mod http;
pub mod messages;
pub mod metrics;
mod options;
pub mod page;
mod pd;
mod pd_node;
pub mod pooling;
pub mod prompt;
pub mod reasoning;
pub mod replica;
pub mod rerank;
mod response_store;
pub mod responses;
mod routes;
mod server;
mod state;
mod stream;
pub mod structured;
pub mod tools;
pub mod verify;

use std::future::Future;
use std::sync::Arc;

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
