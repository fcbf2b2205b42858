//! The ends of a forward: the embedding lookup, and the final norm with the LM head over
//! the rows that need logits.

use tl_core::{ForwardBatch, ForwardCtx, ForwardOutput, Logits, ModelError};
use tl_quant::Linear;

use crate::lanes::Path;
use crate::plan::Plan;
use crate::rowops::rms_norm;

/// The embedding rows of the step's tokens, in batch order, into `x` `(N, d)`: row `t` is
/// row `token(t)` of `table` `(V, d)`, widened to f32 (a tied table is the LM head's
/// `Linear`, widened a row at a time).
pub fn embed(table: &Linear, batch: &ForwardBatch, x: &mut [f32]) -> Result<(), ModelError> {
    let d = table.inp();
    let ids = batch.seqs.iter().flat_map(|s| s.tokens.iter());
    for (row, &t) in x.chunks_exact_mut(d).zip(ids) {
        table.row(t as usize, row).map_err(|e| ModelError::Other(format!("embedding: {e}")))?;
    }
    Ok(())
}

/// The final RMSNorm and the LM head.
pub struct LmHead<'a> {
    /// `(d,)` the final norm's weight (`1 + w` for a `(1 + w)` family).
    pub norm: &'a [f32],
    /// RMSNorm epsilon.
    pub eps: f32,
    /// `[V, d]` the head.
    pub head: &'a Linear,
}

impl LmHead<'_> {
    /// Logits for the rows the caller asks for: each sequence's last token, or every token
    /// with `ctx.all_logits`, each sequence's last `ctx.tails[i]` tokens with `ctx.tails`; with `ctx.want_hidden`, also every token's normed hidden state
    /// `(N, d)`. `x` is the residual stream `(N, d)`; `scratch` holds the rows to norm.
    /// Each row is normed and projected by functions of that row alone, so a token's
    /// logits are the same bits whichever rows are asked for.
    pub fn run(
        &self,
        path: Path,
        x: &[f32],
        plan: &Plan,
        ctx: &ForwardCtx<'_>,
        scratch: &mut Vec<f32>,
    ) -> Result<ForwardOutput, ModelError> {
        let (n, dm) = (plan.n_tokens(), self.norm.len());
        let x = &x[..n * dm];
        let rows = ctx.logit_rows(&plan.last);
        let rows = rows.as_slice();
        let s_rows = rows.len();
        let mut last = vec![0.0f32; s_rows * dm]; // (R, d)
        let hidden = if ctx.want_hidden {
            let mut normed = vec![0.0f32; n * dm]; // (N, d)
            rms_norm(path, x, self.norm, self.eps, &mut normed);
            for (dst, &t) in last.chunks_exact_mut(dm).zip(rows) {
                dst.copy_from_slice(&normed[t * dm..(t + 1) * dm]);
            }
            Some(normed)
        } else {
            let h = crate::proj::grow(scratch, s_rows * dm); // (R, d)
            for (dst, &t) in h.chunks_exact_mut(dm).zip(rows) {
                dst.copy_from_slice(&x[t * dm..(t + 1) * dm]);
            }
            rms_norm(path, h, self.norm, self.eps, &mut last);
            None
        };
        let vocab = self.head.out();
        let mut logits = vec![0.0f32; s_rows * vocab]; // (R, V), straight into the output
        self.head.forward(&last, s_rows, &mut logits).map_err(|e| ModelError::Other(format!("lm_head: {e}")))?;
        Ok(ForwardOutput { logits: Logits { vocab, data: logits }, hidden })
    }
}
