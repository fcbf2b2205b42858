//! The mixture-of-experts feed-forward: a router picks `k` of `E` expert MLPs per token
//! and the token's output is their weighted sum.
//!
//! Per token (Hugging Face's `Qwen3MoeSparseMoeBlock`, `MixtralSparseMoeBlock`,
//! `OlmoeSparseMoeBlock`, `GptOssMLP`):
//!
//! ```text
//! logits = h Wr^T (+ br)                                  (E,)
//! SoftmaxTopK: p = softmax(logits); top k of p; renorm: w = p / sum(top p)
//! TopKSoftmax: top k of logits; w = softmax(those k)       (gpt-oss)
//! y = sum over the chosen experts e, ascending id, of w_e * mlp_e(h)
//! ```
//!
//! Top k is by (score descending, expert id ascending). A step's tokens are grouped by
//! expert, so each expert's weights are read once per step for all the tokens that chose
//! it (what makes batched MoE fast); yet every token's arithmetic is the same as alone: an
//! expert's product gives each row the same bits whatever rows share it (tl_quant's
//! contract), the router and the weighting are functions of the row alone, and each row's
//! sum runs over its experts in ascending id whatever the batch. So the block is batch-,
//! chunk- and thread-invariant bit for bit.

use rayon::prelude::*;
use tl_core::{ModelError, WeightError};
use tl_quant::Linear;

use crate::cx::{Cx, MoeBuffers};
use crate::lanes::{exp16, Path, W};
use crate::loader::Loader;
use crate::mlp::{add_bias, Act, Mlp, MlpNames, MlpScratch};
use crate::proj::{f32_bytes, grow, linear};

/// How a token's router logits become its experts' weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// Softmax over every expert, then the top k; with `renorm` the k weights are divided
    /// by their sum (Mixtral always; Qwen3-MoE as `norm_topk_prob` says; OLMoE as its
    /// `norm_topk_prob` says, false in the released models).
    SoftmaxTopK {
        /// Divide the chosen weights by their sum.
        renorm: bool,
    },
    /// The top k of the logits, then a softmax over those k (gpt-oss).
    TopKSoftmax,
}

/// A mixture-of-experts feed-forward.
pub struct Moe {
    /// `[E, d]` the router.
    pub router: Linear,
    /// `(E,)` the router's bias, when the family has one (gpt-oss).
    pub router_bias: Option<Vec<f32>>,
    /// The `E` experts, by id.
    pub experts: Vec<Mlp>,
    /// Experts per token, `1..=E`.
    pub top_k: usize,
    /// How logits become weights.
    pub routing: Routing,
    /// A shared expert every token runs, gated per token (Qwen3.5-MoE), when the family
    /// has one.
    pub shared: Option<SharedExpert>,
}

/// A shared expert: `sigmoid(gate(h)) * mlp(h)`, added to every token's experts' sum.
pub struct SharedExpert {
    /// The MLP (`shared_expert`).
    pub mlp: Mlp,
    /// `[1, d]` the scalar gate (`shared_expert_gate`).
    pub gate: Linear,
}

impl SharedExpert {
    /// Under transformers' names below the block's prefix `p`: `shared_expert.{gate,up,down}_proj`
    /// of width `width`, and `shared_expert_gate.weight` `[1, d]`.
    pub fn load(w: &Loader<'_>, p: &str, d: usize, width: usize) -> Result<SharedExpert, ModelError> {
        let mlp = Mlp::load(w, &format!("{p}.shared_expert"), crate::mlp::MLP_NAMES, d, width, Act::SwiGlu)?;
        Ok(SharedExpert { mlp, gate: w.router(&format!("{p}.shared_expert_gate.weight"), 1, d)? })
    }
}

