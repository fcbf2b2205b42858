//! Stable 64-bit hashes: FNV-1a 64 for block hashes and envelope checksums. Core owns
//! them, so the engine, the pool and the envelope agree on every hash without one naming
//! another.
//!
//! Both may cross machines (a prefix hash computed by one engine, an envelope checked by
//! another), so neither may use the std hasher, whose keys are random per process.

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Incremental FNV-1a 64.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fnv(u64);

impl Fnv {
    pub(crate) fn new() -> Fnv {
        Fnv(FNV_OFFSET)
    }

    pub(crate) fn update(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(FNV_PRIME);
        }
        self.0 = h;
    }

    pub(crate) fn finish(self) -> u64 {
        self.0
    }
}

/// FNV-1a 64 of `bytes` (offset basis `0xcbf29ce484222325`, prime `0x100000001b3`).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = Fnv::new();
    h.update(bytes);
    h.finish()
}

/// The prefix hash of a block: FNV-1a 64 over a tag byte, the parent and the tokens.
///
/// The hashed bytes are `0x00` when `parent` is `None`, or `0x01` followed by the parent
/// hash as 8 little-endian bytes; then each token id as 4 little-endian bytes. Chaining
/// the parent makes equal hashes mean equal whole prefixes (up to 64-bit collisions), and
/// the tag keeps a first block apart from a block whose parent hash happens to be 0.
pub fn block_hash(parent: Option<u64>, tokens: &[u32]) -> u64 {
    let mut h = Fnv::new();
    match parent {
        None => h.update(&[0]),
        Some(p) => {
            h.update(&[1]);
            h.update(&p.to_le_bytes());
        }
    }
    for t in tokens {
        h.update(&t.to_le_bytes());
    }
    h.finish()
}

/// The prefix hash of layer group `group`'s page of a block whose [`block_hash`] is
/// `hash` (docs/kv.md, layer groups): `hash` itself for group 0, so a model of one group
/// hashes as before; else FNV-1a 64 over the tag byte `0x02`, `hash` and `group` as
/// 8 and 4 little-endian bytes (the tag keeps it apart from every [`block_hash`]).
pub fn group_hash(hash: u64, group: usize) -> u64 {
    if group == 0 {
        return hash;
    }
    let mut h = Fnv::new();
    h.update(&[2]);
    h.update(&hash.to_le_bytes());
    h.update(&(group as u32).to_le_bytes());
    h.finish()
}
