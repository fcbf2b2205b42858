//! The KV block envelope, versions 1 and 2 (byte layout: docs/formats/kv-block.md), read
//! and written here and nowhere else: the pool's export and import, the engine's P/D
//! hand-off and its disk cache all go through [`Envelope`] and [`EnvelopeWriter`].
//!
//! All integers little-endian:
//! header `[magic 8][version u32][dtype i32][n_layers u32][n_kv_heads u32][head_dim u32]
//! [block_tokens u32][n_blocks u32][reserved u32 = 0]`, then `n_blocks` records
//! `[fill u32][flags u32][hash u64][layer 0 K][layer 0 V]...[layer L-1 V]`, then the
//! FNV-1a 64 of every preceding byte as a u64 trailer. A slab is its values as u16 (f16,
//! dtype 1), or its codes as bytes then its row scales as u16 (q8, dtype 2).
//!
//! Version 1 holds f16 values; version 2 holds q8 ones. f16 pools write and read version
//! 1 only, so their envelopes are byte for byte those of a tl without q8. Version 3 is
//! either of them followed by a state section (recurrent-state slots and the table's holes,
//! [`state`]): what a hybrid model's pool writes and reads, and only it.

mod state;

pub use state::{Entry, SlotRecord, StateSection, SLOT_HEADER_BYTES, STATE_HEADER_BYTES};

use crate::hash::{fnv1a64, Fnv};
use crate::kv::{KvElem, KvError, KvGeometry, StateGeometry};

/// The first 8 bytes of every envelope.
pub const ENVELOPE_MAGIC: [u8; 8] = *b"TLKVBLK\0";
/// The envelope version that carries f16 values.
pub const ENVELOPE_VERSION: u32 = 1;
/// The envelope version that carries q8 values.
pub const ENVELOPE_VERSION_2: u32 = 2;
/// The envelope version that carries recurrent-state slots beside the pages (of either
/// element type: its dtype says which).
pub const ENVELOPE_VERSION_3: u32 = 3;
/// Bytes before the first block record.
pub const HEADER_BYTES: usize = 40;
/// Bytes of a record before its slabs: fill, flags, hash.
pub const RECORD_HEADER_BYTES: usize = 16;
/// Bytes of the checksum trailer.
pub const TRAILER_BYTES: usize = 8;

/// Record flag: the hash field holds the block's registered hash.
const FLAG_HASH: u32 = 1;

pub(crate) fn bad(reason: impl Into<String>) -> KvError {
    KvError::BadEnvelope { reason: reason.into() }
}

pub(crate) fn u32_at(buf: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u32::from_le_bytes(b)
}

pub(crate) fn u64_at(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(b)
}

/// The version that carries `elem` values: one version per element type, so a reader
/// never guesses a layout (and f16 exports stay readable by pools built before v2).
pub fn version_of(elem: KvElem) -> u32 {
    match elem {
        KvElem::F16 => ENVELOPE_VERSION,
        KvElem::Q8 => ENVELOPE_VERSION_2,
    }
}

/// Bytes of one slab of `g` in the envelope: the values as u16 (f16), or the q8 codes
/// then one u16 scale per row; `None` on overflow.
pub fn slab_bytes(g: KvGeometry, elem: KvElem) -> Option<usize> {
    let elems = g.slab_elems()?;
    match elem {
        KvElem::F16 => elems.checked_mul(2),
        KvElem::Q8 => elems.checked_add((g.n_kv_heads as usize).checked_mul(g.block_tokens as usize)?.checked_mul(2)?),
    }
}

/// Bytes of one record of `g`: its header and a K and V slab per layer; `None` on overflow.
pub fn record_bytes(g: KvGeometry, elem: KvElem) -> Option<usize> {
    slab_bytes(g, elem)?.checked_mul(2)?.checked_mul(g.n_layers as usize)?.checked_add(RECORD_HEADER_BYTES)
}

