//! Writing a step's K and V into the pool's slabs (the rows' formats: [`crate::kv_rows`]).
//! Apart from the row reads so that attention, which reads rows, and this, which needs
//! attention's geometry, do not import each other.

use tl_core::{KvElem, KvSlabs, ModelError};

use crate::attention::{sized, Attn, Step};
use crate::kv_rows::{narrow_f16, write_q8_rows};

/// Write each token's K and V of `layer` into its sequence's blocks as f16, or quantized
/// per row on a q8 pool ([`tl_core::quantize_q8`]): position j goes to block
/// `blocks[j / B]`, slot `j % B`, head g at row `g * B + slot`. `qkv` is
/// `(N, H*D + 2*H_kv*D)`: the keys at column `H*D`, the values at `H*D + H_kv*D`
/// (after RoPE and any k norm).
pub fn write_kv(step: &Step<'_>, kv: &mut dyn KvSlabs, layer: u32, attn: &Attn, qkv: &[f32]) -> Result<(), ModelError> {
    attn.check(&kv.geometry())?;
    let Step { path, batch, plan, .. } = *step;
    let (stride, k_col) = (attn.qkv_width(), attn.heads * attn.head_dim);
    let v_col = k_col + attn.kv_heads * attn.head_dim;
    let g = kv.geometry();
    let (b, d) = (g.block_tokens as usize, g.head_dim as usize);
    let width = g.n_kv_heads as usize * d;
    let (slab_len, elem) = (g.slab_elems().unwrap_or(0), kv.elem());
    if k_col.max(v_col) + width > stride || qkv.len() < plan.pos.len() * stride {
        return Err(ModelError::Other("write_kv: keys or values outside the qkv rows".into()));
    }
    let (group, layer) = plan.slot(layer)?;
    for (t, (&s, &p)) in plan.seq_of.iter().zip(&plan.pos).enumerate() {
        // Layer `layer` of the model is slab `layer` (its index in its group) of the
        // group's page in row p / B.
        let (id, slot) = (batch.seqs[s].blocks[p / b * plan.groups + group], p % b);
        for (col, is_v) in [(k_col, false), (v_col, true)] {
            let src = &qkv[t * stride + col..t * stride + col + width];
            if elem == KvElem::Q8 {
                let mut slab = kv.q8_slab_mut(id, layer, is_v)?;
                sized(id, slab.codes.len(), slab_len)?;
                sized(id, slab.scales.len(), slab_len / d)?;
                write_q8_rows(src, &mut slab, (b, slot, d));
                continue;
            }
            let slab = kv.slab_mut(id, layer, is_v)?;
            sized(id, slab.len(), slab_len)?;
            for (h, row) in src.chunks_exact(d).enumerate() {
                let off = g.offset(h, slot);
                narrow_f16(path, row, &mut slab[off..off + d]);
            }
        }
    }
    Ok(())
}