/// `e^(x - max)` of every value in place, by the decoder's [`exp16`] (the same bits on
/// every path), and their sum in ascending order.
fn exp_shifted(path: Path, xs: &mut [f32], max: f32) -> f32 {
    let mut sum = 0.0f32;
    for chunk in xs.chunks_mut(W) {
        let mut v = [0.0f32; W];
        for (d, &x) in v.iter_mut().zip(chunk.iter()) {
            *d = x - max;
        }
        let e = exp16(path, &v);
        for (x, &e) in chunk.iter_mut().zip(&e) {
            *x = e;
            sum += e;
        }
    }
    sum
}

/// The `k` largest of `scores` by (score descending, index ascending), into `out` in that
/// order; NaN ranks below every number.
fn top_k(scores: &[f32], k: usize, out: &mut Vec<(usize, f32)>) {
    out.clear();
    let better = |a: (usize, f32), b: (usize, f32)| match (a.1.is_nan(), b.1.is_nan()) {
        (false, true) => true,
        (true, false) => false,
        (true, true) => a.0 < b.0,
        (false, false) => a.1 > b.1 || (a.1 == b.1 && a.0 < b.0),
    };
    for (i, &s) in scores.iter().enumerate() {
        let c = (i, s);
        // Insertion into the kept list (k is small: 1 to 8 in released models).
        let at = out.iter().position(|&o| better(c, o)).unwrap_or(out.len());
        if at < k {
            out.insert(at, c);
            out.truncate(k);
        }
    }
}

/// What a family's mixture of experts is, for [`Moe::load`].
#[derive(Clone, Copy, Debug)]
pub struct MoeSpec {
    /// Experts, E.
    pub experts: usize,
    /// Experts per token, k.
    pub top_k: usize,
    /// Each expert's MLP width.
    pub width: usize,
    /// How logits become weights.
    pub routing: Routing,
    /// The router's tensor below the block's prefix (`gate`).
    pub router: &'static str,
    /// Each expert's tensors below `<prefix>.experts.<e>`.
    pub names: MlpNames,
}

