//! BERT GGUF files (`general.architecture = "bert"`, as llama.cpp's `convert_hf_to_gguf.py`
//! writes a `BertModel`), and what every encoder family's GGUF translation shares
//! ([`Meta`], [`config_head`], [`pooling`], [`require`], [`Names`], and for a rebuilt
//! vocabulary [`special_token`] and [`cls_sep_template`]).
//!
//! The file's metadata becomes a BERT config.json: `bert.block_count`,
//! `.embedding_length`, `.attention.head_count`, `.feed_forward_length`,
//! `.context_length` (the positions), `.attention.layer_norm_epsilon`; the vocabulary
//! size and token types are the embedding tables' rows. The pooling comes from
//! `bert.pooling_type` (docs/spec/model-dir.md, "GGUF encoders"): 1 mean, 2 cls, 3 last
//! token, each L2-normalised, as llama.cpp's embedding tools do by default (the file does
//! not record whether the directory had a Normalize module); 0 none (no vector); absent
//! the mean. Refused, naming the key or tensor: causal attention, `rank` pooling and a
//! classifier (`cls.*`: the converter drops `BertForSequenceClassification`'s pooler, so
//! no file it writes holds a BERT cross-encoder whole), a missing tensor.
//!
//! Tensors are renamed to transformers' `BertModel` names (rows as stored).

use serde_json::{json, Map, Value};
use tl_core::{Gguf, GgufArch, GgufRegistration, TensorInfo, TensorMap, WeightError, WeightStore};

/// The config.json field that carries a GGUF encoder's pooling to [`crate::Pipeline`]:
/// `"mean"`, `"cls"`, `"lasttoken"` (each normalised) or `"none"`.
pub const POOLING_FIELD: &str = "tl_gguf_pooling";

/// One family's metadata keys (`{prefix}.block_count`, ...).
pub struct Meta<'a> {
    /// The file.
    pub file: &'a Gguf,
    /// The `general.architecture` value, the keys' prefix.
    pub prefix: &'a str,
}

impl<'a> Meta<'a> {
    /// `file`'s keys under `prefix`, after what every encoder GGUF is checked for: attention
    /// both ways and no classifier head.
    pub fn encoder(file: &'a Gguf, prefix: &'a str) -> Result<Self, WeightError> {
        let m = Meta { file, prefix };
        m.bidirectional()?;
        no_classifier(file)?;
        Ok(m)
    }

    /// `{prefix}.{key}`, required.
    pub fn required(&self, key: &str) -> Result<u64, WeightError> {
        self.file.required(&format!("{}.{key}", self.prefix))
    }

    /// `{prefix}.{key}`, a number, if present.
    pub fn float(&self, key: &str) -> Result<Option<f64>, WeightError> {
        self.file.float(&format!("{}.{key}", self.prefix))
    }

    /// Refuse a file whose `{prefix}.attention.causal` is true: an encoder attends both ways.
    fn bidirectional(&self) -> Result<(), WeightError> {
        let key = format!("{}.attention.causal", self.prefix);
        match self.file.value(&key) {
            None => Ok(()),
            Some(v) if v.to_bool().ok() == Some(false) => Ok(()),
            Some(_) => Err(self.file.meta_err(&key, "an encoder attends both ways (expected false)")),
        }
    }

    /// The rows of the tensor served as `hf` (stored as GGUF `gguf`), which must exist.
    pub fn rows(&self, hf: &str, gguf: &str) -> Result<usize, WeightError> {
        let missing = || WeightError::Missing { path: self.file.path_buf(), name: gguf.to_string() };
        WeightStore::info(self.file, hf).and_then(|i| i.shape.first().copied()).ok_or_else(missing)
    }
}

/// The pooling of `{prefix}.pooling_type` as [`POOLING_FIELD`]'s value (see the module's
/// documentation); `rank` (4) and unknown values refused, naming the key.
pub fn pooling(m: &Meta<'_>) -> Result<Value, WeightError> {
    let key = format!("{}.pooling_type", m.prefix);
    let mode = match m.file.uint(&key)? {
        None | Some(1) => "mean",
        Some(0) => "none",
        Some(2) => "cls",
        Some(3) => "lasttoken",
        Some(4) => {
            return Err(m.file.meta_err(
                &key,
                "4 (rank): a GGUF cross-encoder is not supported (tl runs cross-encoders from their directories)",
            ))
        }
        Some(p) => {
            return Err(m
                .file
                .meta_err(&key, &format!("{p}: not a llama.cpp pooling type tl runs (0 none, 1 mean, 2 cls, 3 last)")))
        }
    };
    Ok(json!(mode))
}

