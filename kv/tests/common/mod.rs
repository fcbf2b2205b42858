//! What the envelope tests share: editing an envelope behind its checksum, and checking
//! that a refused import names its reason and takes no block.
#![allow(dead_code)] // each test binary uses its own subset

use tl_kv::{fnv1a64, KvError, KvPool};

/// (free, cached, in use).
pub fn counts(p: &KvPool) -> (usize, usize, usize) {
    (p.n_free(), p.n_cached(), p.n_in_use())
}

/// Re-seal an edited envelope so that only the edit, not the checksum, is wrong.
pub fn reseal(env: &mut [u8]) {
    let body = env.len() - 8;
    let sum = fnv1a64(&env[..body]);
    env[body..].copy_from_slice(&sum.to_le_bytes());
}

/// `env` with `bytes` written at `at`, re-sealed.
pub fn edited(env: &[u8], at: usize, bytes: &[u8]) -> Vec<u8> {
    let mut e = env.to_vec();
    e[at..at + bytes.len()].copy_from_slice(bytes);
    reseal(&mut e);
    e
}

/// `p.import(buf)` fails with a `BadEnvelope` whose reason contains `why`, and the pool
/// is as it was.
pub fn refused(p: &mut KvPool, buf: &[u8], why: &str) {
    let before = counts(p);
    match p.import(buf) {
        Err(KvError::BadEnvelope { reason }) => assert!(reason.contains(why), "{why}: got {reason:?}"),
        other => panic!("{why}: expected BadEnvelope, got {other:?}"),
    }
    assert_eq!(counts(p), before, "{why}: a refused import takes no block");
    p.check_invariants().unwrap();
}
