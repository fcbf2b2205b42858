//! Projections that read the same input (q/k/v, gate/up), and the step buffers' `grow`.

use tl_core::ModelError;
use tl_quant::Linear;

/// Projections that read the same input, run as one product when they can be stacked.
pub enum Proj {
    /// `Linear::concat` of the parts: one product, outputs side by side.
    Fused(Linear),
    /// Parts that cannot be stacked (a part's outputs not a multiple of 16, or different
    /// storage): run one by one and copied side by side.
    Split(Vec<Linear>),
}

impl Proj {
    /// Stack `parts` when `Linear::concat` can; the results are the same bits either way,
    /// since each output element's FMA chain does not change.
    pub fn new(parts: Vec<Linear>) -> Proj {
        let refs: Vec<&Linear> = parts.iter().collect();
        match Linear::concat(&refs) {
            Ok(l) => Proj::Fused(l),
            Err(_) => Proj::Split(parts),
        }
    }

    /// Bytes the parts hold.
    pub fn packed_bytes(&self) -> usize {
        match self {
            Proj::Fused(l) => l.packed_bytes(),
            Proj::Split(ls) => ls.iter().map(Linear::packed_bytes).sum(),
        }
    }

    /// Total outputs.
    pub fn out(&self) -> usize {
        match self {
            Proj::Fused(l) => l.out(),
            Proj::Split(ls) => ls.iter().map(Linear::out).sum(),
        }
    }

    /// `y = x W^T` for `x` `(n, in)`, `y` `(n, out)` with the parts' outputs side by side;
    /// `tmp` is scratch for the split case; `what` names the projection in an error.
    pub fn forward(
        &self,
        x: &[f32],
        n: usize,
        y: &mut [f32],
        tmp: &mut Vec<f32>,
        what: &str,
    ) -> Result<(), ModelError> {
        let err = |e| ModelError::Other(format!("{what}: {e}"));
        match self {
            Proj::Fused(l) => l.forward(x, n, y).map_err(err),
            Proj::Split(ls) => {
                let out = self.out();
                let mut col = 0;
                for l in ls {
                    let o = l.out();
                    tmp.resize(n * o, 0.0);
                    l.forward(x, n, tmp).map_err(err)?;
                    for (dst, src) in y.chunks_exact_mut(out).zip(tmp.chunks_exact(o)) {
                        dst[col..col + o].copy_from_slice(src);
                    }
                    col += o;
                }
                Ok(())
            }
        }
    }
}

/// One `Linear`'s `y = x W^T`, `x` `(n, in)`, `y` `(n, out)`, its error naming `what`.
pub fn linear(l: &Linear, x: &[f32], n: usize, y: &mut [f32], what: &str) -> Result<(), ModelError> {
    l.forward(x, n, y).map_err(|e| ModelError::Other(format!("{what}: {e}")))
}

/// `v[..len]`, grown (never shrunk) to `len`; contents are overwritten by the caller. A
/// step's buffers are kept between steps and grown with this, so a step allocates nothing
/// once they have reached its size.
pub fn grow(v: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if v.len() < len {
        v.resize(len, 0.0);
    }
    &mut v[..len]
}

/// Bytes of an f32 vector (norm weights, biases) for `Model::weight_bytes`.
pub fn f32_bytes(v: &[f32]) -> usize {
    std::mem::size_of_val(v)
}
