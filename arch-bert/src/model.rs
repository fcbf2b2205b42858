//! BERT's weights and its forward over whole inputs.
//!
//! The inputs' rows are stacked without padding into one `(N, d)` matrix for every
//! projection (tl-quant's kernels compute each output row from its own input row alone);
//! everything else runs per input. So an input's outputs are the same bits in any batch
//! and on any number of threads (docs/spec/encoders.md).

use tl_core::{BuildCtx, EncodeInput, EncoderInfo, ModelError, WeightStore};
use tl_decoder::{f32_bytes, swiglu, Loader, Rope, RopeTables};
use tl_quant::{Linear, Path};

use crate::config::{BertConfig, Head};
use crate::lanes::gelu;
use crate::ops::{add_layer_norm, attention};
use crate::parts::{positions, Dense, Logits, Norm};
use crate::pooling::Pipeline;

/// A post-norm layer's feed-forward block.
pub enum Ffn {
    /// BERT's: `down(gelu(up(x)))`, GELU by erf.
    Gelu {
        /// `[I, d]`.
        up: Dense,
        /// `[d, I]`.
        down: Dense,
    },
    /// A SwiGLU (nomic-bert's): `down(silu(gate(x)) * up(x))`, gate and up fused in that
    /// order (tl-decoder's `swiglu` layout).
    SwiGlu {
        /// `[2I, d]`: gate rows, then up rows.
        gate_up: Dense,
        /// `[d, I]`.
        down: Dense,
    },
}

/// One post-norm layer: `y = LN(x + out(attn(qkv(x))))`, `x = LN(y + ffn(y))`.
pub struct Layer {
    /// `[3d, d]`: query, key and value rows (heads contiguous within each).
    pub qkv: Dense,
    /// `[d, d]`.
    pub attn_out: Dense,
    /// After the attention's residual add.
    pub attn_norm: Norm,
    /// The feed-forward block.
    pub ffn: Ffn,
    /// After the feed-forward's residual add.
    pub out_norm: Norm,
}

/// The embeddings: `LN((word + type) + position)`.
pub struct Embeddings {
    /// `[vocab, d]`, read one row per token.
    pub words: Linear,
    /// `(positions, d)`, or none (rotary models).
    pub positions: Option<Vec<f32>>,
    /// `(types, d)`, or empty (no token types).
    pub types: Vec<f32>,
    /// The embedding LayerNorm.
    pub norm: Norm,
}

/// `BertForSequenceClassification`'s head.
struct Classifier {
    pooler: Dense,
    logits: Logits,
}

/// A built post-norm BERT-style encoder (BERT itself, and nomic-bert: rotary positions
/// and a SwiGLU).
pub struct Bert {
    cfg: BertConfig,
    info: EncoderInfo,
    emb: Embeddings,
    layers: Vec<Layer>,
    rope: Option<Rope>,
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

impl Bert {
    /// Build a BERT from `ctx`'s weights; `pipeline` is the directory's
    /// sentence-transformers modules, if any.
    pub fn build(ctx: &BuildCtx<'_>, cfg: &BertConfig, pipeline: Option<Pipeline>) -> Result<Bert, ModelError> {
        let w = Loader::new(ctx)?;
        let p = prefix(ctx.weights);
        let (d, inter, vocab) = (cfg.hidden_size, cfg.intermediate_size, ctx.config.vocab_size);
        let e = format!("{p}embeddings");
        let emb = Embeddings {
            words: w.matrix(&format!("{e}.word_embeddings.weight"), vocab, d)?,
            positions: Some(
                w.store().f32(&format!("{e}.position_embeddings.weight"), &[cfg.max_position_embeddings, d])?,
            ),
            types: w.store().f32(&format!("{e}.token_type_embeddings.weight"), &[cfg.type_vocab_size, d])?,
            norm: Norm::load(&w, &format!("{e}.LayerNorm"), d, true)?,
        };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let l = format!("{p}encoder.layer.{i}");
            let a = format!("{l}.attention");
            let qkv = ["query", "key", "value"].map(|n| format!("{a}.self.{n}"));
            layers.push(Layer {
                qkv: Dense::fused(&w, &qkv.each_ref().map(String::as_str), d, d, true)?,
                attn_out: Dense::load(&w, &format!("{a}.output.dense"), d, d, true)?,
                attn_norm: Norm::load(&w, &format!("{a}.output.LayerNorm"), d, true)?,
                ffn: Ffn::Gelu {
                    up: Dense::load(&w, &format!("{l}.intermediate.dense"), inter, d, true)?,
                    down: Dense::load(&w, &format!("{l}.output.dense"), d, inter, true)?,
                },
                out_norm: Norm::load(&w, &format!("{l}.output.LayerNorm"), d, true)?,
            });
        }
        let classifier = match cfg.head {
            Head::None => None,
            Head::Classifier { labels, activation } => Some(Classifier {
                pooler: Dense::load(&w, &format!("{p}pooler.dense"), d, d, true)?,
                logits: Logits { out: Dense::load(&w, "classifier", labels, d, true)?, activation },
            }),
        };
        let mut bert = Bert::assemble(cfg, emb, layers, None, pipeline);
        bert.classifier = classifier;
        Ok(bert)
    }

