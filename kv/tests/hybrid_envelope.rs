//! A hybrid pool's envelope, version 3 (docs/formats/kv-block.md): pages, recurrent-state
//! slots and the table's holes move between pools at their places in the exported list,
//! every slab and state value with the same bits; the bytes are those of an independent
//! Python encoder (scripts/reference/kv_envelope_v3.py); every refusal takes neither page
//! nor slot.

mod common;

use common::{edited, reseal};
use tl_core::{KvBackend, StateGeometry, NO_BLOCK};
use tl_kv::{block_hash, group_hash, HybridPool, KvError, KvGeometry, KvPool, KvSlabs};

/// Written by scripts/reference/kv_envelope_v3.py from the document alone.
const GOLDEN: &str = "544c4b56424c4b00030000000100000001000000010000000200000002000000020000000000000002000000010000007c66356d20631487003c0040004200440080007c017e010001000000000000000000000000000000cdab000000000000010002000300ffff0100000002000000010000000100000003000000020000000100000030105977a734086d01000000000000000000803f0100c07fe645d5b96f60e692";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

const TINY: KvGeometry = KvGeometry { n_layers: 1, n_kv_heads: 1, head_dim: 2, block_tokens: 2 };
const TINY_STATE: StateGeometry = StateGeometry { n_layers: 1, floats: 2 };

fn hybrid(g: KvGeometry, blocks: u32, s: StateGeometry, slots: u32) -> HybridPool {
    HybridPool::new(KvPool::with_prefix_cache(g, blocks, true).unwrap(), s, slots).unwrap()
}

/// (free pages + cached, free slots + cached, pages in use).
fn counts(p: &HybridPool) -> (usize, usize, usize) {
    (p.n_free() + p.n_cached(), p.n_free_slots(), p.n_in_use())
}

fn refused(p: &mut HybridPool, buf: &[u8], why: &str) {
    let before = counts(p);
    match p.import(buf) {
        Err(KvError::BadEnvelope { reason }) => assert!(reason.contains(why), "{why}: got {reason:?}"),
        other => panic!("{why}: expected BadEnvelope, got {other:?}"),
    }
    assert_eq!(counts(p), before, "{why}: a refused import takes nothing");
}

#[test]
fn a_hybrid_export_writes_the_documented_bytes_and_reads_them_back() {
    let golden = unhex(GOLDEN);
    let mut p = hybrid(TINY, 4, TINY_STATE, 2);
    let pages = p.alloc(2).unwrap();
    let slot = p.alloc_slots(1).unwrap()[0];
    p.slab_mut(pages[0], 0, false).unwrap().copy_from_slice(&[0x3c00, 0x4000, 0x4200, 0x4400]);
    p.slab_mut(pages[0], 0, true).unwrap().copy_from_slice(&[0x8000, 0x7c00, 0x7e01, 0x0001]);
    p.slab_mut(pages[1], 0, false).unwrap().copy_from_slice(&[0xabcd, 0, 0, 0]);
    p.slab_mut(pages[1], 0, true).unwrap().copy_from_slice(&[1, 2, 3, 0xffff]);
    p.state_mut(slot, 0).unwrap().copy_from_slice(&[1.0, f32::from_bits(0x7fc0_0001)]);
    let h0 = block_hash(None, &[1, 2]);
    p.set_fill(pages[0], 2).unwrap();
    p.register(pages[0], h0).unwrap();
    p.set_fill(slot, 2).unwrap();
    p.register(slot, group_hash(h0, 1)).unwrap();
    p.set_fill(pages[1], 1).unwrap();
    let table = [pages[0], slot, pages[1], NO_BLOCK];
    assert_eq!(p.export(&table).unwrap(), golden, "export writes the documented bytes");

    let mut q = hybrid(TINY, 2, TINY_STATE, 1);
    let got = q.import(&golden).unwrap();
    assert_eq!(got[3], NO_BLOCK, "the hole comes back at its place");
    assert!(got[1] >= q.n_blocks() && got[0] < q.n_blocks() && got[2] < q.n_blocks(), "{got:?}");
    let bits: Vec<u32> = q.state(got[1], 0).unwrap().iter().map(|v| v.to_bits()).collect();
    assert_eq!(bits, [0x3f80_0000, 0x7fc0_0001], "state values, NaN payload included, keep their bits");
    assert_eq!(q.slab(got[2], 0, true).unwrap(), &[1, 2, 3, 0xffff]);
    assert_eq!((q.fill(got[0]), q.fill(got[1]), q.fill(got[2])), (Ok(2), Ok(2), Ok(1)));
    assert_eq!(q.lookup(h0), Some(got[0]));
    assert_eq!(q.lookup(group_hash(h0, 1)), Some(got[1]), "the slot is found under its group hash");
}