/// What an envelope's header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnvelopeHeader {
    /// The format version (1 f16, 2 q8).
    pub version: u32,
    /// The element type of its slabs.
    pub elem: KvElem,
    /// The geometry of the pool that wrote it.
    pub geometry: KvGeometry,
    /// Block records it holds (pages; a version 3 envelope's slots are in its
    /// [`StateSection`]).
    pub n_blocks: usize,
}

/// One block record: its fill, its registered hash if any, and its slabs' bytes (layer by
/// layer, K then V, each [`slab_bytes`] long).
#[derive(Clone, Copy, Debug)]
pub struct Record<'a> {
    /// Slots holding data, `0..=block_tokens`.
    pub fill: u32,
    /// The registered prefix hash (only on a full block).
    pub hash: Option<u64>,
    /// The slabs, as stored in the envelope.
    pub slabs: &'a [u8],
}

/// A checked envelope: magic, version, dtype, geometry, length, checksum and every
/// record's fields hold, so its records can be read without further checks.
#[derive(Clone, Debug)]
pub struct Envelope<'a> {
    buf: &'a [u8],
    header: EnvelopeHeader,
    record: usize,
    state: Option<StateSection<'a>>,
}

impl<'a> Envelope<'a> {
    /// Check `buf` as an envelope for a pool of `elem` values and geometry `g`, in the
    /// order docs/formats/kv-block.md gives ("Import rules"); each refusal names what is
    /// wrong.
    pub fn parse(buf: &'a [u8], elem: KvElem, g: KvGeometry) -> Result<Envelope<'a>, KvError> {
        Self::check(buf, Some((elem, g, None)))
    }

    /// [`Envelope::parse`] for a pool that may hold recurrent state: with `state` the
    /// envelope must be version 3 of that state geometry, without it version 1 or 2.
    pub fn parse_pool(
        buf: &'a [u8],
        elem: KvElem,
        g: KvGeometry,
        state: Option<StateGeometry>,
    ) -> Result<Envelope<'a>, KvError> {
        Self::check(buf, Some((elem, g, state)))
    }

