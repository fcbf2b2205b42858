//! Random operation sequences, invalid ids and double releases included: kv.md's
//! invariants hold after every step, a refused call changes no count, and nothing panics.

use proptest::prelude::*;
use tl_kv::{BlockState, KvGeometry, KvPool};

const G: KvGeometry = KvGeometry { n_layers: 2, n_kv_heads: 1, head_dim: 2, block_tokens: 2 };

#[derive(Clone, Debug)]
enum Op {
    Alloc(usize),
    Retain(u32),
    Release(u32),
    SetFill(u32, u32),
    Register(u32, u64),
    FillAndRegister(u32, u64),
    Lookup(u64),
    Write(u32, u32, bool, u16),
    Export(Vec<u32>),
    ImportLast,
}

/// Ids run two past the pool so that bad ids are common; hashes come from a small set so
/// that lookups hit and registrations collide.
fn op(n_blocks: u32) -> impl Strategy<Value = Op> {
    let id = 0..n_blocks + 2;
    prop_oneof![
        (0usize..4).prop_map(Op::Alloc),
        id.clone().prop_map(Op::Retain),
        id.clone().prop_map(Op::Release),
        id.clone().prop_map(Op::Release),
        (id.clone(), 0u32..4).prop_map(|(i, n)| Op::SetFill(i, n)),
        (id.clone(), 0u64..4).prop_map(|(i, h)| Op::Register(i, h)),
        // The productive path (fill to B, then register) would be rare by chance.
        (id.clone(), 0u64..4).prop_map(|(i, h)| Op::FillAndRegister(i, h)),
        (id.clone(), 0u64..4).prop_map(|(i, h)| Op::FillAndRegister(i, h)),
        (0u64..5).prop_map(Op::Lookup),
        (id.clone(), 0u32..3, any::<bool>(), any::<u16>()).prop_map(|(i, l, v, x)| Op::Write(i, l, v, x)),
        proptest::collection::vec(id, 0..3).prop_map(Op::Export),
        Just(Op::ImportLast),
    ]
}

fn counts(p: &KvPool) -> (usize, usize, usize) {
    (p.n_free(), p.n_cached(), p.n_in_use())
}

/// Fill and slab bytes of each record of an envelope (hash fields may differ on import).
fn records(env: &[u8]) -> Vec<Vec<u8>> {
    let rec = 16 + (G.n_layers * 2 * G.n_kv_heads * G.block_tokens * G.head_dim * 2) as usize;
    env[40..env.len() - 8].chunks(rec).map(|r| [&r[..4], &r[16..]].concat()).collect()
}

fn run(n_blocks: u32, prefix_cache: bool, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut p = KvPool::with_prefix_cache(G, n_blocks, prefix_cache).unwrap();
    let mut last: Option<Vec<u8>> = None;
    for (step, op) in ops.iter().enumerate() {
        let before = counts(&p);
        let failed = match op {
            Op::Alloc(n) => match p.alloc(*n) {
                Ok(ids) => {
                    prop_assert_eq!(ids.len(), *n);
                    for &id in &ids {
                        prop_assert_eq!(
                            (p.refs(id).ok(), p.fill(id).ok(), p.hash_of(id).ok()),
                            (Some(1), Some(0), Some(None))
                        );
                    }
                    let mut sorted = ids.clone();
                    sorted.sort_unstable();
                    sorted.dedup();
                    prop_assert_eq!(sorted.len(), *n, "distinct ids");
                    false
                }
                Err(_) => {
                    prop_assert!(before.0 + before.1 < *n, "alloc refused with enough blocks");
                    true
                }
            },
            Op::Retain(id) => p.retain(*id).is_err(),
            Op::Release(id) => {
                let was = p.state(*id).ok();
                let r = p.release(*id);
                prop_assert_eq!(r.is_ok(), was == Some(BlockState::InUse), "release of {:?}", was);
                r.is_err()
            }
            Op::SetFill(id, n) => p.set_fill(*id, *n).is_err(),
            Op::Register(id, h) => p.register(*id, *h).is_err(),
            Op::FillAndRegister(id, h) => p.set_fill(*id, G.block_tokens).and_then(|()| p.register(*id, *h)).is_err(),
            Op::Lookup(h) => {
                if let Some(id) = p.lookup(*h) {
                    prop_assert_eq!(p.hash_of(id).ok(), Some(Some(*h)));
                    prop_assert_eq!(p.state(id).ok(), Some(BlockState::InUse));
                }
                false
            }
            Op::Write(id, l, v, x) => match p.slab_mut(*id, *l, *v) {
                Ok(s) => {
                    s[usize::from(*x) % s.len()] = *x;
                    false
                }
                Err(_) => true,
            },
            Op::Export(ids) => match p.export(ids) {
                Ok(env) => {
                    last = Some(env);
                    false
                }
                Err(_) => true,
            },
            Op::ImportLast => match last.as_ref().map(|env| p.import(env)) {
                Some(Ok(ids)) => {
                    let env = last.as_ref().unwrap();
                    prop_assert_eq!(records(env), records(&p.export(&ids).unwrap()), "import copies fills and slabs");
                    false
                }
                Some(Err(_)) => true,
                None => false,
            },
        };
        if failed {
            prop_assert_eq!(counts(&p), before, "step {} {:?}: a refused call changed the counts", step, op);
        }
        if let Err(e) = p.check_invariants() {
            return Err(TestCaseError::fail(format!("step {step} {op:?}: {e}")));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn kv_pool_invariants_hold_under_random_operations(
        (n_blocks, prefix_cache, ops) in (1u32..6, any::<bool>())
            .prop_flat_map(|(n, pc)| (Just(n), Just(pc), proptest::collection::vec(op(n), 0..60)))
    ) {
        run(n_blocks, prefix_cache, &ops)?;
    }
}
