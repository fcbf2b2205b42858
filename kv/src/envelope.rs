//! Export/import envelope, versions 1 and 2 (byte layout: docs/formats/kv-block.md).
//!
//! All integers little-endian:
//! header `[magic 8][version u32][dtype i32][n_layers u32][n_kv_heads u32][head_dim u32]
//! [block_tokens u32][n_blocks u32][reserved u32 = 0]`, then `n_blocks` records
//! `[fill u32][flags u32][hash u64][layer 0 K][layer 0 V]...[layer L-1 V]`, then the
//! FNV-1a 64 of every preceding byte as a u64 trailer. A slab is its values as u16 (f16,
//! dtype 1), or its codes as bytes then its row scales as u16 (q8, dtype 2).
//!
//! Version 1 holds f16 values; version 2 holds q8 ones. f16 pools still write and read
//! version 1 only, so their envelopes are byte for byte those of a tl without q8.

use tl_core::{KvElem, KvError};

use crate::hash::Fnv;
use crate::pool::{KvPool, FORMAT_F16_SLAB};

/// The first 8 bytes of every envelope.
pub const ENVELOPE_MAGIC: [u8; 8] = *b"TLKVBLK\0";
/// The envelope version f16 pools write (equals [`FORMAT_F16_SLAB`]).
pub const ENVELOPE_VERSION: u32 = FORMAT_F16_SLAB;
/// The envelope version that carries other element types (q8 pools write it).
pub const ENVELOPE_VERSION_2: u32 = 2;
/// Bytes before the first block record.
pub const HEADER_BYTES: usize = 40;
/// Bytes of a record before its slabs: fill, flags, hash.
pub const RECORD_HEADER_BYTES: usize = 16;
/// Bytes of the checksum trailer.
pub const TRAILER_BYTES: usize = 8;

/// Record flag: the hash field holds the block's registered hash.
const FLAG_HASH: u32 = 1;

fn bad(reason: impl Into<String>) -> KvError {
    KvError::BadEnvelope { reason: reason.into() }
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u32::from_le_bytes(b)
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(b)
}

/// A validated record: where its slabs start, its fill and hash.
struct Record {
    slabs_at: usize,
    fill: u32,
    hash: Option<u64>,
}

/// `src`'s little-endian u16s into `dst`.
fn u16s_in(dst: &mut [u16], src: &[u8]) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = u16::from_le_bytes([s[0], s[1]]);
    }
}

/// The version this pool writes: 1 keeps f16 exports readable by pools built before v2.
fn version_of(elem: KvElem) -> u32 {
    match elem {
        KvElem::F16 => ENVELOPE_VERSION,
        KvElem::Q8 => ENVELOPE_VERSION_2,
    }
}

impl KvPool {
    /// Rows (KV head, slot) in one slab.
    fn slab_rows(&self) -> usize {
        self.slab_elems / self.geometry.head_dim as usize
    }

    /// Bytes of one slab in the envelope: the values as u16, or the q8 codes then scales.
    fn slab_bytes(&self) -> usize {
        match self.elem {
            KvElem::F16 => self.slab_elems * 2,
            KvElem::Q8 => self.slab_elems + self.slab_rows() * 2,
        }
    }

    /// Copy each record's slabs (layer-major, K before V) into the block `ids` gives it.
    fn copy_in(&mut self, buf: &[u8], records: &[Record], ids: &[u32]) -> Result<(), KvError> {
        let (per, elems) = (self.slab_bytes(), self.slab_elems);
        for (rec, &id) in records.iter().zip(ids) {
            let mut at = rec.slabs_at;
            for layer in 0..self.geometry.n_layers {
                for is_v in [false, true] {
                    let src = &buf[at..at + per];
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
                    at += per;
                }
            }
        }
        Ok(())
    }

    /// Bytes of one record in this pool's geometry (checked when the pool was built).
    fn record_bytes(&self) -> usize {
        RECORD_HEADER_BYTES + self.slab_bytes() * self.geometry.n_layers as usize * 2
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
        for &id in ids {
            self.used(id)?;
        }
        let n = u32::try_from(ids.len())
            .map_err(|_| KvError::Overflow { what: format!("export of {} blocks", ids.len()) })?;
        let len = self
            .record_bytes()
            .checked_mul(ids.len())
            .and_then(|b| b.checked_add(HEADER_BYTES + TRAILER_BYTES))
            .ok_or_else(|| KvError::Overflow { what: format!("export of {n} blocks") })?;
        let mut out = Vec::new();
        out.try_reserve_exact(len)
            .map_err(|_| KvError::Backend(format!("KV pool: cannot allocate a {len}-byte export")))?;
        let g = self.geometry;
        out.extend_from_slice(&ENVELOPE_MAGIC);
        for v in [version_of(self.elem), self.elem.code(), g.n_layers, g.n_kv_heads, g.head_dim, g.block_tokens, n, 0] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for &id in ids {
            let b = &self.blocks[id as usize];
            out.extend_from_slice(&b.fill.to_le_bytes());
            let flags = if b.hash.is_some() { FLAG_HASH } else { 0 };
            out.extend_from_slice(&flags.to_le_bytes());
            out.extend_from_slice(&b.hash.unwrap_or(0).to_le_bytes());
            for layer in 0..g.n_layers {
                for is_v in [false, true] {
                    self.slab_out(&mut out, id, layer, is_v)?;
                }
            }
        }
        let sum = crate::hash::fnv1a64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        Ok(out)
    }

