//! The pool's block lifecycle (kv.md "Block states"), construction limits, the worked
//! layout example, the registry entry and the stable block hash.

use tl_core::{KvBackend, KvSpec};
use tl_kv::{block_hash, fnv1a64, n_blocks_for_budget, BlockState, KvError, KvGeometry, KvPool};

fn geometry(block_tokens: u32) -> KvGeometry {
    KvGeometry { n_layers: 2, n_kv_heads: 2, head_dim: 4, block_tokens }
}

fn pool(n_blocks: u32) -> KvPool {
    KvPool::new(geometry(4), n_blocks).expect("valid pool")
}

fn counts(p: &KvPool) -> (usize, usize, usize) {
    (p.n_free(), p.n_cached(), p.n_in_use())
}

fn ok(p: &KvPool) {
    p.check_invariants().expect("kv.md invariants");
}

#[test]
fn kv_pool_bounds_and_cache_lifecycle() {
    let mut p = pool(4);
    ok(&p);
    assert_eq!(counts(&p), (4, 0, 0));

    // All or nothing: 5 of 4 fails and changes nothing.
    assert_eq!(p.alloc(5), Err(KvError::OutOfBlocks { requested: 5, available: 4 }));
    assert_eq!(counts(&p), (4, 0, 0));
    let ids = p.alloc(3).expect("3 of 4");
    assert_eq!(ids.len(), 3);
    for &id in &ids {
        assert_eq!((p.refs(id), p.fill(id), p.hash_of(id)), (Ok(1), Ok(0), Ok(None)));
    }
    assert_eq!(counts(&p), (1, 0, 3));
    assert_eq!(p.alloc(2), Err(KvError::OutOfBlocks { requested: 2, available: 1 }));
    assert_eq!(counts(&p), (1, 0, 3));
    ok(&p);

    // Refs balance: retain twice, release three times, then a fourth release is an error.
    let a = ids[0];
    p.retain(a).unwrap();
    p.retain(a).unwrap();
    assert_eq!(p.refs(a), Ok(3));
    p.release(a).unwrap();
    p.release(a).unwrap();
    assert_eq!((p.refs(a), p.state(a)), (Ok(1), Ok(BlockState::InUse)));
    p.release(a).unwrap();
    assert_eq!((p.refs(a), p.state(a)), (Ok(0), Ok(BlockState::Free)));
    assert_eq!(p.release(a), Err(KvError::NotInUse { id: a }));
    assert_eq!(p.retain(a), Err(KvError::NotInUse { id: a }));
    assert_eq!(counts(&p), (2, 0, 2));
    ok(&p);

    // Only full blocks register.
    let b = ids[1];
    let h = block_hash(None, &[10, 11, 12, 13]);
    assert_eq!(p.register(b, h), Err(KvError::NotFull { id: b, fill: 0, block_tokens: 4 }));
    assert_eq!(p.set_fill(b, 5), Err(KvError::FillTooLarge { id: b, fill: 5, block_tokens: 4 }));
    p.set_fill(b, 3).unwrap();
    assert!(matches!(p.register(b, h), Err(KvError::NotFull { fill: 3, .. })));
    assert_eq!(p.lookup(h), None);
    p.set_fill(b, 4).unwrap();
    p.register(b, h).unwrap();
    assert_eq!(p.hash_of(b), Ok(Some(h)));
    assert!(p.set_fill(b, 2).is_err(), "a registered block stays full");
    ok(&p);

    // Lookup of an in-use block shares it.
    assert_eq!(p.lookup(h), Some(b));
    assert_eq!(p.refs(b), Ok(2));
    p.release(b).unwrap();

    // Release to 0 caches a registered block; lookup reacquires it off the LRU.
    p.release(b).unwrap();
    assert_eq!((p.state(b), p.refs(b)), (Ok(BlockState::Cached), Ok(0)));
    assert_eq!(counts(&p), (2, 1, 1));
    assert_eq!(p.release(b), Err(KvError::NotInUse { id: b }), "double release of a cached block");
    assert_eq!(p.retain(b), Err(KvError::NotInUse { id: b }), "a cached block is reacquired by lookup");
    ok(&p);
    assert_eq!(p.lookup(h), Some(b));
    assert_eq!((p.state(b), p.refs(b), p.fill(b)), (Ok(BlockState::InUse), Ok(1), Ok(4)));
    assert_eq!(counts(&p), (2, 0, 2));
    ok(&p);

    // Cached blocks count as available: alloc takes the free ones, then evicts.
    p.release(b).unwrap();
    assert_eq!(counts(&p), (2, 1, 1));
    let all = p.alloc(3).expect("2 free + 1 cached");
    assert!(all.contains(&b), "the cached block was evicted to satisfy the allocation");
    assert_eq!(p.lookup(h), None, "eviction dropped its hash entry");
    assert_eq!(counts(&p), (0, 0, 4));
    ok(&p);

    // Bad ids and layers are errors, never panics.
    for bad in [4u32, 1000, u32::MAX] {
        let e = KvError::BadId { id: bad, n_blocks: 4 };
        assert_eq!(p.retain(bad), Err(e.clone()));
        assert_eq!(p.release(bad), Err(e.clone()));
        assert_eq!(p.set_fill(bad, 0), Err(e.clone()));
        assert_eq!(p.register(bad, 1), Err(e.clone()));
        assert_eq!(p.slab(bad, 0, false).err(), Some(e.clone()));
        assert_eq!(p.slab_mut(bad, 0, true).err(), Some(e.clone()));
        assert_eq!(p.export(&[bad]).err(), Some(e.clone()));
        assert_eq!(p.refs(bad), Err(e));
    }
    assert_eq!(p.slab(b, 2, false).err(), Some(KvError::BadLayer { layer: 2, n_layers: 2 }));
    ok(&p);
}

