//! vLLM's adapter routes: `POST /v1/load_lora_adapter` `{"lora_name", "lora_path"}` (and
//! an optional `"scale"`) and `POST /v1/unload_lora_adapter` `{"lora_name"}`. Behind the
//! API key like every `/v1` path (auth.rs).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use crate::error::ApiError;
use crate::http::{counted, read_json};
use crate::lora::LoraSpec;
use crate::state::AppState;

#[derive(Deserialize)]
struct LoadBody {
    lora_name: Option<String>,
    lora_path: Option<String>,
    scale: Option<f64>,
}

/// POST /v1/load_lora_adapter.
pub(crate) async fn load(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let r = async {
        let b: LoadBody = read_json(&st, &headers, body).await?;
        let name =
            b.lora_name.filter(|n| !n.is_empty()).ok_or_else(|| ApiError::bad("lora_name", "lora_name is required"))?;
        let path =
            b.lora_path.filter(|p| !p.is_empty()).ok_or_else(|| ApiError::bad("lora_path", "lora_path is required"))?;
        if name == st.model_id {
            return Err(ApiError::bad("lora_name", format!("{name:?} is the base model's name")));
        }
        let scale = match b.scale {
            None => 1.0,
            Some(s) if s.is_finite() => s as f32,
            Some(s) => return Err(ApiError::bad("scale", format!("scale {s} is not finite"))),
        };
        let spec = LoraSpec { name: name.clone(), path: path.into(), scale };
        // Reading and binding the files is blocking work: off the async workers.
        let st2 = Arc::clone(&st);
        tokio::task::spawn_blocking(move || st2.loras.add(spec))
            .await
            .map_err(|e| ApiError::bad("lora_path", format!("loading failed: {e}")))??;
        Ok(axum::Json(json!({"loaded": name})).into_response())
    }
    .await;
    counted(&st, "/v1/load_lora_adapter", r)
}

#[derive(Deserialize)]
struct UnloadBody {
    lora_name: Option<String>,
}

/// POST /v1/unload_lora_adapter.
pub(crate) async fn unload(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let r = async {
        let b: UnloadBody = read_json(&st, &headers, body).await?;
        let name = b.lora_name.ok_or_else(|| ApiError::bad("lora_name", "lora_name is required"))?;
        st.loras.remove(&name)?;
        Ok(axum::Json(json!({"unloaded": name})).into_response())
    }
    .await;
    counted(&st, "/v1/unload_lora_adapter", r)
}