/// config.json's first fields for an encoder family's GGUF: the family (`tl_arch`), its
/// vocabulary rebuilt as a Hugging Face tokenizer, `model_type` and the one class of
/// `architectures`.
pub fn config_head(tl_arch: &str, model_type: &str, class: &str) -> Map<String, Value> {
    let mut cfg = Map::new();
    cfg.insert("tl_arch".into(), json!(tl_arch));
    cfg.insert("tl_tokenizer".into(), json!("hf"));
    cfg.insert("model_type".into(), json!(model_type));
    cfg.insert("architectures".into(), json!([class]));
    cfg
}

/// Refuse a file with a classifier head (`cls.weight`, `cls.output.weight`), naming it.
fn no_classifier(file: &Gguf) -> Result<(), WeightError> {
    for name in ["cls.weight", "cls.output.weight"] {
        if file.has_gguf_tensor(name) {
            return Err(WeightError::Tensor {
                path: file.path_buf(),
                name: name.to_string(),
                reason: "a classifier head (a cross-encoder): llama.cpp's converter leaves out the pooler such a \
                         head reads, so tl runs cross-encoders from their directories only"
                    .into(),
            });
        }
    }
    Ok(())
}

/// Check that every `(gguf name)` the model reads is in the file, naming the first missing.
pub fn require(file: &Gguf, names: impl IntoIterator<Item = String>) -> Result<(), WeightError> {
    for name in names {
        if !file.has_gguf_tensor(&name) {
            return Err(WeightError::Missing { path: file.path_buf(), name });
        }
    }
    Ok(())
}

/// The token id under metadata `key` and its piece in `pieces` (the vocabulary as the
/// directory spells it); `None` when the file has no such key. `Err` names the key.
pub fn special_token(g: &Gguf, key: &str, pieces: &[impl AsRef<str>]) -> Result<Option<(u64, String)>, String> {
    let Some(id) = g.uint(key).map_err(|e| e.to_string())? else { return Ok(None) };
    let piece = pieces
        .get(id as usize)
        .ok_or_else(|| format!("metadata {key}: id {id} is past the {} tokens", pieces.len()))?;
    Ok(Some((id, piece.as_ref().to_string())))
}

/// BERT's template, as a tokenizer.json `TemplateProcessing`: `[CLS] $A [SEP]` for one
/// text, `[CLS] $A [SEP] $B:1 [SEP]:1` for a pair, with the file's cls token
/// (`tokenizer.ggml.bos_token_id`: llama.cpp's converter writes a directory's cls token
/// there) and sep token (`tokenizer.ggml.seperator_token_id`, else `eos_token_id`), their
/// pieces from `pieces`. `Err` names the key that is missing or past the tokens.
pub fn cls_sep_template(g: &Gguf, pieces: &[impl AsRef<str>]) -> Result<Value, String> {
    let need = |key: &str| -> Result<(u64, String), String> {
        special_token(g, key, pieces)?.ok_or_else(|| format!("metadata {key}: missing"))
    };
    let (cls_id, cls) = need("tokenizer.ggml.bos_token_id")?;
    let (sep_id, sep) = match special_token(g, "tokenizer.ggml.seperator_token_id", pieces)? {
        Some(s) => s,
        None => need("tokenizer.ggml.eos_token_id")?,
    };
    let seq = |id: &str, ty: u32| json!({"Sequence": {"id": id, "type_id": ty}});
    let tok = |t: &str, ty: u32| json!({"SpecialToken": {"id": t, "type_id": ty}});
    Ok(json!({
        "type": "TemplateProcessing",
        "single": [tok(&cls, 0), seq("A", 0), tok(&sep, 0)],
        "pair": [tok(&cls, 0), seq("A", 0), tok(&sep, 0), seq("B", 1), tok(&sep, 1)],
        "special_tokens": {
            cls.clone(): {"id": cls, "ids": [cls_id], "tokens": [cls]},
            sep.clone(): {"id": sep, "ids": [sep_id], "tokens": [sep]},
        },
    }))
}

/// A family's GGUF tensor names as Hugging Face's: `top` maps the whole-model tensors'
/// stems (`token_embd`), `layer` a block's (`blk.N.attn_qkv`) under `layers.N.`; the
/// `.weight` / `.bias` suffix is kept. Shared by the encoder families' translations.
pub struct Names {
    /// Whole-model stems and their Hugging Face module names.
    pub top: &'static [(&'static str, &'static str)],
    /// The Hugging Face prefix of block N's modules (`encoder.layer`: `encoder.layer.N.`).
    pub layers: &'static str,
    /// Block stems and their Hugging Face module names under the block.
    pub layer: &'static [(&'static str, &'static str)],
}

