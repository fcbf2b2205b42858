//! A KV backend from outside tl-core and tl-kv runs the real Llama forward.
//!
//! The backend here keeps each block's slabs in their own allocation and counts every
//! slab access; it plugs into tl-kv's block bookkeeping through `KvPool::with_slabs` and
//! registers under its own name. The forward only sees the `KvSlabs` half of the pool,
//! so the logits must be the f16-slab pool's bit for bit.

mod common;

// Name the plugin crate so its registrations ("llama") are linked.
use tl_arch_llama as _;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use tl_core::{EngineConfig, KvBackend, KvError, KvGeometry, KvRegistration, KvSlabs, KvSpec, ModelRunner, Weights};
use tl_kv::KvPool;

static READS: AtomicUsize = AtomicUsize::new(0);
static WRITES: AtomicUsize = AtomicUsize::new(0);

/// One `Vec` per block: `(n_layers, 2 [K, V], n_kv_heads, block_tokens, head_dim)` each.
struct PerBlock {
    geometry: KvGeometry,
    slab_elems: usize,
    blocks: Vec<Vec<u16>>,
}

impl PerBlock {
    fn range(&self, id: u32, layer: u32, is_v: bool) -> Result<(usize, std::ops::Range<usize>), KvError> {
        if id as usize >= self.blocks.len() {
            return Err(KvError::BadId { id, n_blocks: self.blocks.len() as u32 });
        }
        if layer >= self.geometry.n_layers {
            return Err(KvError::BadLayer { layer, n_layers: self.geometry.n_layers });
        }
        let start = (layer as usize * 2 + usize::from(is_v)) * self.slab_elems;
        Ok((id as usize, start..start + self.slab_elems))
    }
}

impl KvSlabs for PerBlock {
    fn geometry(&self) -> KvGeometry {
        self.geometry
    }
    fn slab(&self, id: u32, layer: u32, is_v: bool) -> Result<&[u16], KvError> {
        READS.fetch_add(1, Ordering::Relaxed);
        let (b, r) = self.range(id, layer, is_v)?;
        Ok(&self.blocks[b][r])
    }
    fn slab_mut(&mut self, id: u32, layer: u32, is_v: bool) -> Result<&mut [u16], KvError> {
        WRITES.fetch_add(1, Ordering::Relaxed);
        let (b, r) = self.range(id, layer, is_v)?;
        Ok(&mut self.blocks[b][r])
    }
}

fn make(spec: &KvSpec) -> Result<Box<dyn KvBackend>, KvError> {
    let g = spec.geometry;
    let slab_elems = g.slab_elems().ok_or(KvError::Overflow { what: "slab".into() })?;
    let per_block = slab_elems * 2 * g.n_layers as usize;
    let blocks = (0..spec.n_blocks).map(|_| vec![0u16; per_block]).collect();
    let slabs = PerBlock { geometry: g, slab_elems, blocks };
    Ok(Box::new(KvPool::with_slabs(Box::new(slabs), spec.n_blocks, spec.prefix_cache)?))
}

tl_core::inventory::submit! { KvRegistration { name: "per-block-test", make } }

fn load_with(backend: &str) -> ModelRunner {
    let mut cfg: EngineConfig = engine(0, Weights::Native);
    cfg.kv.backend = backend.into();
    ModelRunner::load(&fixture("tiny-llama"), &cfg).unwrap_or_else(|e| panic!("loading on {backend}: {e}"))
}

#[test]
fn the_llama_forward_on_a_downstream_backend_matches_f16_slab_bit_for_bit() {
    let mut ours = load_with("per-block-test");
    let mut slab = load_with("f16-slab");
    let (r0, w0) = (READS.load(Ordering::Relaxed), WRITES.load(Ordering::Relaxed));
    for p in reference("tiny-llama") {
        // Prefill in uneven chunks, then greedy decode: every path of the forward.
        let a = run_in_steps(&mut ours, &p.ids, &[3, 1]);
        let b = run_in_steps(&mut slab, &p.ids, &[3, 1]);
        assert_eq!(bits(&a), bits(&b), "prompt {:?}: last logits differ", p.text);
        assert_eq!(greedy(&mut ours, &p.ids, 8), greedy(&mut slab, &p.ids, 8), "prompt {:?}", p.text);
    }
    let (reads, writes) = (READS.load(Ordering::Relaxed) - r0, WRITES.load(Ordering::Relaxed) - w0);
    eprintln!("per-block backend: {reads} slab reads, {writes} slab writes");
    assert!(reads > 0 && writes > 0, "the forward did not go through the downstream backend");
}
