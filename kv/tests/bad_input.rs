//! docs/reliability.md's bad-input rows for the KV envelope: one from another model
//! (another geometry) or another version is refused with a message naming what differs,
//! and the importing pool is left as it was (no block taken).

use tl_kv::{fnv1a64, KvGeometry, KvPool, TRAILER_BYTES};

fn pool(n_layers: u32, head_dim: u32) -> KvPool {
    let g = KvGeometry { n_layers, n_kv_heads: 2, head_dim, block_tokens: 4 };
    KvPool::new(g, 8).expect("pool")
}

fn exported(src: &mut KvPool) -> Vec<u8> {
    let ids = src.alloc(2).expect("alloc");
    src.export(&ids).expect("export")
}

fn refused(dst: &mut KvPool, buf: &[u8], names: &[&str]) {
    let (free, cached) = (dst.n_free(), dst.n_cached());
    let e = dst.import(buf).expect_err("imported").to_string();
    for n in names {
        assert!(e.contains(n), "{e:?} does not name {n:?}");
    }
    assert_eq!((dst.n_free(), dst.n_cached(), dst.n_in_use()), (free, cached, 0), "a refused import took blocks");
    dst.check_invariants().expect("invariants");
}

#[test]
fn an_envelope_from_another_model_is_refused() {
    let buf = exported(&mut pool(2, 8));
    refused(&mut pool(3, 8), &buf, &["geometry", "[2, 2, 8, 4]", "[3, 2, 8, 4]"]);
    refused(&mut pool(2, 16), &buf, &["geometry"]);
}

#[test]
fn an_envelope_of_another_version_is_refused() {
    let mut buf = exported(&mut pool(2, 8));
    buf[8..12].copy_from_slice(&2u32.to_le_bytes());
    // A correct checksum, so the version itself is what is refused.
    let n = buf.len() - TRAILER_BYTES;
    let sum = fnv1a64(&buf[..n]);
    buf[n..].copy_from_slice(&sum.to_le_bytes());
    refused(&mut pool(2, 8), &buf, &["version 2"]);
}

#[test]
fn a_damaged_or_truncated_envelope_is_refused() {
    let buf = exported(&mut pool(2, 8));
    let mut flipped = buf.clone();
    flipped[60] ^= 1;
    refused(&mut pool(2, 8), &flipped, &["checksum"]);
    refused(&mut pool(2, 8), &buf[..buf.len() - 1], &["truncated"]);
    refused(&mut pool(2, 8), &buf[..10], &["truncated"]);
}
