//! tl-arch-nomic-bert: nomic-bert encoders (nomic-ai/nomic-embed-text-v1 and v1.5, and
//! nomic-bert-2048's encoder), registered as `tl_arch = "nomic_bert"` and as Hugging Face
//! `model_type = "nomic_bert"`. An encoder (docs/spec/encoders.md).
//!
//! nomic-bert is a post-norm BERT (arch-bert's [`Bert`] forward, built here from other
//! tensors): word + token-type embeddings and `emb_ln` (no absolute positions); per layer
//! a fused `Wqkv` (q, k, v rows, heads contiguous within each), rotate-half RoPE on the
//! first `rotary_emb_fraction` of each head (base `rotary_emb_base`, each input from
//! position 0), bidirectional attention, `out_proj`, `norm1` over the residual sum, then a
//! SwiGLU `fc2(fc11(x) * silu(fc12(x)))` and `norm2` over the residual sum. Biases follow
//! `qkv_proj_bias` (Wqkv and out_proj), `mlp_fc1_bias` and `mlp_fc2_bias`
//! (nomic-embed-text has none). Vectors are sentence-transformers' modules (arch-bert's
//! [`Pipeline`]: nomic-embed-text's mean and Normalize); the task prefixes
//! (`search_query: `, ...) are the caller's text.
//!
//! The modeling code is the Hub's (trust_remote_code); transformers 5.23 has its own
//! `NomicBertModel` too, which reads the same tensors renamed. Both checkpoint layouts are
//! read: the Hub's (`encoder.layers.N.attn.Wqkv`, `mlp.fc11`, `norm1`, ...) and
//! transformers' (`layers.N.self_attn.q_proj`, `mlp.up_proj`, `post_attention_layernorm`,
//! ...), and both configs (`n_embd`, ... or `hidden_size`, ...).
//!
//! GGUF files of nomic-bert (llama.cpp's converter, `general.architecture = "nomic-bert"`)
//! are read too ([`gguf`]'s translation to the Hub's names).
//!
//! Refused at load, naming the field: another MLP than SwiGLU, pre-norm, causal or
//! parallel blocks, RMSNorm, absolute positions (`rotary_emb_fraction` 0), interleaved,
//! xPos or NTK-scaled rotary, the MoE variant, other heads.
//!
//! Nothing names this crate from core: a binary or test that loads a nomic-bert writes
//! `use tl_arch_nomic_bert as _;` (or links tl-families) so the registrations are linked.
#![deny(missing_docs)]

use std::any::Any;
use std::sync::Arc;

use tl_arch_bert::parts::{Dense, Norm};
use tl_arch_bert::{Bert, BertConfig, Embeddings, Ffn, Head, Layer, Pipeline};
use tl_core::{
    ArchRegistration, Architecture, BuildCtx, ConfigError, KvGeometry, Model, ModelConfig, ModelError,
    ModelTypeRegistration, WeightStore,
};
use tl_decoder::{inv_freq_default, Loader, Rope};

pub mod config;
mod gguf;

pub use config::NomicBertConfig;
// From text to outputs: core's, shared by every encoder family.
pub use tl_core::encoder_text::{embed, load, score, TextError, Texts, Tokens};

/// Where a checkpoint layout keeps each tensor (`{p}` the prefix, `{i}` the layer).
struct Names {
    emb_norm: &'static str,
    layer: &'static str,
    qkv: &'static [&'static str],
    out: &'static str,
    norm1: &'static str,
    /// The SwiGLU's gate, then up.
    gate_up: [&'static str; 2],
    down: &'static str,
    norm2: &'static str,
}

/// The Hub's layout (nomic's modeling code; llama.cpp's converter reads it).
const HUB: Names = Names {
    emb_norm: "emb_ln",
    layer: "encoder.layers",
    qkv: &["attn.Wqkv"],
    out: "attn.out_proj",
    norm1: "norm1",
    gate_up: ["mlp.fc12", "mlp.fc11"],
    down: "mlp.fc2",
    norm2: "norm2",
};

