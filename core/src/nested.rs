//! Multimodal Hugging Face checkpoints whose text model tl runs (a `...ForConditionalGeneration`
//! class): the text model's config sits under a field of the outer config.json (`text_config`)
//! and its weights under a prefix of the outer model (`model.language_model.` for `model.`),
//! beside towers tl does not run (vision, audio).
//!
//! A family says so once, with a [`crate::arch::NestedRegistration`]; loading then reads such a checkpoint
//! as the text-only one it contains: [`flatten`] gives the config the architecture parses
//! (the text config, with what the outer config decides for the whole model), and
//! [`TextWeights`] names the stored tensors as the text-only checkpoint names them, hiding
//! the others. Nothing else in tl knows a checkpoint was nested, so the same weights give
//! the same bits either way.

use std::path::Path;

use serde_json::{Map, Value};

use crate::config::{ConfigError, Nesting};
use crate::registry;
use crate::weights::{Stored, TensorInfo, WeightError, WeightStore};

/// What transformers reads from the outer config of a nested model, not from its text
/// config: `PreTrainedModel` ties the output head to the embedding by its own config's
/// `tie_word_embeddings`, and the outer model is the one loaded.
const OUTER_DECIDES: &[&str] = &["tie_word_embeddings"];

/// The config an architecture parses for `json`: `json` itself, or, for a `model_type` a
/// family registered as nesting its text model, the text config (the outer config's
/// [`OUTER_DECIDES`] fields over it, and the outer fields it lacks beside it, such as
/// `tl_tokenizer`), with the registration that says where its weights are. A config with a
/// `text_config` that no registration describes is refused naming that field.
pub(crate) fn flatten(json: Value) -> Result<(Value, Option<Nesting>), ConfigError> {
    if json.get("tl_arch").is_some() {
        return Ok((json, None));
    }
    let Some(model_type) = json.get("model_type").and_then(Value::as_str) else {
        return Ok((json, None));
    };
    let Some(reg) = registry::nested_model_type(model_type)? else {
        if let Some(v) = json.get("text_config") {
            let known = registry::nested_model_types()?.join(", ");
            return Err(ConfigError::invalid(
                "text_config",
                v,
                format!("model_type {model_type:?} nests no text model tl knows (nesting model types: {known})"),
            ));
        }
        return Ok((json, None));
    };
    let field = reg.text_config;
    let mut text = match json.get(field) {
        Some(Value::Object(m)) => m.clone(),
        Some(v) => return Err(ConfigError::invalid(field, v, "expected the text model's config (a JSON object)")),
        None => return Err(ConfigError::Missing { field: reg.text_config, hint: " (a nested model's text config)" }),
    };
    // The text config selects the architecture as a text-only checkpoint would; it must
    // be the one registered for this nesting.
    match text.get("model_type") {
        None => {
            text.insert("tl_arch".into(), Value::String(reg.arch.into()));
        }
        Some(Value::String(t)) if registry::model_type(t).map(|r| r.arch) == Ok(reg.arch) => {}
        Some(v) => {
            return Err(ConfigError::invalid(
                format!("{field}.model_type"),
                v,
                format!("a {model_type:?} checkpoint nests a text model of architecture {:?}", reg.arch),
            ))
        }
    }
    let Value::Object(outer) = json else { unreachable!("json has a model_type, so it is an object") };
    merge(&mut text, outer, field);
    let nesting = Nesting { model_type: reg.model_type, weights: reg.weights, text_weights: reg.text_weights };
    Ok((Value::Object(text), Some(nesting)))
}

fn merge(text: &mut Map<String, Value>, outer: Map<String, Value>, field: &str) {
    for (k, v) in outer {
        let sub_config = k == field || k.ends_with("_config");
        let fills_in = !sub_config && k != "model_type" && k != "architectures" && !text.contains_key(&k);
        if OUTER_DECIDES.contains(&k.as_str()) || fills_in {
            text.insert(k, v);
        }
    }
}

/// A nested checkpoint's tensors as its text model's own checkpoint names them: a stored
/// `model.language_model.x` is `model.x`; other tensors under the outer model (`model.`:
/// its towers and their projections) are hidden; tensors outside it (`lm_head.weight`,
/// `mtp.*`) keep their names. Messages name the stored tensor.
pub(crate) struct TextWeights<'a> {
    inner: &'a dyn WeightStore,
    reg: Nesting,
}

impl<'a> TextWeights<'a> {
    /// The text model of `inner`; a store with no tensor under the registered prefix is
    /// refused naming it.
    pub(crate) fn new(inner: &'a dyn WeightStore, reg: Nesting) -> Result<Self, WeightError> {
        if !inner.names().iter().any(|n| n.starts_with(reg.weights)) {
            return Err(WeightError::Format {
                path: inner.path().to_path_buf(),
                reason: format!(
                    "no tensor under {:?}, where a {:?} checkpoint keeps its text model's weights",
                    reg.weights, reg.model_type
                ),
            });
        }
        Ok(TextWeights { inner, reg })
    }

    /// The stored name of the text model's tensor `name`.
    fn stored_name(&self, name: &str) -> String {
        match name.strip_prefix(self.reg.text_weights) {
            Some(rest) => format!("{}{rest}", self.reg.weights),
            None => name.to_string(),
        }
    }

    /// The text model's name for stored tensor `stored`, or None when it is hidden.
    fn text_name(&self, stored: &str) -> Option<String> {
        match stored.strip_prefix(self.reg.weights) {
            Some(rest) => Some(format!("{}{rest}", self.reg.text_weights)),
            None if stored.starts_with(self.reg.text_weights) => None,
            None => Some(stored.to_string()),
        }
    }
}

impl WeightStore for TextWeights<'_> {
    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.inner.names().iter().filter_map(|n| self.text_name(n)).collect();
        names.sort();
        names
    }

    fn info(&self, name: &str) -> Option<TensorInfo> {
        self.inner.info(&self.stored_name(name))
    }

    fn metadata(&self, key: &str) -> Option<String> {
        self.inner.metadata(key)
    }

    fn f32(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, WeightError> {
        self.inner.f32(&self.stored_name(name), shape)
    }

    fn raw(&self, name: &str, dtype: crate::weights::DType, shape: &[usize]) -> Result<&[u8], WeightError> {
        self.inner.raw(&self.stored_name(name), dtype, shape)
    }

    fn stored(&self, name: &str, shape: &[usize]) -> Result<Stored<'_>, WeightError> {
        self.inner.stored(&self.stored_name(name), shape)
    }

    fn done_with(&self, name: &str) {
        self.inner.done_with(&self.stored_name(name))
    }
}