    /// Check `buf` as an envelope of whatever element type and geometry its header
    /// declares (a reader that holds no pool yet: the P/D hand-off, the disk cache).
    pub fn read(buf: &'a [u8]) -> Result<Envelope<'a>, KvError> {
        Self::check(buf, None)
    }

    fn check(
        buf: &'a [u8],
        want: Option<(KvElem, KvGeometry, Option<StateGeometry>)>,
    ) -> Result<Envelope<'a>, KvError> {
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
        let (version, dtype) = (u32_at(buf, 8), u32_at(buf, 12));
        if !(ENVELOPE_VERSION..=ENVELOPE_VERSION_3).contains(&version) {
            return Err(bad(format!(
                "unsupported version {version}, this crate reads {ENVELOPE_VERSION} to {ENVELOPE_VERSION_3}"
            )));
        }
        let theirs = KvElem::from_code(dtype);
        let elem = match (want, theirs) {
            (Some((ours, _, _)), _) if theirs != Some(ours) => {
                return Err(bad(format!(
                    "dtype {dtype} ({}) does not match this pool's {} ({ours}): the element types differ",
                    theirs.map_or("unknown".into(), |e| e.to_string()),
                    ours.code(),
                )))
            }
            (_, Some(e)) => e,
            (_, None) => return Err(bad(format!("unknown dtype {dtype}"))),
        };
        if version != version_of(elem) && version != ENVELOPE_VERSION_3 {
            return Err(bad(format!(
                "version {version} does not carry {elem} values (version {} does)",
                version_of(elem)
            )));
        }
        match want.map(|w| w.2) {
            Some(None) if version == ENVELOPE_VERSION_3 => {
                return Err(bad("version 3 carries recurrent state; this pool holds none"))
            }
            Some(Some(_)) if version != ENVELOPE_VERSION_3 => {
                return Err(bad(format!(
                    "version {version} carries no recurrent state; this pool holds some (version 3 does)"
                )))
            }
            _ => {}
        }
        let fields = [u32_at(buf, 16), u32_at(buf, 20), u32_at(buf, 24), u32_at(buf, 28)];
        let geometry =
            KvGeometry { n_layers: fields[0], n_kv_heads: fields[1], head_dim: fields[2], block_tokens: fields[3] };
        if let Some((_, g, _)) = want {
            let ours = [g.n_layers, g.n_kv_heads, g.head_dim, g.block_tokens];
            if fields != ours {
                return Err(bad(format!(
                    "geometry (n_layers, n_kv_heads, head_dim, block_tokens) = {fields:?} does not match this pool's {ours:?}"
                )));
            }
        } else if fields.contains(&0) {
            return Err(bad(format!(
                "geometry (n_layers, n_kv_heads, head_dim, block_tokens) = {fields:?} has a zero"
            )));
        }
        let n = u32_at(buf, 32) as usize;
        let reserved = u32_at(buf, 36);
        if reserved != 0 {
            return Err(bad(format!("reserved header field is {reserved:#x}, expected 0")));
        }
        let overflow = || bad(format!("{n} blocks overflow the address space"));
        let record = record_bytes(geometry, elem).ok_or_else(overflow)?;
        let pages_end = record.checked_mul(n).and_then(|b| b.checked_add(HEADER_BYTES)).ok_or_else(overflow)?;
        // Version 3: the state section's own header says how long it is.
        let section = match version {
            ENVELOPE_VERSION_3 => Some(state::Layout::read(buf, pages_end, want.and_then(|w| w.2))?),
            _ => None,
        };
        let total = section
            .as_ref()
            .map_or(Some(pages_end), |s| pages_end.checked_add(s.bytes))
            .and_then(|b| b.checked_add(TRAILER_BYTES))
            .ok_or_else(overflow)?;
        if buf.len() < total {
            return Err(bad(format!("truncated: {} bytes, {n} blocks need {total}", buf.len())));
        }
        if buf.len() > total {
            return Err(bad(format!("{} trailing bytes after {n} blocks", buf.len() - total)));
        }
        let body = total - TRAILER_BYTES;
        let mut h = Fnv::new();
        h.update(&buf[..body]);
        let (got, stored) = (h.finish(), u64_at(buf, body));
        if got != stored {
            return Err(bad(format!("checksum mismatch: stored {stored:#018x}, computed {got:#018x}")));
        }
        let header = EnvelopeHeader { version, elem, geometry, n_blocks: n };
        let state = match section {
            Some(l) => Some(StateSection::check(buf, l, n, geometry.block_tokens)?),
            None => None,
        };
        let env = Envelope { buf, header, record, state };
        for i in 0..n {
            env.check_record(i)?;
        }
        Ok(env)
    }

    /// The fields of record `i`, checked: fill, flags, a hash only on a full block, and
    /// (q8) no code -128, a byte no quantizer writes (codes are clamped to -127..=127).
    fn check_record(&self, i: usize) -> Result<(), KvError> {
        let (buf, at, bt) = (self.buf, HEADER_BYTES + i * self.record, self.header.geometry.block_tokens);
        let (fill, flags, hash) = (u32_at(buf, at), u32_at(buf, at + 4), u64_at(buf, at + 8));
        if fill > bt {
            return Err(bad(format!("block {i}: fill {fill} exceeds block_tokens {bt}")));
        }
        if flags & !FLAG_HASH != 0 {
            return Err(bad(format!("block {i}: unknown flags {flags:#x}")));
        }
        if flags & FLAG_HASH != 0 && fill != bt {
            return Err(bad(format!("block {i}: has a hash but fill {fill} of {bt}")));
        }
        if flags & FLAG_HASH == 0 && hash != 0 {
            return Err(bad(format!("block {i}: hash field {hash:#x} without the hash flag")));
        }
        if self.header.elem == KvElem::Q8 {
            let g = self.header.geometry;
            let (per, elems) = (self.slab_bytes(), g.slab_elems().unwrap_or(0));
            for k in 0..g.n_layers as usize * 2 {
                let codes = &buf[at + RECORD_HEADER_BYTES + k * per..][..elems];
                if codes.contains(&0x80) {
                    return Err(bad(format!("block {i}: slab {k} holds the code -128, outside -127..=127")));
                }
            }
        }
        Ok(())
    }