/// transformers 5's layout (its conversion mapping's names for the Hub's tensors).
const TRANSFORMERS: Names = Names {
    emb_norm: "embeddings.LayerNorm",
    layer: "layers",
    qkv: &["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
    out: "self_attn.o_proj",
    norm1: "post_attention_layernorm",
    gate_up: ["mlp.gate_proj", "mlp.up_proj"],
    down: "mlp.down_proj",
    norm2: "post_mlp_layernorm",
};

/// The checkpoint's prefix (`bert.` in nomic-bert-2048's pretraining checkpoint) and layout.
fn layout(store: &dyn WeightStore) -> (&'static str, &'static Names) {
    let p = if store.info("bert.embeddings.word_embeddings.weight").is_some() { "bert." } else { "" };
    let names =
        if store.info(&format!("{p}layers.0.self_attn.q_proj.weight")).is_some() { &TRANSFORMERS } else { &HUB };
    (p, names)
}

/// Build a nomic-bert as arch-bert's post-norm encoder.
fn build(ctx: &BuildCtx<'_>, cfg: &NomicBertConfig, pipeline: Option<Pipeline>) -> Result<Bert, ModelError> {
    let w = Loader::new(ctx)?;
    let (p, n) = layout(ctx.weights);
    let (d, inter, vocab) = (cfg.hidden_size, cfg.intermediate_size, ctx.config.vocab_size);
    let types = if cfg.type_vocab_size == 0 {
        Vec::new()
    } else {
        w.store().f32(&format!("{p}embeddings.token_type_embeddings.weight"), &[cfg.type_vocab_size, d])?
    };
    let emb = Embeddings {
        words: w.matrix(&format!("{p}embeddings.word_embeddings.weight"), vocab, d)?,
        positions: None,
        types,
        norm: Norm::load(&w, &format!("{p}{}", n.emb_norm), d, true)?,
    };
    let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
    for i in 0..cfg.num_hidden_layers {
        let l = format!("{p}{}.{i}", n.layer);
        let at = |s: &str| format!("{l}.{s}");
        let qkv: Vec<String> = n.qkv.iter().map(|s| at(s)).collect();
        let qkv: Vec<&str> = qkv.iter().map(String::as_str).collect();
        let per = 3 * d / qkv.len();
        let gate_up = n.gate_up.map(at);
        layers.push(Layer {
            qkv: Dense::fused(&w, &qkv, per, d, cfg.qkv_bias)?,
            attn_out: Dense::load(&w, &at(n.out), d, d, cfg.qkv_bias)?,
            attn_norm: Norm::load(&w, &at(n.norm1), d, true)?,
            ffn: Ffn::SwiGlu {
                gate_up: Dense::fused(&w, &[&gate_up[0], &gate_up[1]], inter, d, cfg.fc1_bias)?,
                down: Dense::load(&w, &at(n.down), d, inter, cfg.fc2_bias)?,
            },
            out_norm: Norm::load(&w, &at(n.norm2), d, true)?,
        });
    }
    let shape = BertConfig {
        hidden_size: d,
        num_hidden_layers: cfg.num_hidden_layers,
        num_attention_heads: cfg.num_attention_heads,
        intermediate_size: inter,
        max_position_embeddings: cfg.max_positions,
        type_vocab_size: cfg.type_vocab_size,
        layer_norm_eps: cfg.layer_norm_eps,
        head: Head::None,
    };
    let rope = Rope::plain(inv_freq_default(cfg.rotary_base, cfg.rotary_dim));
    Ok(Bert::assemble(&shape, emb, layers, Some(rope), pipeline))
}

/// The architecture object.
pub struct NomicBertArch;

impl Architecture for NomicBertArch {
    fn parse_config(&self, config: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError> {
        Ok(Arc::new(NomicBertConfig::parse(config)?))
    }

    fn kv_geometry(&self, config: &ModelConfig, _: u32) -> Result<KvGeometry, ConfigError> {
        Err(tl_arch_bert::parts::no_kv(config, "nomic-bert"))
    }

    fn is_encoder(&self, _: &ModelConfig) -> bool {
        true
    }

    fn build(&self, ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
        let cfg: &NomicBertConfig = ctx.config.arch_config()?;
        let pipeline = Pipeline::of_model(ctx.config, cfg.hidden_size, true)?;
        Ok(Box::new(build(&ctx, cfg, pipeline)?))
    }
}

inventory::submit!(ArchRegistration { name: "nomic_bert", make: || Box::new(NomicBertArch) });
inventory::submit!(ModelTypeRegistration { model_type: "nomic_bert", arch: "nomic_bert" });