#[test]
fn kv_pool_frees_registered_blocks_without_prefix_cache() {
    let mut p = KvPool::with_prefix_cache(geometry(4), 2, false).unwrap();
    let a = p.alloc(1).unwrap()[0];
    p.set_fill(a, 4).unwrap();
    p.register(a, 7).unwrap();
    assert_eq!(p.lookup(7), Some(a), "in-use registered blocks are shared");
    p.release(a).unwrap();
    p.release(a).unwrap();
    assert_eq!(p.state(a), Ok(BlockState::Free));
    assert_eq!(p.lookup(7), None, "release to 0 dropped the hash entry");
    assert_eq!(counts(&p), (2, 0, 0));
    ok(&p);
}

#[test]
fn kv_pool_register_keeps_the_first_block_of_a_hash() {
    let mut p = pool(3);
    let ids = p.alloc(2).unwrap();
    for &id in &ids {
        p.set_fill(id, 4).unwrap();
    }
    p.register(ids[0], 99).unwrap();
    p.register(ids[0], 99).unwrap(); // idempotent
    p.register(ids[1], 99).unwrap(); // first wins
    assert_eq!((p.hash_of(ids[0]), p.hash_of(ids[1])), (Ok(Some(99)), Ok(None)));
    assert!(p.register(ids[0], 100).is_err(), "a block has one hash");
    assert_eq!(p.lookup(99), Some(ids[0]));
    ok(&p);
}

#[test]
fn kv_pool_evicts_the_oldest_cached_block() {
    let mut p = pool(4);
    let ids = p.alloc(4).unwrap();
    let hashes: Vec<u64> = (0..4u32).map(|i| block_hash(None, &[i, i, i, i])).collect();
    for (&id, &h) in ids.iter().zip(&hashes) {
        p.set_fill(id, 4).unwrap();
        p.register(id, h).unwrap();
    }
    // Release order 2, 0, 3, 1: block 2 is the oldest cached, 1 the newest.
    for i in [2usize, 0, 3, 1] {
        p.release(ids[i]).unwrap();
    }
    assert_eq!(counts(&p), (0, 4, 0));
    ok(&p);
    // Reacquiring 0 and releasing it again makes it the newest: order now 2, 3, 1, 0.
    assert_eq!(p.lookup(hashes[0]), Some(ids[0]));
    p.release(ids[0]).unwrap();

    assert_eq!(p.alloc(1), Ok(vec![ids[2]]), "the least recently released block goes first");
    assert_eq!(p.lookup(hashes[2]), None);
    assert_eq!(p.alloc(1), Ok(vec![ids[3]]));
    assert_eq!(p.lookup(hashes[3]), None);
    ok(&p);
    // The two most recent prefixes survive.
    assert_eq!(p.lookup(hashes[1]), Some(ids[1]));
    assert_eq!(p.lookup(hashes[0]), Some(ids[0]));
    assert_eq!(counts(&p), (0, 0, 4));
    ok(&p);
}