    /// What the header says.
    pub fn header(&self) -> &EnvelopeHeader {
        &self.header
    }

    /// Bytes of one slab in this envelope.
    pub fn slab_bytes(&self) -> usize {
        // Checked not to overflow when the envelope was parsed.
        (self.record - RECORD_HEADER_BYTES) / (2 * self.header.geometry.n_layers as usize)
    }

    /// Record `i` (`i < n_blocks`).
    pub fn record(&self, i: usize) -> Record<'a> {
        let at = HEADER_BYTES + i * self.record;
        let flags = u32_at(self.buf, at + 4);
        Record {
            fill: u32_at(self.buf, at),
            hash: (flags & FLAG_HASH != 0).then(|| u64_at(self.buf, at + 8)),
            slabs: &self.buf[at + RECORD_HEADER_BYTES..at + self.record],
        }
    }

    /// Every record, in order.
    pub fn records(&self) -> impl Iterator<Item = Record<'a>> + '_ {
        (0..self.header.n_blocks).map(|i| self.record(i))
    }

    /// A version 3 envelope's state section (slots and holes), `None` before version 3.
    pub fn state(&self) -> Option<&StateSection<'a>> {
        self.state.as_ref()
    }

    /// The entries of the exported id list, in its order: a page record, a slot record
    /// or a hole. Versions 1 and 2 hold pages only.
    pub fn entries(&self) -> Vec<Entry> {
        match &self.state {
            Some(s) => s.entries(self.header.n_blocks),
            None => (0..self.header.n_blocks).map(Entry::Page).collect(),
        }
    }

    /// The envelope of the leading `n` entries of the exported list (all when `n` is
    /// larger), the checksum recomputed (this one's was verified when it was parsed).
    pub fn first(&self, n: usize) -> Result<Vec<u8>, KvError> {
        let entries = self.entries();
        let kept = &entries[..n.min(entries.len())];
        let pages = kept.iter().filter(|e| matches!(e, Entry::Page(_))).count();
        let (elem, g) = (self.header.elem, self.header.geometry);
        // The records are this (checked) envelope's: the writer cannot refuse them.
        let mut w = match &self.state {
            Some(s) => {
                let holes: Vec<u32> = (0..kept.len()).filter(|&i| kept[i] == Entry::Hole).map(|i| i as u32).collect();
                let slots = kept.iter().filter(|e| matches!(e, Entry::Slot(_))).count();
                EnvelopeWriter::with_state(elem, g, pages, (s.geometry(), slots, &holes))?
            }
            None => EnvelopeWriter::new(elem, g, pages)?,
        };
        for r in self.records().take(pages) {
            w.record(r.fill, r.hash).extend_from_slice(r.slabs);
        }
        if let Some(s) = &self.state {
            for (at, e) in kept.iter().enumerate() {
                if let Entry::Slot(j) = *e {
                    let r = s.slot(j);
                    w.slot(r.fill, r.hash, at as u32).extend_from_slice(r.values);
                }
            }
        }
        w.finish()
    }
}

/// Writes an envelope of `n` records: [`EnvelopeWriter::record`] once per block, its
/// slabs appended by the caller in the layout [`Record::slabs`] describes, then (version 3)
/// [`EnvelopeWriter::slot`] once per slot, then [`EnvelopeWriter::finish`].
pub struct EnvelopeWriter {
    out: Vec<u8>,
    n: usize,
    written: usize,
    record: usize,
    state: Option<state::Writing>,
    /// A slot started before every page record was written.
    misordered: bool,
}

