//! sentence-transformers' modules after the transformer: `modules.json`, the Pooling
//! module's `config.json` and Normalize, read strictly (a listed file that is missing or
//! malformed is an error naming it, never a silent default), and the pooling arithmetic.
//!
//! serve/src/pooling.rs reads the same files leniently for decoder embedding models
//! (malformed counts as absent); the two should move into one crate once serve is
//! restructured.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tl_core::{ConfigError, ModelConfig};

/// One pooling mode, in the order sentence-transformers concatenates them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The first token's row (`[CLS]`).
    Cls,
    /// The per-component maximum over the tokens.
    Max,
    /// The mean of the rows.
    Mean,
    /// The sum of the rows over `sqrt(T)`.
    MeanSqrtLen,
    /// The rows weighted by their position `1..=T`, over the weights' sum.
    WeightedMean,
    /// The last token's row.
    LastToken,
}

/// The config keys of the modes, in sentence-transformers' concatenation order.
const MODES: [(&str, Mode); 6] = [
    ("pooling_mode_cls_token", Mode::Cls),
    ("pooling_mode_max_tokens", Mode::Max),
    ("pooling_mode_mean_tokens", Mode::Mean),
    ("pooling_mode_mean_sqrt_len_tokens", Mode::MeanSqrtLen),
    ("pooling_mode_weightedmean_tokens", Mode::WeightedMean),
    ("pooling_mode_lasttoken", Mode::LastToken),
];

/// What turns the last hidden states into the model's vector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pipeline {
    /// The modes, concatenated in this order (the vector is `modes.len() * d` long).
    pub modes: Vec<Mode>,
    /// L2-normalise the pooled vector (a Normalize module).
    pub normalize: bool,
}

fn read_json(path: PathBuf) -> Result<Value, ConfigError> {
    let text = std::fs::read_to_string(&path).map_err(|error| ConfigError::Io { path: path.clone(), error })?;
    serde_json::from_str(&text).map_err(|e| ConfigError::Json(format!("{}: {e}", path.display())))
}

fn bad(path: &Path, reason: String) -> ConfigError {
    ConfigError::MissingFile { path: path.to_path_buf(), reason }
}

/// The modes a Pooling module's `config.json` (at `path`) turns on, for rows of `d`.
fn modes(cfg: &Value, path: &Path, d: usize) -> Result<Vec<Mode>, ConfigError> {
    if let Some(w) = cfg.get("word_embedding_dimension") {
        if w.as_u64() != Some(d as u64) {
            return Err(bad(path, format!("word_embedding_dimension {w} is not the model's hidden_size {d}")));
        }
    }
    if cfg.get("include_prompt").is_some_and(|v| v != &Value::Bool(true)) {
        return Err(bad(path, "include_prompt other than true is not implemented".into()));
    }
    let mut out = Vec::new();
    for (key, mode) in MODES {
        match cfg.get(key) {
            None | Some(Value::Bool(false)) => {}
            Some(Value::Bool(true)) => out.push(mode),
            Some(v) => return Err(bad(path, format!("{key} = {v}: expected true or false"))),
        }
    }
    if out.is_empty() {
        return Err(bad(path, "no pooling mode is on".into()));
    }
    Ok(out)
}

impl Pipeline {
    /// sentence-transformers' modules of model directory `dir` for hidden rows of `d`.
    /// `Ok(None)`: no modules.json and `plain_mean` false (a classifier's directory);
    /// with `plain_mean`, a directory without modules.json pools by the mean, unnormalised,
    /// as sentence-transformers does when it wraps a plain transformers model. Modules tl
    /// does not run (Dense, LayerNorm, a transformer in a subdirectory) are refused.
    pub fn read(dir: &Path, d: usize, plain_mean: bool) -> Result<Option<Pipeline>, ConfigError> {
        let path = dir.join("modules.json");
        if !path.is_file() {
            return Ok(plain_mean.then(|| Pipeline { modes: vec![Mode::Mean], normalize: false }));
        }
        let json = read_json(path.clone())?;
        let list = json.as_array().ok_or_else(|| bad(&path, "expected a list of modules".into()))?;
        let (mut pooling, mut normalize) = (None, false);
        for (i, m) in list.iter().enumerate() {
            let kind = m.get("type").and_then(Value::as_str).unwrap_or("");
            let sub = m.get("path").and_then(Value::as_str).unwrap_or("");
            match kind.rsplit('.').next() {
                Some("Transformer") if i == 0 && sub.is_empty() => {}
                Some("Pooling") if pooling.is_none() && i == 1 => {
                    let cfg = dir.join(sub).join("config.json");
                    if !cfg.is_file() {
                        return Err(bad(
                            &cfg,
                            format!("modules.json lists a Pooling module at {sub:?}; its config is missing"),
                        ));
                    }
                    pooling = Some(modes(&read_json(cfg.clone())?, &cfg, d)?);
                }
                Some("Normalize") if pooling.is_some() && !normalize => normalize = true,
                _ => {
                    return Err(bad(
                        &path,
                        format!(
                            "module {i} ({kind:?} at {sub:?}) is not one tl runs (Transformer, Pooling, Normalize)"
                        ),
                    ))
                }
            }
        }
        let modes = pooling.ok_or_else(|| bad(&path, "no Pooling module".into()))?;
        Ok(Some(Pipeline { modes, normalize }))
    }

