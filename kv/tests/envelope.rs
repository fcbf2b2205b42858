//! The export/import envelope (docs/formats/kv-block.md): bit-exact round trips, a golden
//! envelope from an independent Python encoder, and refusals that take no block.

mod common;

use common::{counts, edited, refused};
use tl_kv::{block_hash, BlockState, KvError, KvGeometry, KvPool};

/// Slab 2 heads * 16 slots * 16 dims = 512 elements; 2 layers * K,V = 2048 per block,
/// so 32 blocks hold all 65536 f16 bit patterns once.
const G: KvGeometry = KvGeometry { n_layers: 2, n_kv_heads: 2, head_dim: 16, block_tokens: 16 };

fn pool(n_blocks: u32, prefix_cache: bool) -> KvPool {
    KvPool::with_prefix_cache(G, n_blocks, prefix_cache).unwrap()
}

/// A pool whose first 32 blocks hold every f16 pattern once; every third block is full and
/// registered, the others have assorted fills. Returns (pool, ids).
fn patterned(n_blocks: u32) -> (KvPool, Vec<u32>) {
    let mut p = pool(n_blocks, true);
    let ids = p.alloc(32).unwrap();
    let mut next: u32 = 0;
    for (i, &id) in ids.iter().enumerate() {
        for l in 0..G.n_layers {
            for is_v in [false, true] {
                for x in p.slab_mut(id, l, is_v).unwrap() {
                    *x = next as u16;
                    next += 1;
                }
            }
        }
        if i % 3 == 0 {
            p.set_fill(id, 16).unwrap();
            p.register(id, block_hash(None, &[i as u32; 16])).unwrap();
        } else {
            p.set_fill(id, i as u32 % 16).unwrap();
        }
    }
    assert_eq!(next, 1 << 16);
    (p, ids)
}

fn slabs(p: &KvPool, id: u32) -> Vec<u16> {
    let mut out = Vec::new();
    for l in 0..G.n_layers {
        for is_v in [false, true] {
            out.extend_from_slice(p.slab(id, l, is_v).unwrap());
        }
    }
    out
}

#[test]
fn kv_pool_exports_and_imports_rust_owned_blocks() {
    let (src, ids) = patterned(32);
    let env = src.export(&ids).unwrap();
    assert_eq!(env.len(), 40 + 32 * (16 + 2048 * 2) + 8);

    // Into a fresh pool with prefix caching: same data, fills, and hashes re-registered.
    let mut dst = pool(40, true);
    let got = dst.import(&env).unwrap();
    assert_eq!(got.len(), 32);
    assert_eq!(counts(&dst), (8, 0, 32));
    for (&a, &b) in ids.iter().zip(&got) {
        let (sa, sb) = (slabs(&src, a), slabs(&dst, b));
        assert!(sa.iter().zip(&sb).all(|(x, y)| x == y), "block {a} -> {b}: slabs differ");
        assert_eq!(sa.len(), sb.len());
        assert_eq!(dst.fill(b), src.fill(a));
        assert_eq!(dst.hash_of(b), src.hash_of(a));
        assert_eq!(dst.refs(b), Ok(1));
    }
    let h0 = block_hash(None, &[0; 16]);
    assert_eq!(dst.lookup(h0), Some(got[0]), "an imported full block is findable");
    dst.release(got[0]).unwrap();
    dst.check_invariants().unwrap();
    // Every pattern arrived exactly once.
    let mut seen = vec![false; 1 << 16];
    for &b in &got {
        for x in slabs(&dst, b) {
            assert!(!std::mem::replace(&mut seen[x as usize], true), "pattern {x:#06x} twice");
        }
    }
    assert!(seen.iter().all(|&s| s), "every f16 pattern round-trips");

    // Without prefix caching the data comes back but no hash is registered.
    let mut off = pool(32, false);
    let got_off = off.import(&env).unwrap();
    assert!(got_off.iter().all(|&b| off.hash_of(b) == Ok(None)));
    assert_eq!(slabs(&off, got_off[5]), slabs(&src, ids[5]));

    // Back into a pool that already holds those hashes: the copies stay unregistered.
    let (mut same, ids2) = patterned(40);
    let part = same.export(&ids2[..6]).unwrap();
    let copies = same.import(&part).unwrap();
    assert_eq!(copies.len(), 6);
    assert!(copies.iter().all(|&b| same.hash_of(b) == Ok(None)));
    assert_eq!(same.lookup(h0), Some(ids2[0]));
    assert_eq!(slabs(&same, copies[3]), slabs(&same, ids2[3]));
    same.check_invariants().unwrap();

    // An empty export is a valid envelope of nothing.
    let empty = src.export(&[]).unwrap();
    assert_eq!(empty.len(), 48);
    assert_eq!(dst.import(&empty), Ok(vec![]));

    // Refusals: each leaves the pool as it was.
    let mut p = pool(40, true);
    let mut e = env.clone();
    e[0] ^= 1;
    refused(&mut p, &e, "magic");
    refused(&mut p, &edited(&env, 8, &2u32.to_le_bytes()), "version");
    refused(&mut p, &edited(&env, 12, &2u32.to_le_bytes()), "dtype");
    for field in [16usize, 20, 24, 28] {
        refused(&mut p, &edited(&env, field, &[env[field] ^ 2]), "geometry");
    }
    let mut other = KvPool::new(KvGeometry { head_dim: 8, ..G }, 64).unwrap();
    refused(&mut other, &env, "geometry");
    for at in [40usize, 40 + 16 + 777, env.len() - 9, env.len() - 1] {
        let mut e = env.clone();
        e[at] ^= 0x10;
        refused(&mut p, &e, "checksum");
    }
    for len in [0usize, 47, 48, 40 + 16 + 4096, env.len() - 8, env.len() - 1] {
        refused(&mut p, &env[..len], "truncated");
    }
    let mut e = env.clone();
    e.push(0);
    refused(&mut p, &e, "trailing");
    // Malformed records, correctly sealed.
    let rec1 = 40 + (16 + 4096);
    refused(&mut p, &edited(&env, rec1, &17u32.to_le_bytes()), "fill 17");
    refused(&mut p, &edited(&env, rec1 + 4, &2u32.to_le_bytes()), "flags");
    refused(&mut p, &edited(&env, rec1 + 4, &1u32.to_le_bytes()), "has a hash but fill");
    assert_eq!(counts(&p), (40, 0, 0));

    // Too few free + cached blocks: OutOfBlocks, and the cached prefix is not evicted.
    let mut small = pool(33, true);
    let a = small.alloc(3).unwrap();
    small.set_fill(a[0], 16).unwrap();
    small.register(a[0], 5).unwrap();
    small.release(a[0]).unwrap();
    let before = counts(&small);
    assert_eq!(before, (30, 1, 2));
    assert_eq!(small.import(&env), Err(KvError::OutOfBlocks { requested: 32, available: 31 }));
    assert_eq!(counts(&small), before);
    assert_eq!(small.state(a[0]), Ok(BlockState::Cached));
    small.check_invariants().unwrap();
}

