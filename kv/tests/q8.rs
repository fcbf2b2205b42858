//! The q8 pool (`"q8-slab"`, docs/spec/kv.md "Other element types"): tl-kv's bookkeeping
//! over q8 slabs, envelope version 2 round trips bit for bit, and pools of one element
//! type refuse the other's envelopes with an error that says so, taking no block.

mod common;

use common::{counts, edited, refused};
use proptest::prelude::*;
use tl_core::registry;
use tl_kv::{KvElem, KvError, KvGeometry, KvPool, ENVELOPE_VERSION, ENVELOPE_VERSION_2};

const G: KvGeometry = KvGeometry { n_layers: 2, n_kv_heads: 2, head_dim: 16, block_tokens: 4 };
/// Codes per slab (2 heads * 4 slots * 16) and scales per slab (2 * 4).
const CODES: usize = 128;
const ROWS: usize = 8;

/// A q8 pool whose first `n` blocks hold distinct patterns: codes cycle through
/// -127..=127, scales through f16 bit patterns; block 0 full and registered.
fn patterned(n_blocks: u32, n: usize) -> (KvPool, Vec<u32>) {
    let mut p = KvPool::q8(G, n_blocks, true).unwrap();
    let ids = p.alloc(n).unwrap();
    let mut next = 0u32;
    for &id in &ids {
        for l in 0..G.n_layers {
            for is_v in [false, true] {
                let s = p.q8_slab_mut(id, l, is_v).unwrap();
                for c in s.codes.iter_mut() {
                    *c = ((next % 255) as i32 - 127) as i8; // -127..=127
                    next += 1;
                }
                for (k, x) in s.scales.iter_mut().enumerate() {
                    *x = (next.wrapping_mul(2654435761) >> 16) as u16 ^ k as u16;
                }
            }
        }
        p.set_fill(id, (id % 5).min(4)).unwrap();
    }
    p.set_fill(ids[0], 4).unwrap();
    p.register(ids[0], 77).unwrap();
    (p, ids)
}

fn contents(p: &KvPool, id: u32) -> (Vec<i8>, Vec<u16>) {
    let (mut c, mut s) = (Vec::new(), Vec::new());
    for l in 0..G.n_layers {
        for is_v in [false, true] {
            let q = p.q8_slab(id, l, is_v).unwrap();
            c.extend_from_slice(q.codes);
            s.extend_from_slice(q.scales);
        }
    }
    (c, s)
}

#[test]
fn a_q8_pool_keeps_codes_and_scales_and_refuses_f16_access() {
    let (p, ids) = patterned(8, 3);
    assert_eq!(p.elem(), KvElem::Q8);
    let s = p.q8_slab(ids[1], 1, true).unwrap();
    assert_eq!((s.codes.len(), s.scales.len()), (CODES, ROWS));
    assert!(s.codes.iter().all(|&c| c != -128));
    assert_eq!(p.slab(ids[0], 0, false), Err(KvError::WrongElem { asked: KvElem::F16, stored: KvElem::Q8 }));
    assert!(matches!(p.q8_slab(99, 0, false), Err(KvError::BadId { id: 99, .. })));
    assert!(matches!(p.q8_slab(ids[0], 2, false), Err(KvError::BadLayer { layer: 2, .. })));
    assert_eq!(p.q8_slab(7, 0, false).err(), Some(KvError::NotInUse { id: 7 }));
    // An f16 pool has no q8 slabs.
    let mut f = KvPool::new(G, 2).unwrap();
    let a = f.alloc(1).unwrap()[0];
    assert_eq!(f.q8_slab(a, 0, false).err(), Some(KvError::WrongElem { asked: KvElem::Q8, stored: KvElem::F16 }));
    // Bytes: (D + 2) / (2 D) of the f16 pool's.
    assert_eq!(p.size_bytes() * 32, KvPool::new(G, 8).unwrap().size_bytes() * 18);
    p.check_invariants().unwrap();
}

#[test]
fn q8_envelopes_round_trip_bit_for_bit_as_version_2() {
    let (src, ids) = patterned(8, 5);
    let env = src.export(&ids).unwrap();
    let slab = CODES + 2 * ROWS;
    assert_eq!(env.len(), 40 + 5 * (16 + 4 * slab) + 8);
    assert_eq!(&env[8..16], &[2, 0, 0, 0, 2, 0, 0, 0], "version 2, dtype 2 (q8)");
    // Layout: block 0's layer 0 K codes, then its scales little-endian.
    let k0 = src.q8_slab(ids[0], 0, false).unwrap();
    assert_eq!(&env[56..56 + CODES], &k0.codes.iter().map(|&c| c as u8).collect::<Vec<_>>()[..]);
    assert_eq!(env[56 + CODES..58 + CODES], k0.scales[0].to_le_bytes());

    let mut dst = KvPool::q8(G, 6, true).unwrap();
    let got = dst.import(&env).unwrap();
    for (&a, &b) in ids.iter().zip(&got) {
        assert_eq!(contents(&src, a), contents(&dst, b), "block {a} -> {b}");
        assert_eq!(dst.fill(b), src.fill(a));
    }
    assert_eq!(dst.lookup(77), Some(got[0]), "the registered block is findable again");
    dst.check_invariants().unwrap();
    // Exporting the import gives the same bytes.
    assert_eq!(dst.export(&got).unwrap(), env);
}