    /// The modules of `config`'s directory ([`Pipeline::read`]); a model read from no
    /// directory pools by the plain mean when `plain_mean`, else not at all.
    /// A GGUF encoder's pooling is the file's (the translation's
    /// [`crate::gguf::POOLING_FIELD`], always normalised), never the files beside it.
    pub fn of_model(config: &ModelConfig, d: usize, plain_mean: bool) -> Result<Option<Pipeline>, ConfigError> {
        if config.gguf.is_some() {
            return Pipeline::of_gguf(config);
        }
        match &config.dir {
            Some(dir) => Pipeline::read(dir, d, plain_mean),
            None => Ok(plain_mean.then(|| Pipeline { modes: vec![Mode::Mean], normalize: false })),
        }
    }

    fn of_gguf(config: &ModelConfig) -> Result<Option<Pipeline>, ConfigError> {
        let field = crate::gguf::POOLING_FIELD;
        let v = config.json().get(field).unwrap_or(&Value::Null);
        let mode = match v.as_str() {
            Some("none") => return Ok(None),
            Some("mean") => Mode::Mean,
            Some("cls") => Mode::Cls,
            Some("lasttoken") => Mode::LastToken,
            _ => return Err(ConfigError::invalid(field, v, "expected \"mean\", \"cls\", \"lasttoken\" or \"none\"")),
        };
        Ok(Some(Pipeline { modes: vec![mode], normalize: true }))
    }

    /// The vector of one input's last hidden states `h` `(T, d)`, `T >= 1`: each mode in
    /// order (sums over tokens in f64, in token order), then the L2 normalisation
    /// (`v / max(|v|, 1e-12)`, the norm in f64).
    pub fn pool(&self, h: &[f32], d: usize) -> Vec<f32> {
        let t = h.len() / d;
        let rows = || h.chunks_exact(d);
        let mut out = Vec::with_capacity(self.modes.len() * d);
        for mode in &self.modes {
            match mode {
                Mode::Cls => out.extend_from_slice(&h[..d]),
                Mode::LastToken => out.extend_from_slice(&h[(t - 1) * d..]),
                Mode::Max => out.extend((0..d).map(|c| rows().map(|r| r[c]).fold(f32::NEG_INFINITY, f32::max))),
                Mode::Mean | Mode::MeanSqrtLen | Mode::WeightedMean => {
                    let weighted = *mode == Mode::WeightedMean;
                    let mut sum = vec![0f64; d];
                    for (i, r) in rows().enumerate() {
                        let w = if weighted { (i + 1) as f64 } else { 1.0 };
                        for (s, &v) in sum.iter_mut().zip(r) {
                            *s += w * v as f64;
                        }
                    }
                    let div = match mode {
                        Mode::Mean => t as f64,
                        Mode::MeanSqrtLen => (t as f64).sqrt(),
                        _ => (t * (t + 1) / 2) as f64,
                    };
                    out.extend(sum.iter().map(|&s| (s / div) as f32));
                }
            }
        }
        if self.normalize {
            let norm = out.iter().map(|&v| v as f64 * v as f64).sum::<f64>().sqrt().max(1e-12);
            out.iter_mut().for_each(|v| *v = (*v as f64 / norm) as f32);
        }
        out
    }
}