/// A pool of 2 layers, 3 rows of (page, slot) with holes and values from a counter.
fn patterned() -> (HybridPool, Vec<u32>) {
    let g = KvGeometry { n_layers: 2, n_kv_heads: 2, head_dim: 4, block_tokens: 4 };
    let s = StateGeometry { n_layers: 3, floats: 5 };
    let mut p = hybrid(g, 8, s, 4);
    let pages = p.alloc(3).unwrap();
    let slots = p.alloc_slots(2).unwrap();
    let mut next = 0u32;
    for &id in &pages {
        for l in 0..2 {
            for is_v in [false, true] {
                for x in p.slab_mut(id, l, is_v).unwrap() {
                    *x = next as u16;
                    next += 7;
                }
            }
        }
        p.set_fill(id, 4).unwrap();
    }
    for &id in &slots {
        for l in 0..3 {
            for x in p.state_mut(id, l).unwrap() {
                *x = f32::from_bits(next.wrapping_mul(2_654_435_761));
                next += 1;
            }
        }
    }
    p.set_fill(slots[0], 4).unwrap();
    p.set_fill(slots[1], 3).unwrap();
    (p, vec![pages[0], NO_BLOCK, pages[1], slots[0], pages[2], slots[1]])
}

#[test]
fn pages_slots_and_holes_round_trip_at_their_places_with_every_bit() {
    let (p, table) = patterned();
    let env = p.export(&table).unwrap();
    let (mut q, _) = patterned();
    let got = q.import(&env).unwrap();
    assert_eq!(got.len(), table.len());
    for (&a, &b) in table.iter().zip(&got) {
        assert_eq!(a == NO_BLOCK, b == NO_BLOCK);
        if a == NO_BLOCK {
            continue;
        }
        assert_eq!(a >= p.n_blocks(), b >= q.n_blocks(), "a slot comes back as a slot");
        assert_eq!(p.fill(a), q.fill(b));
        if a >= p.n_blocks() {
            for l in 0..3 {
                let (x, y) = (p.state(a, l).unwrap(), q.state(b, l).unwrap());
                assert!(x.iter().zip(y).all(|(x, y)| x.to_bits() == y.to_bits()), "slot {a} layer {l}");
            }
        } else {
            for l in 0..2 {
                assert_eq!(p.slab(a, l, true).unwrap(), q.slab(b, l, true).unwrap());
            }
        }
    }
}

#[test]
fn refusals_name_the_fault_and_take_neither_page_nor_slot() {
    let (p, table) = patterned();
    let env = p.export(&table).unwrap();
    // Another state geometry: both named.
    let g = KvGeometry { n_layers: 2, n_kv_heads: 2, head_dim: 4, block_tokens: 4 };
    let mut other = hybrid(g, 8, StateGeometry { n_layers: 3, floats: 6 }, 4);
    refused(&mut other, &env, "(3, 5) does not match this pool's (3, 6)");
    // A pool without state refuses version 3; a hybrid pool refuses versions 1 and 2.
    let mut plain = KvPool::with_prefix_cache(g, 8, true).unwrap();
    match plain.import(&env) {
        Err(KvError::BadEnvelope { reason }) => assert!(reason.contains("this pool holds none"), "{reason}"),
        r => panic!("a plain pool took a version 3 envelope: {r:?}"),
    }
    let pages = plain.alloc(1).unwrap();
    let v1 = plain.export(&pages).unwrap();
    let (mut q, _) = patterned();
    refused(&mut q, &v1, "carries no recurrent state");
    // The section's layout: a hole on a slot's index, holes out of order, a cut section.
    let pages_end = tl_kv::HEADER_BYTES + 3 * (16 + 2 * 2 * 2 * 2 * 4 * 4);
    let holes = pages_end + 16;
    refused(&mut q, &edited(&env, holes, &3u32.to_le_bytes()), "is a hole");
    refused(&mut q, &edited(&env, holes, &9u32.to_le_bytes()), "hole 0: index 9");
    let mut cut = env[..env.len() - 12].to_vec();
    cut.extend_from_slice(&[0; 8]);
    reseal(&mut cut);
    refused(&mut q, &cut, "truncated");
    // Too few slots: the pages it would take go back too.
    let mut small = hybrid(g, 8, StateGeometry { n_layers: 3, floats: 5 }, 1);
    let before = counts(&small);
    assert!(matches!(small.import(&env), Err(KvError::OutOfBlocks { .. })));
    assert_eq!(counts(&small), before);
}
