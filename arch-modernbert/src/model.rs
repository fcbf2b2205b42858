//! ModernBERT's weights and its forward over whole inputs, from arch-bert's parts: the
//! inputs' rows stacked without padding for every projection, attention per input and
//! head, everything else per row, so an input's outputs are the same bits in any batch
//! and on any number of threads (docs/spec/encoders.md).

use rayon::prelude::*;
use tl_arch_bert::lanes::gelu;
use tl_arch_bert::ops::{add_layer_norm, attention};
use tl_arch_bert::parts::{positions, Dense, Logits, Norm};
use tl_arch_bert::{Head, Mode, Pipeline};
use tl_core::{BuildCtx, EncodeInput, EncoderInfo, ModelError};
use tl_decoder::{add, f32_bytes, inv_freq_default, Loader, Rope, RopeTables};
use tl_quant::{Linear, Path};

use crate::config::{ModernBertConfig, Pooling};

struct Layer {
    /// None on layer 0 (transformers' `nn.Identity`: the embedding norm precedes it).
    attn_norm: Option<Norm>,
    qkv: Dense,
    attn_out: Dense,
    mlp_norm: Norm,
    /// `[2I, d]`: the GELU's input rows, then the gate's.
    wi: Dense,
    wo: Dense,
}

/// `ModernBertForSequenceClassification`'s head: `classifier(norm(gelu(dense(pooled))))`.
struct Classifier {
    pool: Pipeline,
    dense: Dense,
    norm: Norm,
    logits: Logits,
}

/// A built ModernBERT.
pub struct ModernBert {
    cfg: ModernBertConfig,
    info: EncoderInfo,
    words: Linear,
    emb_norm: Norm,
    layers: Vec<Layer>,
    final_norm: Norm,
    global: Rope,
    local: Rope,
    classifier: Option<Classifier>,
    pipeline: Option<Pipeline>,
}

/// `x = LayerNorm(x)` in place on every row.
fn norm(x: &mut [f32], n: &Norm, eps: f32) {
    add_layer_norm(Path::best(), x, None, &n.w, &n.b, eps);
}

/// ModernBERT's GeGLU per row (transformers' `ModernBertMLP`): `act = gelu(a) * g` where
/// `wi` `(rows, 2I)` holds `a` then `g`; GELU by erf (arch-bert's), the product rounded once.
fn geglu(wi: &[f32], act: &mut [f32], inter: usize) {
    act.par_chunks_exact_mut(inter).zip(wi.par_chunks_exact(2 * inter)).with_min_len(16).for_each(|(a, row)| {
        let (x, g) = row.split_at(inter);
        a.copy_from_slice(x);
        gelu(Path::best(), a);
        a.iter_mut().zip(g).for_each(|(v, &gv)| *v *= gv);
    });
}

