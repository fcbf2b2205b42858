//! What a model's files say about embeddings and reranking, read once at load.
//!
//! - Pooling: sentence-transformers' `modules.json` lists a `Pooling` module (its
//!   `config.json` says `pooling_mode_lasttoken`, `pooling_mode_mean_tokens` or
//!   `pooling_mode_cls_token`) and, when the vectors are normalised, a `Normalize` module.
//!   `--pooling` overrides the mode. When the files say nothing: last-token pooling (what
//!   decoder embedding models such as Qwen3-Embedding use) with L2 normalisation.
//! - A reranking (sequence-classification) head: `architectures` ending in
//!   `ForSequenceClassification`, a `score.weight` or `classifier.*` tensor, or a
//!   sentence-transformers cross-encoder config. tl does not run such heads, so
//!   `/v1/rerank` refuses these models rather than answer with a different score.

use std::path::Path;

use serde_json::Value;
use tl_engine::Pooling;

/// How `/v1/embeddings` and `/v1/rerank` pool this model's hidden states.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelPooling {
    /// The pooling mode, or why the files' mode cannot be served (max or weighted-mean
    /// pooling, say: embeddings then answer 501 unless `--pooling` chooses one).
    pub pooling: Result<Pooling, String>,
    /// L2-normalise the pooled vector.
    pub normalize: bool,
    /// Why the model has a reranking head tl does not run (`/v1/rerank` answers 501).
    pub rerank_head: Option<String>,
}

impl ModelPooling {
    /// Read `model`'s files (a directory; a .gguf file gets the defaults), with the
    /// `--pooling` override. Unreadable or malformed files count as saying nothing.
    pub fn of(model: &Path, flag: Option<Pooling>) -> ModelPooling {
        let dir = model.is_dir().then_some(model);
        let read = |name: &str| -> Option<Value> {
            let text = std::fs::read_to_string(dir?.join(name)).ok()?;
            serde_json::from_str(&text).ok()
        };
        let modules = read("modules.json").and_then(|m| m.as_array().cloned());
        let module = |kind: &str| {
            modules
                .iter()
                .flatten()
                .find(|m| m.get("type").and_then(Value::as_str).is_some_and(|t| t.rsplit('.').next() == Some(kind)))
        };
        let normalize = modules.is_none() || module("Normalize").is_some();
        let declared = module("Pooling").map(|m| {
            let path = m.get("path").and_then(Value::as_str).unwrap_or("1_Pooling");
            pooling_of(read(&format!("{path}/config.json")).as_ref())
        });
        let pooling = match (flag, declared) {
            (Some(p), _) => Ok(p),
            (None, Some(d)) => d,
            (None, None) => Ok(Pooling::Last),
        };
        ModelPooling { pooling, normalize, rerank_head: dir.and_then(|d| rerank_head(d, &read)) }
    }
}

/// The mode a `1_Pooling/config.json` declares.
fn pooling_of(cfg: Option<&Value>) -> Result<Pooling, String> {
    let Some(cfg) = cfg else { return Ok(Pooling::Last) };
    let on = |k: &str| cfg.get(k).and_then(Value::as_bool) == Some(true);
    let modes = [
        ("pooling_mode_lasttoken", Some(Pooling::Last)),
        ("pooling_mode_mean_tokens", Some(Pooling::Mean)),
        ("pooling_mode_cls_token", Some(Pooling::Cls)),
        ("pooling_mode_max_tokens", None),
        ("pooling_mode_mean_sqrt_len_tokens", None),
        ("pooling_mode_weightedmean_tokens", None),
    ];
    let chosen: Vec<_> = modes.iter().filter(|(k, _)| on(k)).collect();
    match chosen.as_slice() {
        [] => Ok(Pooling::Last),
        [(_, Some(p))] => Ok(*p),
        [(k, None)] => Err(format!("the model's pooling ({k}) is not implemented: choose one with --pooling")),
        _ => {
            Err("the model combines several pooling modes, which is not implemented: choose one with --pooling".into())
        }
    }
}

/// Why `dir` holds a reranking head, if it does.
fn rerank_head(dir: &Path, read: &dyn Fn(&str) -> Option<Value>) -> Option<String> {
    let config = read("config.json");
    let arch = config
        .as_ref()
        .and_then(|c| c.get("architectures")?.as_array()?.iter().find_map(Value::as_str).map(String::from));
    if let Some(a) = arch.filter(|a| a.ends_with("ForSequenceClassification")) {
        return Some(format!("the model is a {a} (a reranking head)"));
    }
    if config.as_ref().is_some_and(|c| c.get("sbert_ce_default_activation_function").is_some()) {
        return Some("the model is a sentence-transformers cross-encoder".into());
    }
    let st = read("config_sentence_transformers.json");
    if st.as_ref().is_some_and(|c| c.get("model_type").and_then(Value::as_str) == Some("CrossEncoder")) {
        return Some("the model is a sentence-transformers cross-encoder".into());
    }
    let head = tensor_names(dir, read)
        .into_iter()
        .find(|n| n == "score.weight" || n.starts_with("classifier.") || n.starts_with("score."));
    head.map(|n| format!("the model has a classification head ({n})"))
}

/// The tensor names of `dir`'s safetensors (the index's, or the single file's header).
fn tensor_names(dir: &Path, read: &dyn Fn(&str) -> Option<Value>) -> Vec<String> {
    if let Some(map) = read("model.safetensors.index.json").and_then(|i| i.get("weight_map")?.as_object().cloned()) {
        return map.keys().cloned().collect();
    }
    let header = || -> Option<Vec<String>> {
        use std::io::Read;
        let mut f = std::fs::File::open(dir.join("model.safetensors")).ok()?;
        let mut len = [0u8; 8];
        f.read_exact(&mut len).ok()?;
        let n = usize::try_from(u64::from_le_bytes(len)).ok().filter(|&n| n <= 100 << 20)?;
        let mut buf = vec![0u8; n];
        f.read_exact(&mut buf).ok()?;
        let v: Value = serde_json::from_slice(&buf).ok()?;
        Some(v.as_object()?.keys().filter(|k| *k != "__metadata__").cloned().collect())
    };
    header().unwrap_or_default()
}