#[test]
fn kv_pool_rejects_zero_capacity() {
    let g = geometry(16);
    assert_eq!(KvPool::new(g, 0).err(), Some(KvError::ZeroCapacity { field: "n_blocks" }));
    let zero = |f: fn(&mut KvGeometry)| {
        let mut c = g;
        f(&mut c);
        KvPool::new(c, 8).err()
    };
    assert_eq!(zero(|c| c.block_tokens = 0), Some(KvError::ZeroCapacity { field: "block_tokens" }));
    assert_eq!(zero(|c| c.n_layers = 0), Some(KvError::ZeroCapacity { field: "n_layers" }));
    assert_eq!(zero(|c| c.n_kv_heads = 0), Some(KvError::ZeroCapacity { field: "n_kv_heads" }));
    assert_eq!(zero(|c| c.head_dim = 0), Some(KvError::ZeroCapacity { field: "head_dim" }));
    // Slab and pool sizes that overflow are refused, not wrapped or allocated.
    let huge = KvGeometry { n_layers: u32::MAX, n_kv_heads: u32::MAX, head_dim: u32::MAX, block_tokens: u32::MAX };
    assert!(matches!(KvPool::new(huge, 1).err(), Some(KvError::Overflow { .. })));
    let big = KvGeometry { n_layers: 1 << 16, n_kv_heads: 1 << 8, head_dim: 1 << 8, block_tokens: 1 << 8 };
    assert!(matches!(KvPool::new(big, u32::MAX).err(), Some(KvError::Overflow { .. })));
    // The registry path refuses the same way.
    let reg = tl_core::registry::kv_backend(tl_kv::BACKEND_NAME).unwrap();
    let spec = KvSpec { geometry: g, n_blocks: 0, prefix_cache: true, state: None };
    assert_eq!((reg.make)(&spec).err(), Some(KvError::ZeroCapacity { field: "n_blocks" }));
}

#[test]
fn kv_pool_reports_its_size_and_sizes_from_a_budget() {
    let g = geometry(16); // slab 2*16*4 = 128 elems; block = 2 layers * 2 * 128 * 2 B = 1024 B
    assert_eq!(g.block_bytes(), Some(1024));
    assert_eq!(n_blocks_for_budget(10 * 1024 + 1023, &g), Ok(10));
    assert!(matches!(n_blocks_for_budget(1023, &g), Err(KvError::ZeroCapacity { .. })));
    let zero = KvGeometry { head_dim: 0, ..g };
    assert_eq!(n_blocks_for_budget(1 << 20, &zero), Err(KvError::ZeroCapacity { field: "head_dim" }));
    let p = KvPool::new(g, n_blocks_for_budget(10 * 1024, &g).unwrap()).unwrap();
    assert_eq!(p.size_bytes(), 10 * 1024);
    assert_eq!(p.slab_elems(), 128);
}