/// Bytes written by an independent Python encoder of docs/formats/kv-block.md
/// (L = 1, H = 1, D = 2, B = 2; block 0 full and registered under block_hash(None, [1, 2]),
/// block 1 with fill 1 and no hash).
const GOLDEN: &str = "544c4b56424c4b00010000000100000001000000010000000200000002000000020000000000000002000000010000007c66356d20631487003c0040004200440080007c017e010001000000000000000000000000000000cdab000000000000010002000300ffffcb714a77825d3e92";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn kv_envelope_matches_the_documented_layout() {
    let golden = unhex(GOLDEN);
    let g = KvGeometry { n_layers: 1, n_kv_heads: 1, head_dim: 2, block_tokens: 2 };
    let mut p = KvPool::new(g, 4).unwrap();
    let ids = p.alloc(2).unwrap();
    p.slab_mut(ids[0], 0, false).unwrap().copy_from_slice(&[0x3c00, 0x4000, 0x4200, 0x4400]);
    p.slab_mut(ids[0], 0, true).unwrap().copy_from_slice(&[0x8000, 0x7c00, 0x7e01, 0x0001]);
    p.slab_mut(ids[1], 0, false).unwrap().copy_from_slice(&[0xabcd, 0, 0, 0]);
    p.slab_mut(ids[1], 0, true).unwrap().copy_from_slice(&[1, 2, 3, 0xffff]);
    p.set_fill(ids[0], 2).unwrap();
    p.register(ids[0], block_hash(None, &[1, 2])).unwrap();
    p.set_fill(ids[1], 1).unwrap();
    assert_eq!(p.export(&ids).unwrap(), golden, "export writes the documented bytes");

    let mut q = KvPool::new(g, 2).unwrap();
    let got = q.import(&golden).unwrap();
    assert_eq!(q.slab(got[0], 0, true).unwrap(), &[0x8000, 0x7c00, 0x7e01, 0x0001]);
    assert_eq!(q.slab(got[1], 0, false).unwrap(), &[0xabcd, 0, 0, 0]);
    assert_eq!((q.fill(got[0]), q.fill(got[1])), (Ok(2), Ok(1)));
    assert_eq!(q.lookup(block_hash(None, &[1, 2])), Some(got[0]));
}