impl ModernBert {
    /// Build from `ctx`'s weights; `pipeline` is the directory's sentence-transformers
    /// modules, if any.
    pub fn build(
        ctx: &BuildCtx<'_>,
        cfg: &ModernBertConfig,
        pipeline: Option<Pipeline>,
    ) -> Result<ModernBert, ModelError> {
        let w = Loader::new(ctx)?;
        // `ModernBertFor...` checkpoints hold the encoder under `model.`.
        let p = if ctx.weights.info("model.embeddings.tok_embeddings.weight").is_some() { "model." } else { "" };
        let (d, inter, vocab) = (cfg.hidden_size, cfg.intermediate_size, ctx.config.vocab_size);
        let (nb, ab, mb) = (cfg.norm_bias, cfg.attention_bias, cfg.mlp_bias);
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let l = format!("{p}layers.{i}");
            layers.push(Layer {
                attn_norm: if i == 0 { None } else { Some(Norm::load(&w, &format!("{l}.attn_norm"), d, nb)?) },
                qkv: Dense::load(&w, &format!("{l}.attn.Wqkv"), 3 * d, d, ab)?,
                attn_out: Dense::load(&w, &format!("{l}.attn.Wo"), d, d, ab)?,
                mlp_norm: Norm::load(&w, &format!("{l}.mlp_norm"), d, nb)?,
                wi: Dense::load(&w, &format!("{l}.mlp.Wi"), 2 * inter, d, mb)?,
                wo: Dense::load(&w, &format!("{l}.mlp.Wo"), d, inter, mb)?,
            });
        }
        let classifier = match cfg.head {
            Head::None => None,
            Head::Classifier { labels, activation } => Some(Classifier {
                pool: Pipeline {
                    modes: vec![if cfg.pooling == Pooling::Cls { Mode::Cls } else { Mode::Mean }],
                    normalize: false,
                },
                dense: Dense::load(&w, "head.dense", d, d, cfg.classifier_bias)?,
                norm: Norm::load(&w, "head.norm", d, nb)?,
                logits: Logits { out: Dense::load(&w, "classifier", labels, d, true)?, activation },
            }),
        };
        let hd = cfg.head_dim();
        let info = EncoderInfo {
            hidden_size: d,
            max_tokens: cfg.max_position_embeddings,
            // No token types: a pair's type ids are not read.
            type_vocab: 0,
            vector: pipeline.as_ref().map(|p| p.modes.len() * d),
            normalized: pipeline.as_ref().is_some_and(|p| p.normalize),
            scores: classifier.as_ref().map(|c| c.logits.out.out()),
        };
        Ok(ModernBert {
            cfg: cfg.clone(),
            info,
            words: w.matrix(&format!("{p}embeddings.tok_embeddings.weight"), vocab, d)?,
            emb_norm: Norm::load(&w, &format!("{p}embeddings.norm"), d, nb)?,
            layers,
            final_norm: Norm::load(&w, &format!("{p}final_norm"), d, nb)?,
            global: Rope::plain(inv_freq_default(cfg.global_theta, hd)),
            local: Rope::plain(inv_freq_default(cfg.local_theta, hd)),
            classifier,
            pipeline,
        })
    }

    /// The last hidden states `(N, d)` of every input, rows stacked in input order.
    fn hidden(&self, inputs: &[EncodeInput<'_>]) -> Result<Vec<f32>, ModelError> {
        let cfg = &self.cfg;
        let (d, heads, hd, inter, eps) =
            (cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim(), cfg.intermediate_size, cfg.norm_eps);
        let path = Path::best();
        let lens: Vec<usize> = inputs.iter().map(|i| i.ids.len()).collect();
        let n: usize = lens.iter().sum();
        let mut x = vec![0f32; n * d];
        for (row, &id) in x.chunks_exact_mut(d).zip(inputs.iter().flat_map(|i| i.ids)) {
            self.words.row(id as usize, row).map_err(|e| ModelError::Other(format!("embedding: {e}")))?;
        }
        norm(&mut x, &self.emb_norm, eps);
        let pos = positions(&lens);
        let (mut global, mut local) = (RopeTables::default(), RopeTables::default());
        global.fill(&pos, &self.global);
        local.fill(&pos, &self.local);
        let (mut y, mut qkv, mut ctx) = (vec![0f32; n * d], vec![0f32; n * 3 * d], vec![0f32; n * d]);
        let (mut wi, mut act, mut tmp) = (vec![0f32; n * 2 * inter], vec![0f32; n * inter], Vec::new());
        for (i, l) in self.layers.iter().enumerate() {
            y.copy_from_slice(&x);
            if let Some(an) = &l.attn_norm {
                norm(&mut y, an, eps);
            }
            l.qkv.run(&y, n, &mut qkv, &mut tmp, &format!("layer {i} Wqkv"))?;
            let is_global = cfg.global[i];
            let tables = if is_global { &global } else { &local };
            tables.apply(&mut qkv, 3 * d, 0, 2 * heads, hd);
            attention(path, &qkv, &lens, (heads, hd), (!is_global).then_some(cfg.window), &mut ctx);
            l.attn_out.run(&ctx, n, &mut y, &mut tmp, &format!("layer {i} attention Wo"))?;
            add(&mut x, &y, d);
            y.copy_from_slice(&x);
            norm(&mut y, &l.mlp_norm, eps);
            l.wi.run(&y, n, &mut wi, &mut tmp, &format!("layer {i} Wi"))?;
            geglu(&wi, &mut act, inter);
            l.wo.run(&act, n, &mut y, &mut tmp, &format!("layer {i} mlp Wo"))?;
            add(&mut x, &y, d);
        }
        norm(&mut x, &self.final_norm, eps);
        Ok(x)
    }

    /// The classifier's outputs for one input's hidden states.
    fn scores(&self, c: &Classifier, h: &[f32]) -> Result<Vec<f32>, ModelError> {
        let d = self.cfg.hidden_size;
        let pooled = c.pool.pool(h, d);
        let (mut x, mut tmp) = (vec![0f32; d], Vec::new());
        c.dense.run(&pooled, 1, &mut x, &mut tmp, "head.dense")?;
        gelu(Path::best(), &mut x);
        norm(&mut x, &c.norm, self.cfg.norm_eps);
        c.logits.run(&x, &mut tmp)
    }

    /// Bytes of weights held.
    fn bytes(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                l.attn_norm.as_ref().map_or(0, Norm::bytes)
                    + l.qkv.bytes()
                    + l.attn_out.bytes()
                    + l.mlp_norm.bytes()
                    + l.wi.bytes()
                    + l.wo.bytes()
            })
            .sum();
        let head = self.classifier.as_ref().map_or(0, |c| c.dense.bytes() + c.norm.bytes() + c.logits.out.bytes());
        let ropes = f32_bytes(&self.global.inv_freq) + f32_bytes(&self.local.inv_freq);
        self.words.packed_bytes() + self.emb_norm.bytes() + layers + self.final_norm.bytes() + head + ropes
    }
}

tl_arch_bert::encoder_model!(ModernBert, "ModernBERT");