/// kv.md's example: B = 16, table [7, 2, 9]; position 37 is pool block 9, slot 5, and
/// KV head h's K starts at element (h * 16 + 5) * D of layer l's K slab of block 9.
#[test]
fn kv_pool_worked_example_position_37() {
    let (b, d, heads, layers) = (16u32, 4usize, 2usize, 2u32);
    let g = KvGeometry { n_layers: layers, n_kv_heads: heads as u32, head_dim: d as u32, block_tokens: b };
    let mut p = KvPool::new(g, 10).unwrap();
    let ids = p.alloc(10).unwrap();
    assert_eq!(ids, (0..10).collect::<Vec<u32>>(), "a fresh pool hands out 0, 1, 2, ...");
    let table = [7u32, 2, 9];
    let pos = 37usize;
    let (entry, slot) = (pos / b as usize, pos % b as usize);
    assert_eq!((entry, table[entry], slot), (2, 9, 5));
    let block = table[entry];
    // K of every head and layer of position 37: a distinct f16 pattern per element.
    let val = |l: u32, h: usize, e: usize| 0x3c00u16 + (l as u16) * 256 + (h as u16) * 16 + e as u16;
    for l in 0..layers {
        let k = p.slab_mut(block, l, false).unwrap();
        for h in 0..heads {
            let at = (h * 16 + 5) * d;
            assert_eq!(at, g.offset(h, slot));
            k[at..at + d].iter_mut().enumerate().for_each(|(e, x)| *x = val(l, h, e));
        }
    }
    for l in 0..layers {
        let k = p.slab(block, l, false).unwrap();
        assert_eq!(k.len(), heads * 16 * d);
        for h in 0..heads {
            let at = (h * 16 + 5) * d;
            for e in 0..d {
                assert_eq!(k[at + e], val(l, h, e), "layer {l} head {h} element {e}");
            }
        }
        let written = k.iter().filter(|&&x| x != 0).count();
        assert_eq!(written, heads * d, "only position 37's K elements were written");
        assert!(p.slab(block, l, true).unwrap().iter().all(|&x| x == 0), "V untouched");
        for other in [7u32, 2] {
            assert!(p.slab(other, l, false).unwrap().iter().all(|&x| x == 0), "block {other} untouched");
        }
    }
    // And the value sits where docs/formats/kv-block.md says in an export of block 9:
    // header 40, record header 16, slabs layer-major K then V.
    let env = p.export(&[block]).unwrap();
    let slab_bytes = heads * 16 * d * 2;
    for l in 0..layers as usize {
        for h in 0..heads {
            let at = 40 + 16 + (l * 2) * slab_bytes + ((h * 16 + 5) * d) * 2;
            assert_eq!(u16::from_le_bytes([env[at], env[at + 1]]), val(l as u32, h, 0));
        }
    }
}

#[test]
fn kv_registry_lists_f16_slab_and_builds_a_pool() {
    let names = tl_core::registry::kv_backend_names().unwrap();
    assert!(names.contains(&"f16-slab"), "registered: {names:?}");
    let reg = tl_core::registry::kv_backend("f16-slab").unwrap();
    let spec = KvSpec { geometry: geometry(8), n_blocks: 3, prefix_cache: true, state: None };
    let mut kv: Box<dyn KvBackend> = (reg.make)(&spec).unwrap();
    assert_eq!((kv.geometry(), kv.n_blocks()), (spec.geometry, 3));
    let ids = kv.alloc(2).unwrap();
    kv.slab_mut(ids[0], 1, true).unwrap()[3] = 0x1234;
    assert_eq!(kv.slab(ids[0], 1, true).unwrap()[3], 0x1234);
    kv.set_fill(ids[0], 8).unwrap();
    kv.register(ids[0], 42).unwrap();
    kv.release(ids[0]).unwrap();
    assert_eq!((kv.n_free(), kv.n_cached(), kv.n_in_use()), (1, 1, 1));
    assert_eq!(kv.lookup(42), Some(ids[0]));
    let pool = (&*kv as &dyn std::any::Any).downcast_ref::<KvPool>().expect("f16-slab builds a KvPool");
    assert!(pool.prefix_cache());
    pool.check_invariants().unwrap();
    let off = (reg.make)(&KvSpec { prefix_cache: false, ..spec }).unwrap();
    assert!(!(&*off as &dyn std::any::Any).downcast_ref::<KvPool>().unwrap().prefix_cache());
}

/// Golden values from an independent Python FNV-1a 64 (fnv1a64(b"a") is the published
/// FNV test vector).
#[test]
fn block_hash_is_the_documented_fnv1a_chain() {
    assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    let h0 = block_hash(None, &[1, 2]);
    assert_eq!(h0, 0x8714_6320_6d35_667c);
    assert_eq!(block_hash(Some(h0), &[3, 4]), 0x7854_3e25_c91f_741f);
    assert_eq!(block_hash(None, &[]), 0xaf63_bd4c_8601_b7df);
    assert_eq!(block_hash(Some(0), &[]), 0x529a_2cdc_8ff5_33ac);
    assert_ne!(block_hash(Some(h0), &[3, 4]), block_hash(None, &[3, 4]), "the parent is chained");
}
