//! BERT's weights and its forward over whole inputs.
//!
//! The inputs' rows are stacked without padding into one `(N, d)` matrix for every
//! projection (tl-quant's kernels compute each output row from its own input row alone);
//! everything else runs per input. So an input's outputs are the same bits in any batch
//! and on any number of threads (docs/spec/encoders.md).

use tl_core::{BuildCtx, EncodeInput, Encoded, Encoder, EncoderInfo, ForwardBatch, ForwardCtx, ForwardOutput};
use tl_core::{Model, ModelError, WeightStore};
use tl_decoder::{f32_bytes, Loader, Proj};
use tl_quant::{Format, Linear, Path};

use crate::config::{Activation, BertConfig, Head};
use crate::gemm::Packed;
use crate::lanes::gelu;
use crate::ops::{add_bias, add_layer_norm, attention};
use crate::pooling::Pipeline;

/// A LayerNorm's weight and bias.
struct Norm {
    w: Vec<f32>,
    b: Vec<f32>,
}

/// A projection's weights: f32 ones in this crate's own panels ([`crate::gemm`], the same
/// bits as tl-quant's f32 kernel), any other weight mode through tl-quant.
enum Weights {
    F32(Packed),
    Quant(Proj),
}

/// A projection and its bias.
struct Dense {
    w: Weights,
    b: Vec<f32>,
}

struct Layer {
    qkv: Dense,
    attn_out: Dense,
    attn_norm: Norm,
    up: Dense,
    down: Dense,
    out_norm: Norm,
}

/// `BertForSequenceClassification`'s head.
struct Classifier {
    pooler: Dense,
    out: Dense,
    activation: Activation,
}

/// A built BERT.
pub struct Bert {
    cfg: BertConfig,
    info: EncoderInfo,
    words: Linear,
    positions: Vec<f32>,
    types: Vec<f32>,
    emb_norm: Norm,
    layers: Vec<Layer>,
    classifier: Option<Classifier>,
    pipeline: Option<Pipeline>,
}

/// The tensors' prefix: `bert.` in a `BertFor...` checkpoint, none in a `BertModel` one.
fn prefix(store: &dyn WeightStore) -> &'static str {
    if store.info("bert.embeddings.word_embeddings.weight").is_some() {
        "bert."
    } else {
        ""
    }
}

fn dense(w: &Loader<'_>, base: &str, out: usize, inp: usize) -> Result<Dense, ModelError> {
    let b = w.vector(&format!("{base}.bias"), out)?;
    Ok(Dense { w: weights(vec![w.proj(base, out, inp)?], &b), b })
}

/// Projections reading the same input, outputs side by side: repacked for
/// [`crate::gemm`] when every part is stored f32 (widening is exact, so the products are
/// the same bits as tl-quant's), else fused (or not) by tl-decoder's `Proj`.
fn weights(parts: Vec<Linear>, bias: &[f32]) -> Weights {
    if parts.iter().all(|l| l.format() == Format::F32) && parts.windows(2).all(|p| p[0].inp() == p[1].inp()) {
        let inp = parts.first().map_or(0, Linear::inp);
        let out: usize = parts.iter().map(Linear::out).sum();
        let mut w = Vec::with_capacity(out * inp);
        for l in &parts {
            w.extend(l.dequantize());
        }
        return Weights::F32(Packed::new(&w, bias, out, inp));
    }
    Weights::Quant(Proj::new(parts))
}

/// A LayerNorm under `base`: `weight`/`bias`, or the TF-era `gamma`/`beta` that
/// transformers still renames on load.
fn norm(w: &Loader<'_>, base: &str, d: usize) -> Result<Norm, ModelError> {
    let (wn, bn) =
        if w.store().info(&format!("{base}.gamma")).is_some() { ("gamma", "beta") } else { ("weight", "bias") };
    Ok(Norm { w: w.vector(&format!("{base}.{wn}"), d)?, b: w.vector(&format!("{base}.{bn}"), d)? })
}

impl Dense {
    fn run(&self, x: &[f32], n: usize, y: &mut [f32], tmp: &mut Vec<f32>, what: &str) -> Result<(), ModelError> {
        match &self.w {
            Weights::F32(p) => {
                if x.len() != n * p.inp() || y.len() != n * p.out() {
                    return Err(ModelError::Other(format!(
                        "{what}: buffers of {} and {} floats for {n} rows",
                        x.len(),
                        y.len()
                    )));
                }
                // The bias is added in the kernel's store.
                p.forward(Path::best(), x, n, y)
            }
            Weights::Quant(w) => {
                w.forward(x, n, y, tmp, what)?;
                add_bias(y, &self.b)
            }
        }
        Ok(())
    }

