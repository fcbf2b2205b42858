//! Attention kernel timing, one (token, KV head) task at SmolLM2's shape (D = 64, 3 query
//! heads per KV head, 150 and 2048 keys), over f16 and q8 blocks: `cargo test --release
//! -p tl-decoder --test attention_speed -- --ignored --nocapture`. Ignored by default: a
//! timing, not a check. On a busy machine take the minimum of several runs.

use tl_core::{quantize_q8, Q8Slab};
use tl_decoder::kernels::{attend_span_sinks, attend_tile, Path, Span};
use tl_quant::f16_to_f32;

/// ns per call of `f`, over `iters` calls.
fn time(iters: usize, mut f: impl FnMut()) -> f64 {
    let t = std::time::Instant::now();
    for _ in 0..iters {
        f();
    }
    t.elapsed().as_nanos() as f64 / iters as f64
}

#[test]
#[ignore]
fn attention_speed() {
    let (d, g, b) = (64usize, 3usize, 16usize);
    for n in [150usize, 2048, 8000] {
        let blocks = n.div_ceil(b);
        // f16 values around 0.1 .. 0.2, varied.
        let slabs = |s: usize| -> Vec<Vec<u16>> {
            (0..blocks).map(|i| (0..b * d).map(|k| 0x3000 + ((k * 7 + i * 13 + s) % 1024) as u16).collect()).collect()
        };
        let (k, v) = (slabs(1), slabs(5));
        // The same values quantized per row, as a q8 pool holds them.
        let q8 = |s: &[Vec<u16>]| -> Vec<(Vec<i8>, Vec<u16>)> {
            s.iter()
                .map(|slab| {
                    let mut codes = vec![0i8; slab.len()];
                    let rows = slab.chunks(d).zip(codes.chunks_mut(d));
                    let scales =
                        rows.map(|(r, c)| quantize_q8(&r.iter().map(|&h| f16_to_f32(h)).collect::<Vec<_>>(), c));
                    let scales = scales.collect();
                    (codes, scales)
                })
                .collect()
        };
        let (k8, v8) = (q8(&k), q8(&v));
        let kr: Vec<&[u16]> = k.iter().map(Vec::as_slice).collect();
        let vr: Vec<&[u16]> = v.iter().map(Vec::as_slice).collect();
        let k8r: Vec<Q8Slab<'_>> = k8.iter().map(|(c, s)| Q8Slab { codes: c, scales: s }).collect();
        let v8r: Vec<Q8Slab<'_>> = v8.iter().map(|(c, s)| Q8Slab { codes: c, scales: s }).collect();
        let q: Vec<f32> = (0..g * d).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut out = vec![0.0; g * d];
        let span = Span { lo: 0, n, d, scale: 0.125 };
        for p in Path::all_available().into_iter().filter(|&p| p != Path::Portable) {
            let iters = 600_000 / n;
            let f16 = time(iters, || attend_span_sinks(p, &q, (&kr, &vr), b, (span, &[]), &mut out).expect("runs"));
            let q8 = time(iters, || attend_span_sinks(p, &q, (&k8r, &v8r), b, (span, &[]), &mut out).expect("runs"));
            eprintln!(
                "{p:?}, {n} keys: f16 {:.2} ns per key, q8 {:.2} ns per key ({:.2}x)",
                f16 / n as f64,
                q8 / n as f64,
                q8 / f16
            );
            // A query tile of 4 positions (a prefill's task): ns per key per position.
            let t = 4;
            let qt: Vec<f32> = (0..t * g * d).map(|i| (i as f32 * 0.37).sin()).collect();
            let mut ot = vec![0.0; t * g * d];
            let tile16 = time(iters, || attend_tile(p, &qt, (&kr, &vr), b, (span, &[], g), t, &mut ot).expect("runs"));
            let tile8 = time(iters, || attend_tile(p, &qt, (&k8r, &v8r), b, (span, &[], g), t, &mut ot).expect("runs"));
            eprintln!(
                "{p:?}, {n} keys, tiles of {t}: f16 {:.2} ns per key per position, q8 {:.2}",
                tile16 / (n * t) as f64,
                tile8 / (n * t) as f64
            );
        }
    }
}
