//! Attention kernel timing, one (token, KV head) task at SmolLM2's shape (D = 64, 3 query
//! heads per KV head, 150 keys): `cargo test --release -p tl-decoder --test
//! attention_speed -- --ignored --nocapture`. Ignored by default: a timing, not a check.
//! On a busy machine take the minimum of several runs.

use tl_decoder::kernels::{attend_one, Path};

#[test]
#[ignore]
fn attention_speed() {
    let (d, g, n, b) = (64usize, 3usize, 150usize, 16usize);
    let blocks = n.div_ceil(b);
    // f16 values around 0.1 .. 0.2, varied.
    let slabs = |s: usize| -> Vec<Vec<u16>> {
        (0..blocks).map(|i| (0..b * d).map(|k| 0x3000 + ((k * 7 + i * 13 + s) % 1024) as u16).collect()).collect()
    };
    let (k, v) = (slabs(1), slabs(5));
    let kr: Vec<&[u16]> = k.iter().map(Vec::as_slice).collect();
    let vr: Vec<&[u16]> = v.iter().map(Vec::as_slice).collect();
    let q: Vec<f32> = (0..g * d).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut out = vec![0.0; g * d];
    for p in Path::all_available().into_iter().filter(|&p| p != Path::Portable) {
        let iters = 4000;
        let t = std::time::Instant::now();
        for _ in 0..iters {
            attend_one(p, &q, &kr, &vr, b, n, d, &mut out).expect("attention runs");
        }
        let ns = t.elapsed().as_nanos() as f64 / iters as f64;
        eprintln!("{p:?}: {ns:.0} ns per task, {:.2} ns per key", ns / n as f64);
    }
}