impl Names {
    /// The Hugging Face name of `gguf`, or `None` for a name the tables do not hold.
    pub fn hf(&self, gguf: &str) -> Option<String> {
        let (base, kind) = gguf.rsplit_once('.')?;
        if kind != "weight" && kind != "bias" {
            return None;
        }
        let find = |table: &[(&str, &'static str)], key: &str| table.iter().find(|(g, _)| *g == key).map(|(_, h)| *h);
        if let Some(t) = find(self.top, base) {
            return Some(format!("{t}.{kind}"));
        }
        let (layer, part) = base.strip_prefix("blk.")?.split_once('.')?;
        let layer: usize = layer.parse().ok()?;
        let module = find(self.layer, part)?;
        Some(format!("{}.{layer}.{module}.{kind}", self.layers))
    }

    /// [`GgufArch::tensor`]'s answer: the Hugging Face name (a name the tables do not hold
    /// kept as is, so a check for it names what the file holds), rows as stored.
    pub fn map(&self, gguf: &str) -> TensorMap {
        TensorMap { name: self.hf(gguf).unwrap_or_else(|| gguf.to_string()), rows: None }
    }
}

/// The transformers `BertModel` names of BERT's GGUF tensors.
const BERT_NAMES: Names = Names {
    top: &[
        ("token_embd", "embeddings.word_embeddings"),
        ("position_embd", "embeddings.position_embeddings"),
        ("token_types", "embeddings.token_type_embeddings"),
        ("token_embd_norm", "embeddings.LayerNorm"),
    ],
    layers: "encoder.layer",
    layer: &[
        ("attn_q", "attention.self.query"),
        ("attn_k", "attention.self.key"),
        ("attn_v", "attention.self.value"),
        ("attn_output", "attention.output.dense"),
        ("attn_output_norm", "attention.output.LayerNorm"),
        ("ffn_up", "intermediate.dense"),
        ("ffn_down", "output.dense"),
        ("layer_output_norm", "output.LayerNorm"),
    ],
};

/// The BERT translation.
struct BertGguf;

impl GgufArch for BertGguf {
    fn config_json(&self, file: &Gguf) -> Result<Value, WeightError> {
        let m = Meta::encoder(file, "bert")?;
        let layers = m.required("block_count")?;
        let mut need = vec!["token_embd.weight", "position_embd.weight", "token_types.weight"]
            .into_iter()
            .chain(["token_embd_norm.weight", "token_embd_norm.bias"])
            .map(String::from)
            .collect::<Vec<_>>();
        let parts = ["attn_q", "attn_k", "attn_v", "attn_output", "attn_output_norm", "ffn_up", "ffn_down"];
        for i in 0..layers {
            for p in parts.iter().chain(&["layer_output_norm"]) {
                need.extend(["weight", "bias"].map(|k| format!("blk.{i}.{p}.{k}")));
            }
        }
        require(file, need)?;
        let mut cfg = config_head("bert", "bert", "BertModel");
        cfg.insert("hidden_act".into(), json!("gelu"));
        cfg.insert("num_hidden_layers".into(), json!(layers));
        cfg.insert("hidden_size".into(), json!(m.required("embedding_length")?));
        cfg.insert("num_attention_heads".into(), json!(m.required("attention.head_count")?));
        cfg.insert("intermediate_size".into(), json!(m.required("feed_forward_length")?));
        cfg.insert("max_position_embeddings".into(), json!(m.required("context_length")?));
        cfg.insert("vocab_size".into(), json!(m.rows("embeddings.word_embeddings.weight", "token_embd.weight")?));
        let types = m.rows("embeddings.token_type_embeddings.weight", "token_types.weight")?;
        cfg.insert("type_vocab_size".into(), json!(types));
        if let Some(eps) = m.float("attention.layer_norm_epsilon")? {
            cfg.insert("layer_norm_eps".into(), json!(eps));
        }
        cfg.insert(POOLING_FIELD.into(), pooling(&m)?);
        Ok(Value::Object(cfg))
    }

    fn tensor(&self, _file: &Gguf, gguf_name: &str, _info: &TensorInfo) -> Result<TensorMap, WeightError> {
        Ok(BERT_NAMES.map(gguf_name))
    }
}

inventory::submit!(GgufRegistration { architecture: "bert", make: || Box::new(BertGguf) });
