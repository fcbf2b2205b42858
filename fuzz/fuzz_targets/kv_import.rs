//! The KV export envelope: `KvPool::import` into a small pool. The first byte picks
//! whether the trailer checksum is fixed up (so the fuzzer gets past it) and the pool's
//! geometry; the rest is the envelope. After an error no block may be taken; after a
//! success exactly the returned blocks are.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tl_kv::{fnv1a64, KvGeometry, KvPool, TRAILER_BYTES};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    let mut buf = rest.to_vec();
    if sel & 1 == 1 && buf.len() >= TRAILER_BYTES {
        let n = buf.len() - TRAILER_BYTES;
        let sum = fnv1a64(&buf[..n]);
        buf[n..].copy_from_slice(&sum.to_le_bytes());
    }
    let geometry = KvGeometry { n_layers: 1 + (sel >> 1 & 1) as u32, n_kv_heads: 1, head_dim: 2, block_tokens: 2 };
    let mut pool = KvPool::with_prefix_cache(geometry, 4, sel & 8 == 0).expect("pool");
    match pool.import(&buf) {
        Ok(ids) => assert_eq!(pool.n_in_use(), ids.len()),
        Err(_) => assert_eq!(pool.n_free(), 4, "a failed import took a block"),
    }
});