impl Moe {
    /// The block under prefix `p` (`model.layers.N.mlp`; Mixtral's `block_sparse_moe`):
    /// the router `<p>.<router>.weight` `[E, d]`, kept as stored and never int4 (a
    /// coarser router would choose other experts), and one tensor per expert under
    /// `<p>.experts.<e>.` A file holding more experts than the config says is refused,
    /// naming the first extra tensor (the router's shape is checked against `E` as it
    /// loads, and a missing expert tensor is named by the loader).
    pub fn load(w: &Loader<'_>, p: &str, d: usize, spec: MoeSpec) -> Result<Moe, ModelError> {
        let router = w.router(&format!("{p}.{}.weight", spec.router), spec.experts, d)?;
        let extra = format!("{p}.experts.{}.{}.weight", spec.experts, spec.names.gate);
        if w.store().info(&extra).is_some() {
            return Err(ModelError::Weights(WeightError::Tensor {
                path: w.store().path().to_path_buf(),
                name: extra,
                reason: format!("the config says {} experts, the file holds more", spec.experts),
            }));
        }
        let experts = (0..spec.experts)
            .map(|e| Mlp::load(w, &format!("{p}.experts.{e}"), spec.names, d, spec.width, Act::SwiGlu))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Moe { router, router_bias: None, experts, top_k: spec.top_k, routing: spec.routing, shared: None })
    }

    /// Experts per token and expert count are checked by the family's config; this
    /// re-checks what would index out of bounds.
    fn check(&self) -> Result<(), ModelError> {
        let e = self.experts.len();
        if self.top_k == 0 || self.top_k > e || self.router.out() != e {
            return Err(ModelError::Other(format!(
                "mixture of experts: top_k {} of {e} experts, router of {} outputs",
                self.top_k,
                self.router.out()
            )));
        }
        Ok(())
    }

    /// One token's experts and weights from its router logits `row` `(E,)` (overwritten),
    /// into `out`, sorted by expert id.
    fn route(&self, path: Path, row: &mut [f32], out: &mut Vec<(usize, f32)>) {
        let k = self.top_k;
        match self.routing {
            Routing::SoftmaxTopK { renorm } => {
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum = exp_shifted(path, row, max);
                row.iter_mut().for_each(|p| *p /= sum);
                top_k(row, k, out);
                if renorm {
                    // Summed in rank order, as torch sums the topk values.
                    let s: f32 = out.iter().fold(0.0, |a, &(_, p)| a + p);
                    out.iter_mut().for_each(|(_, p)| *p /= s);
                }
            }
            Routing::TopKSoftmax => {
                top_k(row, k, out);
                let max = out[0].1;
                let mut v: Vec<f32> = out.iter().map(|&(_, l)| l).collect();
                let sum = exp_shifted(path, &mut v, max);
                for ((_, w), e) in out.iter_mut().zip(v) {
                    *w = e / sum;
                }
            }
        }
        out.sort_by_key(|&(e, _)| e);
    }

    /// `proj` `(N, d)` from `h` `(N, d)`.
    pub fn forward(&self, cx: &mut Cx<'_, '_>) -> Result<(), ModelError> {
        let (n, dm, path) = (cx.n, cx.dm, cx.path());
        let b = &mut *cx.b;
        let proj = grow(&mut b.proj, n * dm);
        self.apply(path, &b.h[..n * dm], dm, &mut b.moe, proj)
    }

    /// The block on its own: `proj` `(N, d)` from `h` `(N, d)` (`N = h.len() / dm`), with
    /// its scratch `m` ([`Moe::forward`] in a [`crate::Stack`]; tests call it directly).
    pub fn apply(
        &self,
        path: Path,
        h: &[f32],
        dm: usize,
        m: &mut MoeBuffers,
        proj: &mut [f32],
    ) -> Result<(), ModelError> {
        self.check()?;
        let n = h.len() / dm.max(1);
        if proj.len() != n * dm || h.len() != n * dm {
            return Err(ModelError::Other(format!(
                "mixture of experts: h of {} and proj of {} for d {dm}",
                h.len(),
                proj.len()
            )));
        }
        let e_count = self.experts.len();
        let logits = grow(&mut m.logits, n * e_count); // (N, E)
        linear(&self.router, h, n, logits, "router")?;
        if let Some(bias) = &self.router_bias {
            add_bias(logits, bias);
        }
        let mut chosen = std::mem::take(&mut m.chosen);
        self.route_logits(path, &mut m.logits[..n * e_count], &mut chosen);
        let r = self.mix(path, h, dm, &chosen, m, proj);
        m.chosen = chosen;
        r
    }

    /// Each row of router logits `(N, E)` (overwritten) to its `k` experts and weights,
    /// into `chosen` (`k` per row, each row's sorted by expert id). A family whose router
    /// sees another input than the experts (Gemma 4) computes its logits itself, routes
    /// them here and runs [`Moe::mix`].
    pub fn route_logits(&self, path: Path, logits: &mut [f32], chosen: &mut Vec<(usize, f32)>) {
        let e_count = self.experts.len().max(1);
        chosen.clear();
        let mut one = Vec::with_capacity(self.top_k);
        for row in logits.chunks_exact_mut(e_count) {
            self.route(path, row, &mut one);
            chosen.extend_from_slice(&one);
        }
    }

    /// `proj` `(N, d)`: each row's chosen experts (`chosen`, `k` per row, as
    /// [`Moe::route_logits`] gives them) run on `h` `(N, d)` and summed with their weights
    /// in ascending expert id, plus the shared expert when there is one.
    pub fn mix(
        &self,
        path: Path,
        h: &[f32],
        dm: usize,
        chosen: &[(usize, f32)],
        m: &mut MoeBuffers,
        proj: &mut [f32],
    ) -> Result<(), ModelError> {
        self.check()?;
        let n = h.len() / dm.max(1);
        let k = self.top_k;
        if chosen.len() != n * k || proj.len() != n * dm || chosen.iter().any(|&(e, _)| e >= self.experts.len()) {
            return Err(ModelError::Other(format!(
                "mixture of experts: {} choices for {n} rows of {k}, proj of {}",
                chosen.len(),
                proj.len()
            )));
        }
        // The tokens that chose each expert, by expert then batch order (a stable sort of
        // the batch-ordered choices), with their weights.
        m.routed.clear();
        m.routed.extend(chosen.chunks_exact(k).enumerate().flat_map(|(t, p)| p.iter().map(move |&(e, w)| (e, t, w))));
        m.routed.sort_by_key(|&(e, _, _)| e);
        // The experts that have tokens (a decode step: its k), each run on its own rows in
        // parallel: an expert's product gives each row the same bits whoever runs it, and
        // the sum below runs in ascending expert id whatever finished first.
        let groups: Vec<&[(usize, usize, f32)]> = m.routed.chunk_by(|a, b| a.0 == b.0).collect();
        let outs = groups
            .par_iter()
            .map(|g| {
                let (e, rows) = (g[0].0, g.len());
                let mut xin = vec![0.0f32; rows * dm]; // (m, d)
                for (dst, &(_, t, _)) in xin.chunks_exact_mut(dm).zip(g.iter()) {
                    dst.copy_from_slice(&h[t * dm..(t + 1) * dm]);
                }
                let mut y = vec![0.0f32; rows * dm]; // (m, d)
                let (mut gu, mut act, mut tmp) = (Vec::new(), Vec::new(), Vec::new());
                let s = MlpScratch { gu: &mut gu, act: &mut act, tmp: &mut tmp };
                self.experts[e].run(path, &xin, rows, &mut y, s).map_err(|err| format!("expert {e}: {err}"))?;
                Ok(y)
            })
            .collect::<Result<Vec<Vec<f32>>, String>>()
            .map_err(ModelError::Other)?;
        proj.fill(0.0); // (N, d)
                        // Each row's sum runs over its experts in ascending id: the groups' order.
        for (g, y) in groups.iter().zip(&outs) {
            for (src, &(_, t, w)) in y.chunks_exact(dm).zip(g.iter()) {
                for (o, &v) in proj[t * dm..(t + 1) * dm].iter_mut().zip(src) {
                    *o += w * v;
                }
            }
        }
        if let Some(sh) = &self.shared {
            // After the experts' sum, each row alone: `y += sigmoid(g) * shared(h)`, the
            // gate's sigmoid one f32 value per row (transformers adds the gated shared
            // output to the experts' sum).
            let mut y = vec![0.0f32; n * dm];
            let (mut gu, mut act, mut tmp) = (Vec::new(), Vec::new(), Vec::new());
            sh.mlp.run(path, h, n, &mut y, MlpScratch { gu: &mut gu, act: &mut act, tmp: &mut tmp })?;
            let mut g = vec![0.0f32; n];
            linear(&sh.gate, h, n, &mut g, "shared_expert_gate")?;
            for ((row, src), &gt) in proj.chunks_exact_mut(dm).zip(y.chunks_exact(dm)).zip(&g) {
                let s = 1.0 / (1.0 + exp16(path, &[-gt; W])[0]);
                for (o, &v) in row.iter_mut().zip(src) {
                    *o += s * v;
                }
            }
        }
        Ok(())
    }

    /// Bytes its weights hold.
    pub fn weight_bytes(&self) -> usize {
        self.router.packed_bytes()
            + self.router_bias.as_deref().map_or(0, f32_bytes)
            + self.experts.iter().map(Mlp::weight_bytes).sum::<usize>()
            + self.shared.as_ref().map_or(0, |s| s.mlp.weight_bytes() + s.gate.packed_bytes())
    }
}