    /// Check an envelope against this pool without touching it.
    fn parse(&self, buf: &[u8]) -> Result<Vec<Record>, KvError> {
        if buf.len() < HEADER_BYTES + TRAILER_BYTES {
            return Err(bad(format!(
                "truncated: {} bytes, shorter than the {}-byte header and trailer",
                buf.len(),
                HEADER_BYTES + TRAILER_BYTES
            )));
        }
        if buf[..8] != ENVELOPE_MAGIC {
            return Err(bad(format!("bad magic {:02x?}, expected {:02x?}", &buf[..8], ENVELOPE_MAGIC)));
        }
        let version = u32_at(buf, 8);
        let dtype = u32_at(buf, 12);
        if version != ENVELOPE_VERSION && version != ENVELOPE_VERSION_2 {
            return Err(bad(format!(
                "unsupported version {version}, this crate reads {ENVELOPE_VERSION} and {ENVELOPE_VERSION_2}"
            )));
        }
        let ours = self.elem.code();
        if dtype != ours {
            return Err(bad(format!(
                "dtype {dtype} ({}) does not match this pool's {ours} ({}): the element types differ",
                KvElem::from_code(dtype).map_or("unknown".into(), |e| e.to_string()),
                self.elem
            )));
        }
        // One version per element type, so a reader never guesses a layout.
        if version != version_of(self.elem) {
            return Err(bad(format!(
                "version {version} does not carry {} values (version {} does)",
                self.elem,
                version_of(self.elem)
            )));
        }
        let g = self.geometry;
        let theirs = [u32_at(buf, 16), u32_at(buf, 20), u32_at(buf, 24), u32_at(buf, 28)];
        let ours = [g.n_layers, g.n_kv_heads, g.head_dim, g.block_tokens];
        if theirs != ours {
            return Err(bad(format!(
                "geometry (n_layers, n_kv_heads, head_dim, block_tokens) = {theirs:?} does not match this pool's {ours:?}"
            )));
        }
        let n = u32_at(buf, 32) as usize;
        let reserved = u32_at(buf, 36);
        if reserved != 0 {
            return Err(bad(format!("reserved header field is {reserved:#x}, expected 0")));
        }
        let record = self.record_bytes();
        let want = record
            .checked_mul(n)
            .and_then(|b| b.checked_add(HEADER_BYTES + TRAILER_BYTES))
            .ok_or_else(|| bad(format!("{n} blocks overflow the address space")))?;
        if buf.len() < want {
            return Err(bad(format!("truncated: {} bytes, {n} blocks need {want}", buf.len())));
        }
        if buf.len() > want {
            return Err(bad(format!("{} trailing bytes after {n} blocks", buf.len() - want)));
        }
        let body = want - TRAILER_BYTES;
        let mut h = Fnv::new();
        h.update(&buf[..body]);
        let (got, stored) = (h.finish(), u64_at(buf, body));
        if got != stored {
            return Err(bad(format!("checksum mismatch: stored {stored:#018x}, computed {got:#018x}")));
        }
        let bt = g.block_tokens;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let at = HEADER_BYTES + i * record;
            let (fill, flags, hash) = (u32_at(buf, at), u32_at(buf, at + 4), u64_at(buf, at + 8));
            if fill > bt {
                return Err(bad(format!("block {i}: fill {fill} exceeds block_tokens {bt}")));
            }
            if flags & !FLAG_HASH != 0 {
                return Err(bad(format!("block {i}: unknown flags {flags:#x}")));
            }
            let hash = if flags & FLAG_HASH != 0 {
                if fill != bt {
                    return Err(bad(format!("block {i}: has a hash but fill {fill} of {bt}")));
                }
                Some(hash)
            } else {
                if hash != 0 {
                    return Err(bad(format!("block {i}: hash field {hash:#x} without the hash flag")));
                }
                None
            };
            let slabs_at = at + RECORD_HEADER_BYTES;
            if self.elem == KvElem::Q8 {
                // -128 is a byte no quantizer writes (codes are clamped to -127..=127).
                let (per, elems) = (self.slab_bytes(), self.slab_elems);
                for k in 0..self.geometry.n_layers as usize * 2 {
                    let codes = &buf[slabs_at + k * per..][..elems];
                    if codes.contains(&0x80) {
                        return Err(bad(format!("block {i}: slab {k} holds the code -128, outside -127..=127")));
                    }
                }
            }
            out.push(Record { slabs_at, fill, hash });
        }
        Ok(out)
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
        let records = self.parse(buf)?;
        let ids = self.alloc(records.len())?;
        if let Err(e) = self.copy_in(buf, &records, &ids) {
            // A storage that refuses a write: give every block back, as if nothing was taken.
            for &id in &ids {
                self.release(id)?;
            }
            return Err(e);
        }
        for (rec, &id) in records.iter().zip(&ids) {
            self.blocks[id as usize].fill = rec.fill;
            if let Some(h) = rec.hash {
                if self.prefix_cache && !self.index.contains_key(&h) {
                    self.index.insert(h, id);
                    self.blocks[id as usize].hash = Some(h);
                }
            }
        }
        Ok(ids)
    }
}