    fn bytes(&self) -> usize {
        match &self.w {
            Weights::F32(p) => p.bytes(),
            Weights::Quant(w) => w.packed_bytes() + f32_bytes(&self.b),
        }
    }
}

impl Bert {
    /// Build from `ctx`'s weights; `pipeline` is the directory's sentence-transformers
    /// modules, if any.
    pub fn build(ctx: &BuildCtx<'_>, cfg: &BertConfig, pipeline: Option<Pipeline>) -> Result<Bert, ModelError> {
        let w = Loader::new(ctx)?;
        let p = prefix(ctx.weights);
        let (d, inter, vocab) = (cfg.hidden_size, cfg.intermediate_size, ctx.config.vocab_size);
        let e = format!("{p}embeddings");
        let words = w.matrix(&format!("{e}.word_embeddings.weight"), vocab, d)?;
        let positions = w.store().f32(&format!("{e}.position_embeddings.weight"), &[cfg.max_position_embeddings, d])?;
        let types = w.store().f32(&format!("{e}.token_type_embeddings.weight"), &[cfg.type_vocab_size, d])?;
        let emb_norm = norm(&w, &format!("{e}.LayerNorm"), d)?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let l = format!("{p}encoder.layer.{i}");
            let a = format!("{l}.attention");
            let parts = ["query", "key", "value"].map(|n| format!("{a}.self.{n}"));
            let mut qkv_w = Vec::with_capacity(3);
            let mut qkv_b = Vec::with_capacity(3 * d);
            for base in &parts {
                qkv_w.push(w.proj(base, d, d)?);
                qkv_b.extend(w.vector(&format!("{base}.bias"), d)?);
            }
            layers.push(Layer {
                qkv: Dense { w: weights(qkv_w, &qkv_b), b: qkv_b },
                attn_out: dense(&w, &format!("{a}.output.dense"), d, d)?,
                attn_norm: norm(&w, &format!("{a}.output.LayerNorm"), d)?,
                up: dense(&w, &format!("{l}.intermediate.dense"), inter, d)?,
                down: dense(&w, &format!("{l}.output.dense"), d, inter)?,
                out_norm: norm(&w, &format!("{l}.output.LayerNorm"), d)?,
            });
        }
        let classifier = match cfg.head {
            Head::None => None,
            Head::Classifier { labels, activation } => Some(Classifier {
                pooler: dense(&w, &format!("{p}pooler.dense"), d, d)?,
                out: dense(&w, "classifier", labels, d)?,
                activation,
            }),
        };
        let info = EncoderInfo {
            hidden_size: d,
            max_tokens: cfg.max_position_embeddings,
            type_vocab: cfg.type_vocab_size,
            vector: pipeline.as_ref().map(|p| p.modes.len() * d),
            normalized: pipeline.as_ref().is_some_and(|p| p.normalize),
            scores: match cfg.head {
                Head::None => None,
                Head::Classifier { labels, .. } => Some(labels),
            },
        };
        Ok(Bert { cfg: cfg.clone(), info, words, positions, types, emb_norm, layers, classifier, pipeline })
    }

    /// The embeddings of every input's tokens into `x` `(N, d)`: `(word + type) +
    /// position` (transformers' order), then the embedding LayerNorm.
    fn embed(&self, inputs: &[EncodeInput<'_>], x: &mut [f32]) -> Result<(), ModelError> {
        let d = self.cfg.hidden_size;
        let mut rows = x.chunks_exact_mut(d);
        for input in inputs {
            for (pos, &id) in input.ids.iter().enumerate() {
                let row = rows.next().ok_or_else(|| ModelError::Other("embedding rows ran out".into()))?;
                self.words.row(id as usize, row).map_err(|e| ModelError::Other(format!("embedding: {e}")))?;
                let ty = input.type_ids.map_or(0, |t| t[pos] as usize);
                for ((v, &tv), &pv) in row.iter_mut().zip(&self.types[ty * d..]).zip(&self.positions[pos * d..]) {
                    *v = (*v + tv) + pv;
                }
            }
        }
        add_layer_norm(Path::best(), x, None, &self.emb_norm.w, &self.emb_norm.b, self.cfg.layer_norm_eps);
        Ok(())
    }

    /// The last hidden states `(N, d)` of every input, rows stacked in input order.
    fn hidden(&self, inputs: &[EncodeInput<'_>]) -> Result<Vec<f32>, ModelError> {
        let (d, heads, hd) = (self.cfg.hidden_size, self.cfg.num_attention_heads, self.cfg.head_dim());
        let n: usize = inputs.iter().map(|i| i.ids.len()).sum();
        let eps = self.cfg.layer_norm_eps;
        let path = Path::best();
        let lens: Vec<usize> = inputs.iter().map(|i| i.ids.len()).collect();
        let mut x = vec![0f32; n * d];
        self.embed(inputs, &mut x)?;
        let (mut qkv, mut ctx) = (vec![0f32; n * 3 * d], vec![0f32; n * d]);
        let (mut y, mut mid, mut tmp) = (vec![0f32; n * d], vec![0f32; n * self.cfg.intermediate_size], Vec::new());
        for (i, l) in self.layers.iter().enumerate() {
            l.qkv.run(&x, n, &mut qkv, &mut tmp, &format!("layer {i} q/k/v"))?;
            attention(path, &qkv, &lens, heads, hd, &mut ctx);
            l.attn_out.run(&ctx, n, &mut y, &mut tmp, &format!("layer {i} attention output"))?;
            add_layer_norm(path, &mut y, Some(&x), &l.attn_norm.w, &l.attn_norm.b, eps);
            l.up.run(&y, n, &mut mid, &mut tmp, &format!("layer {i} intermediate"))?;
            gelu(path, &mut mid);
            l.down.run(&mid, n, &mut x, &mut tmp, &format!("layer {i} output"))?;
            add_layer_norm(path, &mut x, Some(&y), &l.out_norm.w, &l.out_norm.b, eps);
        }
        Ok(x)
    }

    /// The classifier's outputs for one input's hidden states (its first row).
    fn scores(&self, c: &Classifier, h: &[f32]) -> Result<Vec<f32>, ModelError> {
        let d = self.cfg.hidden_size;
        let (mut pooled, mut tmp) = (vec![0f32; d], Vec::new());
        c.pooler.run(&h[..d], 1, &mut pooled, &mut tmp, "pooler")?;
        pooled.iter_mut().for_each(|v| *v = v.tanh());
        let mut out = vec![0f32; c.out.b.len()];
        c.out.run(&pooled, 1, &mut out, &mut tmp, "classifier")?;
        for v in out.iter_mut() {
            *v = match c.activation {
                Activation::Identity => *v,
                Activation::Sigmoid => 1.0 / (1.0 + (-*v).exp()),
                Activation::Tanh => v.tanh(),
            };
        }
        Ok(out)
    }
}

impl Encoder for Bert {
    fn info(&self) -> &EncoderInfo {
        &self.info
    }

    fn encode(&self, inputs: &[EncodeInput<'_>], want_hidden: bool) -> Result<Vec<Encoded>, ModelError> {
        let d = self.cfg.hidden_size;
        let h = self.hidden(inputs)?;
        let mut out = Vec::with_capacity(inputs.len());
        let mut at = 0;
        for input in inputs {
            let rows = &h[at * d..(at + input.ids.len()) * d];
            at += input.ids.len();
            out.push(Encoded {
                hidden: want_hidden.then(|| rows.to_vec()),
                vector: self.pipeline.as_ref().map(|p| p.pool(rows, d)),
                scores: self.classifier.as_ref().map(|c| self.scores(c, rows)).transpose()?,
            });
        }
        Ok(out)
    }
}

impl Model for Bert {
    fn hidden_size(&self) -> usize {
        self.cfg.hidden_size
    }

    fn weight_bytes(&self) -> Option<usize> {
        let norms = |n: &Norm| f32_bytes(&n.w) + f32_bytes(&n.b);
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                l.qkv.bytes()
                    + l.attn_out.bytes()
                    + l.up.bytes()
                    + l.down.bytes()
                    + norms(&l.attn_norm)
                    + norms(&l.out_norm)
            })
            .sum();
        let head = self.classifier.as_ref().map_or(0, |c| c.pooler.bytes() + c.out.bytes());
        Some(
            self.words.packed_bytes()
                + f32_bytes(&self.positions)
                + f32_bytes(&self.types)
                + norms(&self.emb_norm)
                + layers
                + head,
        )
    }

    fn forward(&self, _: &ForwardBatch, _: &mut ForwardCtx<'_>) -> Result<ForwardOutput, ModelError> {
        Err(ModelError::BadBatch("BERT is an encoder: it answers encode, not forward steps".into()))
    }

    fn encoder(&self) -> Option<&dyn Encoder> {
        Some(self)
    }
}
