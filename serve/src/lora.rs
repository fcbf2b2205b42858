//! LoRA adapters in the server (docs/serving.md, "Adapters"): the adapters a server knows
//! (`--lora NAME=PATH[@SCALE]`, and `POST /v1/load_lora_adapter` at run time), which of
//! them are loaded (at most `--max-loras`: the least recently used is unloaded to load
//! another, and loaded again from its path when next asked for), and which one a request
//! runs under: its `model` naming an adapter (vLLM's convention), or llama.cpp's
//! `lora: [{"id", "scale"}]` (ids in the order of `--lora`). A request runs under at most
//! one adapter; its answer is the bits it has alone, whatever the others in its steps use.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use serde_json::{json, Value};
use tl_core::AdapterLoader;
use tl_engine::AdapterChoice;

use crate::error::ApiError;

/// An adapter named on the command line: `NAME=PATH` or `NAME=PATH@SCALE`.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraSpec {
    /// The name requests use (`model`).
    pub name: String,
    /// A PEFT directory or a GGUF adapter file.
    pub path: PathBuf,
    /// The scale a request gets unless it asks for another (1 by default).
    pub scale: f32,
}

/// `PATH` or `PATH@SCALE` (the scale 1 when absent; finite): what `--lora` names in every
/// command.
pub fn path_and_scale(s: &str) -> Result<(PathBuf, f32), String> {
    let (path, scale) = match s.rsplit_once('@') {
        Some((p, sc)) => (p, sc.parse::<f32>().map_err(|e| format!("{s:?}: scale {sc:?}: {e}"))?),
        None => (s, 1.0),
    };
    if path.is_empty() || !scale.is_finite() {
        return Err(format!("{s:?}: expected PATH or PATH@SCALE (a finite scale)"));
    }
    Ok((PathBuf::from(path), scale))
}

impl std::str::FromStr for LoraSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<LoraSpec, String> {
        let (name, rest) = s.split_once('=').ok_or_else(|| format!("{s:?}: expected NAME=PATH or NAME=PATH@SCALE"))?;
        if name.is_empty() {
            return Err(format!("{s:?}: expected NAME=PATH or NAME=PATH@SCALE"));
        }
        let (path, scale) = path_and_scale(rest)?;
        Ok(LoraSpec { name: name.to_string(), path, scale })
    }
}

/// What a request asked for: its `model` and its `lora` field, as sent.
#[derive(Clone, Debug, Default)]
pub struct LoraAsk {
    /// The request's `model`.
    pub model: Option<String>,
    /// llama.cpp's `lora: [{"id", "scale"}]`.
    pub lora: Option<Value>,
}

struct Known {
    spec: LoraSpec,
    loaded: Option<Arc<tl_core::Adapter>>,
    last_used: u64,
    requests: u64,
}

/// The server's adapters.
pub struct Loras {
    loader: AdapterLoader,
    max: usize,
    known: Mutex<(Vec<Known>, u64)>,
}

fn not_found(name: &str) -> ApiError {
    ApiError {
        param: Some("lora_name".into()),
        ..ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "adapter_not_found",
            format!("no adapter {name:?}"),
        )
    }
}

impl Loras {
    /// The adapters of `specs`, each loaded now (a bad one fails the start, naming its file
    /// and tensor), at most `max` kept loaded (0: no bound).
    pub fn new(loader: AdapterLoader, specs: &[LoraSpec], max: usize) -> Result<Loras, String> {
        let loras = Loras { loader, max, known: Mutex::new((Vec::new(), 0)) };
        for s in specs {
            loras.add(s.clone()).map_err(|e| format!("--lora {}: {}", s.name, e.message))?;
        }
        Ok(loras)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Vec<Known>, u64)> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Load `spec` and add it under its name (taken names refused).
    pub fn add(&self, spec: LoraSpec) -> Result<(), ApiError> {
        if self.lock().0.iter().any(|k| k.spec.name == spec.name) {
            return Err(ApiError::bad("lora_name", format!("an adapter {:?} is already loaded", spec.name)));
        }
        let adapter = self.read(&spec)?;
        let mut g = self.lock();
        if g.0.iter().any(|k| k.spec.name == spec.name) {
            return Err(ApiError::bad("lora_name", format!("an adapter {:?} is already loaded", spec.name)));
        }
        g.1 += 1;
        let tick = g.1;
        g.0.push(Known { spec, loaded: Some(adapter), last_used: tick, requests: 0 });
        self.evict(&mut g.0);
        Ok(())
    }

