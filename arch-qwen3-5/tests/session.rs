//! A hybrid model's sequence saved and resumed (`chat --session`, `ModelRunner::resume`):
//! the export is a version 3 envelope (pages, the state column's slots, and its holes
//! where rows kept no snapshot), and a sequence resumed from it on a fresh runner gives,
//! for every token that follows, the bits of the sequence that never left, and of one
//! prefill of the whole text.

#[path = "../../arch-llama/tests/common/mod.rs"]
mod common;

use tl_arch_qwen3_5 as _;

use common::*;
use tl_core::{Envelope, ModelRunner, Weights, NO_BLOCK};

const NAME: &str = "tiny-qwen3_5";

/// A runner whose state column keeps a snapshot every 3 rows (and at each step's end):
/// a long sequence's table has holes.
fn runner(kv: &str) -> ModelRunner {
    let mut cfg = engine_kv(0, Weights::Native, kv);
    cfg.kv.state_snapshot_tokens = 3 * B as usize;
    cfg.prefill_chunk = 7; // steps end mid-row and cross rows
    ModelRunner::load(&fixture(NAME), &cfg).expect("load")
}

#[test]
fn a_resumed_hybrid_session_continues_with_the_same_bits() {
    for kv in [F16, Q8] {
        let p = &reference(NAME)[5];
        let (head, tail) = (&p.ids[..p.ids.len() - 6], &p.ids[p.ids.len() - 6..]);
        for cut in [13, 24, head.len()] {
            let mut a = runner(kv);
            let mut seq = a.sequence();
            a.feed(&mut seq, &head[..cut]).expect("feed");
            let env = seq.export().expect("export");
            let parsed = Envelope::read(&env).expect("a valid envelope");
            assert_eq!(parsed.header().version, 3, "a hybrid sequence exports version 3");
            let holes = parsed.state().expect("state section").holes().count();
            assert!(cut < 24 || holes > 0, "{cut} positions: the state column should have holes");

            let mut b = runner(kv);
            let mut back = b.resume(head[..cut].to_vec(), &env).expect("resume");
            for (i, &t) in head[cut..].iter().chain(tail).enumerate() {
                let x = a.feed(&mut seq, &[t]).expect("continue");
                let y = b.feed(&mut back, &[t]).expect("continue resumed");
                assert_eq!(bits(&x), bits(&y), "{kv}, cut {cut}: token {i} after the resume differs");
            }
            let whole: Vec<u32> = head.iter().chain(tail).copied().collect();
            let mut c = runner(kv);
            let want = run_in_steps(&mut c, &whole, &[]);
            let mut d = runner(kv);
            let mut again = d.resume(head[..cut].to_vec(), &env).expect("resume again");
            let last = d.feed(&mut again, &whole[cut..]).expect("rest in one feed");
            assert_eq!(bits(&last), bits(&want), "{kv}, cut {cut}: resumed + rest differs from one prefill");
        }
    }
}

#[test]
fn a_session_without_its_last_state_or_for_other_tokens_is_refused() {
    let mut a = runner(F16);
    let ids = &reference(NAME)[5].ids[..30];
    let mut seq = a.sequence();
    a.feed(&mut seq, ids).expect("feed");
    let env = seq.export().expect("export");
    let b = runner(F16);
    let err = b.resume(ids[..26].to_vec(), &env).err().expect("tokens of another length accepted").to_string();
    assert!(err.contains("26 tokens need"), "{err}");
    // A table whose last row lost its slot cannot be resumed: its state is gone.
    let pool = b.pool();
    let (pages, slot) = {
        let mut g = pool.lock().unwrap();
        let (pages, slot) = (g.alloc(2).unwrap(), g.alloc_slots(1).unwrap()[0]);
        for (id, fill) in [(pages[0], 4), (slot, 4), (pages[1], 1)] {
            g.set_fill(id, fill).unwrap();
        }
        (pages, slot)
    };
    let env = pool.lock().unwrap().export(&[pages[0], slot, pages[1], NO_BLOCK]).unwrap();
    let err = b.resume(ids[..5].to_vec(), &env).err().expect("a table without its last slot").to_string();
    assert!(err.contains("entry 3 is empty"), "{err}");
}