    /// A BERT-style encoder of these parts, without a classifier (`cfg.head` is not read):
    /// another family's weights under BERT's forward, with `rope` applied to q and k
    /// (rotate-half, each input from position 0) when given.
    pub fn assemble(
        cfg: &BertConfig,
        emb: Embeddings,
        layers: Vec<Layer>,
        rope: Option<Rope>,
        pipeline: Option<Pipeline>,
    ) -> Bert {
        let d = cfg.hidden_size;
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
        Bert { cfg: cfg.clone(), info, emb, layers, rope, classifier: None, pipeline }
    }

    /// The embeddings of every input's tokens into `x` `(N, d)`: `(word + type) +
    /// position` (transformers' order; a term the model lacks is left out), then the
    /// embedding LayerNorm.
    fn embed(&self, inputs: &[EncodeInput<'_>], x: &mut [f32]) -> Result<(), ModelError> {
        let d = self.cfg.hidden_size;
        let e = &self.emb;
        let mut rows = x.chunks_exact_mut(d);
        for input in inputs {
            for (pos, &id) in input.ids.iter().enumerate() {
                let row = rows.next().ok_or_else(|| ModelError::Other("embedding rows ran out".into()))?;
                e.words.row(id as usize, row).map_err(|e| ModelError::Other(format!("embedding: {e}")))?;
                if !e.types.is_empty() {
                    let ty = input.type_ids.map_or(0, |t| t[pos] as usize);
                    row.iter_mut().zip(&e.types[ty * d..]).for_each(|(v, &tv)| *v += tv);
                }
                if let Some(p) = &e.positions {
                    row.iter_mut().zip(&p[pos * d..]).for_each(|(v, &pv)| *v += pv);
                }
            }
        }
        add_layer_norm(Path::best(), x, None, &e.norm.w, &e.norm.b, self.cfg.layer_norm_eps);
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
        let mut tables = RopeTables::default();
        if let Some(rope) = &self.rope {
            tables.fill(&positions(&lens), rope);
        }
        let inter = self.cfg.intermediate_size;
        let (mut qkv, mut ctx) = (vec![0f32; n * 3 * d], vec![0f32; n * d]);
        let (mut y, mut mid, mut tmp) = (vec![0f32; n * d], vec![0f32; n * inter], Vec::new());
        let mut gu = Vec::new();
        for (i, l) in self.layers.iter().enumerate() {
            l.qkv.run(&x, n, &mut qkv, &mut tmp, &format!("layer {i} q/k/v"))?;
            if self.rope.is_some() {
                tables.apply(&mut qkv, 3 * d, 0, 2 * heads, hd);
            }
            attention(path, &qkv, &lens, (heads, hd), None, &mut ctx);
            l.attn_out.run(&ctx, n, &mut y, &mut tmp, &format!("layer {i} attention output"))?;
            add_layer_norm(path, &mut y, Some(&x), &l.attn_norm.w, &l.attn_norm.b, eps);
            let down = match &l.ffn {
                Ffn::Gelu { up, down } => {
                    up.run(&y, n, &mut mid, &mut tmp, &format!("layer {i} intermediate"))?;
                    gelu(path, &mut mid);
                    down
                }
                Ffn::SwiGlu { gate_up, down } => {
                    gu.resize(n * 2 * inter, 0.0);
                    gate_up.run(&y, n, &mut gu, &mut tmp, &format!("layer {i} gate/up"))?;
                    swiglu(path, &gu, &mut mid, inter);
                    down
                }
            };
            down.run(&mid, n, &mut x, &mut tmp, &format!("layer {i} output"))?;
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
        c.logits.run(&pooled, &mut tmp)
    }

    /// Bytes of weights held.
    fn bytes(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                let ffn = match &l.ffn {
                    Ffn::Gelu { up, down } => up.bytes() + down.bytes(),
                    Ffn::SwiGlu { gate_up, down } => gate_up.bytes() + down.bytes(),
                };
                l.qkv.bytes() + l.attn_out.bytes() + ffn + l.attn_norm.bytes() + l.out_norm.bytes()
            })
            .sum();
        let head = self.classifier.as_ref().map_or(0, |c| c.pooler.bytes() + c.logits.out.bytes());
        let e = &self.emb;
        let positions = e.positions.as_deref().map_or(0, f32_bytes);
        e.words.packed_bytes() + positions + f32_bytes(&e.types) + e.norm.bytes() + layers + head
    }
}

crate::encoder_model!(Bert, "BERT");
