//! The route table: which module answers which path, behind which middleware.

use std::sync::Arc;

use axum::routing::{any, get, post};
use axum::Router;

use crate::state::AppState;
use crate::{
    auth, chat, completions, embeddings, extra, http, lora_routes, messages, page, pd, replica, rerank, responses,
    score,
};

/// Every route. With an API key, every `/v1` path (unknown ones included), `/rerank`, `/score`,
/// `/tokenize` and `/detokenize` answer 401 without `Authorization: Bearer <key>`; `/health` and
/// `/metrics` stay open.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat::chat))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/messages", post(messages::messages).fallback(messages::elsewhere))
        .route("/v1/messages/count_tokens", post(messages::count_tokens).fallback(messages::elsewhere))
        .route("/v1/messages/{*rest}", any(messages::elsewhere))
        .route("/v1/responses", post(responses::create).fallback(responses::elsewhere))
        .route("/v1/responses/{id}", get(responses::get).fallback(responses::elsewhere))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/rerank", post(rerank::rerank))
        .route("/rerank", post(rerank::rerank))
        .route("/v1/score", post(score::score))
        .route("/score", post(score::score))
        .route("/v1/models", get(extra::models))
        .route("/v1/models/{id}", get(extra::model))
        .route("/v1/load_lora_adapter", post(lora_routes::load))
        .route("/v1/unload_lora_adapter", post(lora_routes::unload))
        .route("/tokenize", post(extra::tokenize))
        .route("/detokenize", post(extra::detokenize))
        .route("/health", get(replica::health))
        .route("/load", get(replica::load))
        .route("/v1/kv/{id}", get(pd::kv))
        .route("/metrics", get(replica::metrics))
        .merge(page::routes())
        .fallback(http::not_found)
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state), replica::track_load))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state), auth::require_key))
        .with_state(state)
}