impl EnvelopeWriter {
    /// A writer for `n` records of a pool of `elem` values and geometry `g`; its whole
    /// length is reserved up front, and a length that overflows or cannot be allocated is
    /// an error.
    pub fn new(elem: KvElem, g: KvGeometry, n: usize) -> Result<EnvelopeWriter, KvError> {
        Self::start(elem, g, n, None)
    }

    /// A version 3 writer: `n` page records, then `state.1` slots of geometry `state.0`,
    /// the exported list's holes at the indices `state.2` (ascending).
    pub fn with_state(
        elem: KvElem,
        g: KvGeometry,
        n: usize,
        state: (StateGeometry, usize, &[u32]),
    ) -> Result<EnvelopeWriter, KvError> {
        Self::start(elem, g, n, Some(state::Writing::new(state.0, state.1, state.2)?))
    }

    fn start(elem: KvElem, g: KvGeometry, n: usize, state: Option<state::Writing>) -> Result<EnvelopeWriter, KvError> {
        let n32 = u32::try_from(n).map_err(|_| KvError::Overflow { what: format!("export of {n} blocks") })?;
        let record = record_bytes(g, elem).ok_or_else(|| KvError::Overflow { what: "record size".into() })?;
        let len = record
            .checked_mul(n)
            .and_then(|b| b.checked_add(HEADER_BYTES + TRAILER_BYTES))
            .and_then(|b| b.checked_add(state.as_ref().map_or(0, |s| s.bytes)))
            .ok_or_else(|| KvError::Overflow { what: format!("export of {n} blocks") })?;
        let mut out = Vec::new();
        out.try_reserve_exact(len)
            .map_err(|_| KvError::Backend(format!("KV pool: cannot allocate a {len}-byte export")))?;
        out.extend_from_slice(&ENVELOPE_MAGIC);
        let version = if state.is_some() { ENVELOPE_VERSION_3 } else { version_of(elem) };
        for v in [version, elem.code(), g.n_layers, g.n_kv_heads, g.head_dim, g.block_tokens, n32, 0] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        Ok(EnvelopeWriter { out, n, written: 0, record, state, misordered: false })
    }

    /// Start the next record; its slabs follow, appended to the returned buffer.
    pub fn record(&mut self, fill: u32, hash: Option<u64>) -> &mut Vec<u8> {
        self.written += 1;
        self.out.extend_from_slice(&fill.to_le_bytes());
        let flags = if hash.is_some() { FLAG_HASH } else { 0 };
        self.out.extend_from_slice(&flags.to_le_bytes());
        self.out.extend_from_slice(&hash.unwrap_or(0).to_le_bytes());
        &mut self.out
    }

    /// Start the next slot record (version 3, after every page record), the slot at index
    /// `at` of the exported list; its `R * F` f32 values follow, little-endian, appended to
    /// the returned buffer. The records a version 1 or 2 writer announced come first.
    pub fn slot(&mut self, fill: u32, hash: Option<u64>, at: u32) -> &mut Vec<u8> {
        self.misordered |= self.written != self.n || self.state.is_none();
        if let Some(s) = self.state.as_mut() {
            s.slot(&mut self.out, fill, hash, at);
        }
        &mut self.out
    }

    /// The envelope, checksum appended; an error when the records written are not the
    /// `n` announced or a record's slabs were not its size.
    pub fn finish(mut self) -> Result<Vec<u8>, KvError> {
        let pages = HEADER_BYTES + self.n * self.record;
        let state_ok = match self.state.as_mut() {
            Some(s) => s.finish(&mut self.out, pages),
            None => self.out.len() == pages,
        };
        if self.written != self.n || !state_ok || self.misordered {
            return Err(KvError::Backend(format!(
                "KV export: {} records of {} bytes announced{}, {} written in {} bytes",
                self.n,
                self.record,
                self.state.as_ref().map_or(String::new(), |s| format!(" and {}", s.announced())),
                self.written,
                self.out.len() - HEADER_BYTES
            )));
        }
        let sum = fnv1a64(&self.out);
        self.out.extend_from_slice(&sum.to_le_bytes());
        Ok(self.out)
    }
}