    /// Forget adapter `name` (requests running under it finish under it).
    pub fn remove(&self, name: &str) -> Result<(), ApiError> {
        let mut g = self.lock();
        let i = g.0.iter().position(|k| k.spec.name == name).ok_or_else(|| not_found(name))?;
        g.0.remove(i);
        Ok(())
    }

    fn read(&self, spec: &LoraSpec) -> Result<Arc<tl_core::Adapter>, ApiError> {
        self.loader.load(&spec.name, &spec.path).map(Arc::new).map_err(|e| ApiError::bad("lora_path", e.to_string()))
    }

    /// Unload the least recently used loaded adapters past the bound.
    fn evict(&self, known: &mut [Known]) {
        while self.max > 0 && known.iter().filter(|k| k.loaded.is_some()).count() > self.max {
            let Some(lru) = known.iter_mut().filter(|k| k.loaded.is_some()).min_by_key(|k| k.last_used) else { return };
            lru.loaded = None;
        }
    }

    /// Whether `model` names an adapter.
    pub fn has(&self, model: &str) -> bool {
        self.lock().0.iter().any(|k| k.spec.name == model)
    }

    /// The adapter a request runs under (`None`: the base model), loaded again if it was
    /// unloaded.
    pub fn resolve(&self, ask: &LoraAsk) -> Result<Option<AdapterChoice>, ApiError> {
        let by_id = match &ask.lora {
            None | Some(Value::Null) => None,
            Some(v) => lora_field(v)?,
        };
        let mut g = self.lock();
        let (index, scale) = match (by_id, &ask.model) {
            (Some((id, scale)), _) => {
                if id >= g.0.len() {
                    return Err(ApiError::bad("lora", format!("no adapter with id {id} ({} loaded)", g.0.len())));
                }
                (id, Some(scale))
            }
            (None, Some(m)) => match g.0.iter().position(|k| k.spec.name == *m) {
                Some(i) => (i, None),
                None => return Ok(None),
            },
            (None, None) => return Ok(None),
        };
        g.1 += 1;
        let tick = g.1;
        let k = &mut g.0[index];
        k.last_used = tick;
        k.requests += 1;
        let adapter = match &k.loaded {
            Some(a) => Arc::clone(a),
            None => {
                let a = self.read(&k.spec)?;
                k.loaded = Some(Arc::clone(&a));
                a
            }
        };
        let scale = scale.unwrap_or(k.spec.scale);
        self.evict(&mut g.0);
        Ok(Some(AdapterChoice { adapter, scale }))
    }

    /// `/v1/models` entries of the adapters (vLLM's shape: `parent` is the base).
    pub fn models(&self, base: &str, created: u64) -> Vec<Value> {
        let g = self.lock();
        g.0.iter()
            .enumerate()
            .map(|(id, k)| {
                json!({"id": k.spec.name, "object": "model", "created": created, "owned_by": "tl",
                       "parent": base, "root": k.spec.path.display().to_string(),
                       "lora": {"id": id, "scale": k.spec.scale, "loaded": k.loaded.is_some(), "requests": k.requests,
                                "bytes": k.loaded.as_ref().map_or(0, |a| a.bytes())}})
            })
            .collect()
    }
}

/// llama.cpp's `lora` field: `[{"id": N, "scale": S}, ...]`; entries with scale 0 are
/// off. At most one may be on (tl runs one adapter per request); `None` when none is.
fn lora_field(v: &Value) -> Result<Option<(usize, f32)>, ApiError> {
    let items = v.as_array().ok_or_else(|| ApiError::bad("lora", "lora must be a list of {\"id\", \"scale\"}"))?;
    let mut on = None;
    for (i, item) in items.iter().enumerate() {
        let id = item.get("id").and_then(Value::as_u64);
        let scale = item.get("scale").map_or(Some(1.0), Value::as_f64);
        let (Some(id), Some(scale)) = (id, scale.filter(|s| s.is_finite())) else {
            return Err(ApiError::bad("lora", format!("lora[{i}] must be {{\"id\": integer, \"scale\": number}}")));
        };
        if scale == 0.0 {
            continue;
        }
        if on.is_some() {
            return Err(ApiError::bad("lora", "more than one adapter with a non-zero scale: one adapter per request"));
        }
        on = Some((id as usize, scale as f32));
    }
    Ok(on)
}
