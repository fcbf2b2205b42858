//! LoRA adapters in a step (docs/spec/numbers.md, "Adapters"): after a projection's
//! `W x` (and its bias), each row whose sequence has an adapter that names the projection
//! gets `+ s * B (A x)`.
//!
//! A step's rows are grouped by adapter ([`LoraRows`]), so each adapter's `A` and `B` are
//! read once per step however many of its rows there are. Grouping cannot change a
//! row's bits: `A` and `B` are f32 `tl_quant::Linear`s, each of whose output elements is
//! one FMA chain over its inputs in ascending order from +0.0 whatever the other rows;
//! the scale is `f32(alpha / r) * request_scale` (one f32 product), and the add is one
//! f32 product `s * u` then one f32 sum into the base result, in that order. Rows without
//! an adapter are never touched: their arithmetic is the unadapted model's, bit for bit.

use tl_core::{Adaptable, Applied, ForwardBatch, ModelError};

use crate::proj::grow;

/// One adaptable projection of a block: its module name and where its outputs go.
#[derive(Clone, Debug)]
pub struct Target {
    /// Hugging Face's module name (`model.layers.3.self_attn.q_proj`).
    pub module: String,
    /// Input features.
    pub inp: usize,
    /// Output features.
    pub out: usize,
    /// The first column its outputs occupy in the block's output rows (a fused q/k/v or
    /// gate/up product writes its parts side by side).
    pub col: usize,
}

impl Target {
    /// The projection `module` of `inp` inputs and `out` outputs, writing from column `col`.
    pub fn new(module: String, inp: usize, out: usize, col: usize) -> Target {
        Target { module, inp, out, col }
    }

    /// What [`tl_core::Model::adaptable`] lists for it.
    pub fn adaptable(&self) -> Adaptable {
        Adaptable { module: self.module.clone(), inp: self.inp, out: self.out }
    }
}

/// A block's adaptable projections: those that read the block's input (fused side by
/// side: q/k/v, gate/up) and the one that writes its output (o, down).
#[derive(Clone, Debug, Default)]
pub struct Targets {
    /// The parts of the input product, each with its columns.
    pub inp: Vec<Target>,
    /// The output projection.
    pub out: Option<Target>,
}

impl Targets {
    /// Push every target's [`Adaptable`].
    pub fn adaptable(&self, out: &mut Vec<Adaptable>) {
        out.extend(self.inp.iter().chain(&self.out).map(Target::adaptable));
    }
}

/// The step's rows grouped by adapter: each distinct adapter and scale with the
/// batch-order row ranges `(first, count)` of its sequences.
#[derive(Default)]
pub struct LoraRows<'a> {
    groups: Vec<(Applied<'a>, Vec<(usize, usize)>)>,
}

impl<'a> LoraRows<'a> {
    /// Group the rows of `batch` (its sequences' tokens, in batch order).
    pub fn new(batch: &ForwardBatch<'a>) -> LoraRows<'a> {
        let mut groups: Vec<(Applied<'a>, Vec<(usize, usize)>)> = Vec::new();
        let mut row = 0;
        for s in &batch.seqs {
            if let Some(a) = s.adapter {
                let range = (row, s.tokens.len());
                match groups.iter_mut().find(|(g, _)| g.same(&a)) {
                    Some((_, ranges)) => ranges.push(range),
                    None => groups.push((a, vec![range])),
                }
            }
            row += s.tokens.len();
        }
        LoraRows { groups }
    }

    /// No row of the step has an adapter.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

/// The LoRA products' scratch, kept between steps.
#[derive(Default)]
pub struct LoraBuffers {
    /// `(m, in)` a group's input rows, when they are not one run.
    x: Vec<f32>,
    /// `(m, r)` `A x`.
    t: Vec<f32>,
    /// `(m, out)` `B (A x)`.
    u: Vec<f32>,
}

/// `y[i][t.col + j] += s * (B (A x[i]))[j]` for every row `i` whose adapter adapts
/// `t.module`; `x` `(N, t.inp)`, `y` rows of `stride` values, both in batch order.
pub fn apply(
    rows: &LoraRows<'_>,
    t: &Target,
    x: &[f32],
    y: &mut [f32],
    stride: usize,
    buf: &mut LoraBuffers,
) -> Result<(), ModelError> {
    let err = |e| ModelError::Other(format!("LoRA on {}: {e}", t.module));
    for (applied, ranges) in &rows.groups {
        let Some(l) = applied.adapter.module(&t.module) else { continue };
        let m: usize = ranges.iter().map(|r| r.1).sum();
        let xg: &[f32] = match ranges[..] {
            [(first, count)] => &x[first * t.inp..(first + count) * t.inp],
            _ => {
                let xg = grow(&mut buf.x, m * t.inp);
                let mut at = 0;
                for &(first, count) in ranges {
                    let n = count * t.inp;
                    xg[at..at + n].copy_from_slice(&x[first * t.inp..first * t.inp + n]);
                    at += n;
                }
                xg
            }
        };
        let r = l.rank();
        let ta = grow(&mut buf.t, m * r);
        l.a.forward(xg, m, ta).map_err(err)?;
        let u = grow(&mut buf.u, m * t.out);
        l.b.forward(ta, m, u).map_err(err)?;
        let s = l.scale * applied.scale;
        let mut k = 0;
        for &(first, count) in ranges {
            for row in first..first + count {
                let dst = &mut y[row * stride + t.col..row * stride + t.col + t.out];
                for (d, &v) in dst.iter_mut().zip(&u[k * t.out..(k + 1) * t.out]) {
                    *d += s * v;
                }
                k += 1;
            }
        }
    }
    Ok(())
}