#[test]
fn pools_refuse_the_other_element_type_and_corrupt_q8_envelopes() {
    let (src, ids) = patterned(8, 3);
    let q8_env = src.export(&ids).unwrap();
    let mut f16 = KvPool::new(G, 8).unwrap();
    let fa = f16.alloc(2).unwrap();
    let f16_env = f16.export(&fa).unwrap();
    assert_eq!(&f16_env[8..12], &ENVELOPE_VERSION.to_le_bytes(), "f16 pools still write version 1");

    refused(&mut f16, &q8_env, "dtype 2 (q8) does not match this pool's 1 (f16)");
    let mut q8 = KvPool::q8(G, 8, true).unwrap();
    refused(&mut q8, &f16_env, "dtype 1 (f16) does not match this pool's 2 (q8)");
    // A version that does not carry the element type, each way.
    refused(&mut q8, &edited(&q8_env, 8, &ENVELOPE_VERSION.to_le_bytes()), "version 1 does not carry q8");
    refused(&mut f16, &edited(&f16_env, 8, &ENVELOPE_VERSION_2.to_le_bytes()), "version 2 does not carry f16");
    refused(&mut q8, &edited(&q8_env, 8, &4u32.to_le_bytes()), "unsupported version 4");
    // Version 3 carries recurrent state (a hybrid pool's): a pool without state refuses it.
    refused(&mut q8, &edited(&q8_env, 8, &3u32.to_le_bytes()), "version 3 carries recurrent state");
    refused(&mut q8, &edited(&q8_env, 12, &9u32.to_le_bytes()), "dtype 9 (unknown)");
    // A code no quantizer writes, correctly sealed.
    refused(&mut q8, &edited(&q8_env, 56 + 3, &[0x80]), "-128");
    // Corrupt and truncated.
    for at in [40usize, 56 + CODES, q8_env.len() - 9] {
        let mut e = q8_env.clone();
        e[at] ^= 0x04;
        refused(&mut q8, &e, "checksum");
    }
    for len in [0usize, 47, 100, q8_env.len() - 8, q8_env.len() - 1] {
        refused(&mut q8, &q8_env[..len], "truncated");
    }
    let mut other = KvPool::q8(KvGeometry { head_dim: 8, ..G }, 8, true).unwrap();
    refused(&mut other, &q8_env, "geometry");
    assert_eq!((q8.n_free(), q8.n_in_use()), (8, 0));
}

#[test]
fn q8_slab_is_registered_beside_f16_slab() {
    let names = registry::kv_backend_names().unwrap();
    assert!(names.contains(&"f16-slab") && names.contains(&"q8-slab"), "{names:?}");
    let spec = tl_core::KvSpec { geometry: G, n_blocks: 3, prefix_cache: true, state: None };
    let pool = (registry::kv_backend("q8-slab").unwrap().make)(&spec).unwrap();
    assert_eq!((pool.elem(), pool.n_blocks(), pool.geometry()), (KvElem::Q8, 3, G));
    assert!(KvPool::q8(G, 0, true).is_err(), "zero blocks");
    assert!(matches!(
        KvPool::q8(KvGeometry { head_dim: 0, ..G }, 4, true),
        Err(KvError::ZeroCapacity { field: "head_dim" })
    ));
    assert!(matches!(
        KvPool::q8(KvGeometry { n_layers: u32::MAX, ..G }, u32::MAX, true),
        Err(KvError::Overflow { .. })
    ));
}

#[test]
fn the_fuzz_seed_of_version_2_is_a_valid_q8_envelope() {
    // fuzz/seeds.py writes it: a selector byte, then the envelope; the fuzzer mutates from
    // here, so it must reach the end of a successful import.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus/kv_import/seed-q8-one-block");
    let data = std::fs::read(path).expect("seed");
    let g = KvGeometry { n_layers: 1, n_kv_heads: 1, head_dim: 2, block_tokens: 2 };
    let mut p = KvPool::q8(g, 4, true).unwrap();
    let ids = p.import(&data[1..]).expect("the seed imports");
    let k = p.q8_slab(ids[0], 0, false).unwrap();
    assert_eq!((k.codes, k.scales), (&[1i8, -127, 127, 0][..], &[0x2c00u16, 0x3c00][..]));
    assert!(KvPool::new(g, 4).unwrap().import(&data[1..]).is_err(), "an f16 pool refuses it");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// What the fuzz target does, in CI: a valid q8 envelope with random bytes changed and
    /// its checksum sealed again either imports or is refused, never panics, and a refusal
    /// takes no block.
    #[test]
    fn edited_q8_envelopes_import_or_are_refused(edits in prop::collection::vec((0usize..4096, any::<u8>()), 1..6)) {
        let (src, ids) = patterned(8, 2);
        let mut env = src.export(&ids).unwrap();
        let body = env.len() - 8;
        for (at, byte) in edits {
            env[at % body] = byte;
        }
        let env = edited(&env, 0, &env[..1]);
        let mut p = KvPool::q8(G, 4, true).unwrap();
        match p.import(&env) {
            Ok(got) => prop_assert_eq!(counts(&p).2, got.len()),
            Err(KvError::BadEnvelope { .. } | KvError::OutOfBlocks { .. }) => prop_assert_eq!(counts(&p), (4, 0, 0)),
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
        prop_assert!(p.check_invariants().is_ok());
    }
}
