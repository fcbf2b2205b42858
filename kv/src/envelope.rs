//! Export and import of a [`KvPool`]'s blocks through tl-core's envelope
//! ([`tl_core::envelope`], byte layout in docs/formats/kv-block.md): this file only moves
//! slabs between the pool's storage and the records; the format, its checks and its
//! checksum live in core.

use tl_core::envelope::{Envelope, EnvelopeWriter, Record};
use tl_core::{KvElem, KvError, KvGeometry};

use crate::pool::KvPool;

/// `src`'s little-endian u16s into `dst`.
fn u16s_in(dst: &mut [u16], src: &[u8]) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = u16::from_le_bytes([s[0], s[1]]);
    }
}

impl KvPool {
    /// Copy each record's slabs (layer-major, K before V) into the block `ids` gives it.
    fn copy_in(&mut self, env: &Envelope<'_>, ids: &[u32]) -> Result<(), KvError> {
        let (per, elems) = (env.slab_bytes(), self.slab_elems);
        for (rec, &id) in env.records().zip(ids) {
            let mut slabs = rec.slabs.chunks_exact(per);
            for layer in 0..self.geometry.n_layers {
                for is_v in [false, true] {
                    let src = slabs.next().unwrap_or_default();
                    match self.elem {
                        KvElem::F16 => u16s_in(self.slabs.slab_mut(id, layer, is_v)?, src),
                        KvElem::Q8 => {
                            let dst = self.slabs.q8_slab_mut(id, layer, is_v)?;
                            for (d, &s) in dst.codes.iter_mut().zip(&src[..elems]) {
                                *d = s as i8;
                            }
                            u16s_in(dst.scales, &src[elems..]);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Append one slab of block `id` to `out` in the envelope's form.
    fn slab_out(&self, out: &mut Vec<u8>, id: u32, layer: u32, is_v: bool) -> Result<(), KvError> {
        match self.elem {
            KvElem::F16 => {
                for v in self.slabs.slab(id, layer, is_v)? {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            KvElem::Q8 => {
                let s = self.slabs.q8_slab(id, layer, is_v)?;
                out.extend(s.codes.iter().map(|&c| c as u8));
                for v in s.scales {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        Ok(())
    }

    /// Serialize blocks in use (fill, hash if registered, K and V of every layer) into a
    /// self-describing envelope. Ids may repeat; every id must be in use.
    pub fn export(&self, ids: &[u32]) -> Result<Vec<u8>, KvError> {
        let mut w = EnvelopeWriter::new(self.elem, self.geometry, ids.len())?;
        self.write_records(&mut w, ids)?;
        w.finish()
    }

    /// Append a record per id (each in use) to `w`.
    pub(crate) fn write_records(&self, w: &mut EnvelopeWriter, ids: &[u32]) -> Result<(), KvError> {
        for &id in ids {
            self.used(id)?;
        }
        for &id in ids {
            let b = &self.blocks[id as usize];
            let out = w.record(b.fill, b.hash);
            for layer in 0..self.geometry.n_layers {
                for is_v in [false, true] {
                    self.slab_out(out, id, layer, is_v)?;
                }
            }
        }
        Ok(())
    }

    /// Allocate fresh blocks and fill them from an envelope; returns their ids in
    /// envelope order, each with ref 1 and the exported fill.
    ///
    /// A wrong magic, version, dtype or geometry, a bad checksum, a truncated buffer,
    /// trailing bytes, a malformed record or too few free+cached blocks is an error, and
    /// then no block is taken. A block exported with a hash is registered under it again
    /// when prefix caching is on and no other block holds that hash; otherwise it comes
    /// back unregistered.
    pub fn import(&mut self, buf: &[u8]) -> Result<Vec<u32>, KvError> {
        let env = Envelope::parse(buf, self.elem, self.geometry)?;
        self.import_records(&env)
    }

    /// [`KvPool::import`]'s work on an envelope already checked against this pool.
    pub(crate) fn import_records(&mut self, env: &Envelope<'_>) -> Result<Vec<u32>, KvError> {
        let ids = self.alloc(env.header().n_blocks)?;
        if let Err(e) = self.copy_in(env, &ids) {
            // A storage that refuses a write: give every block back, as if nothing was taken.
            for &id in &ids {
                self.release(id)?;
            }
            return Err(e);
        }
        for (rec, &id) in env.records().zip(&ids) {
            let Record { fill, hash, .. } = rec;
            self.restore(id, fill, hash);
        }
        Ok(ids)
    }

    /// Give a freshly imported block `id` its exported fill, and its hash when prefix
    /// caching is on and no other block holds that hash.
    pub(crate) fn restore(&mut self, id: u32, fill: u32, hash: Option<u64>) {
        self.blocks[id as usize].fill = fill;
        if let Some(h) = hash {
            if self.prefix_cache && !self.index.contains_key(&h) {
                self.index.insert(h, id);
                self.blocks[id as usize].hash = Some(h);
            }
        }
    }

    /// The geometry and element type its envelopes carry.
    pub(crate) fn envelope_kind(&self) -> (KvElem, KvGeometry) {
        (self.elem, self.geometry)
    }
}
