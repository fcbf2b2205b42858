//! Speed of one linear layer per format at SmolLM2-135M's shapes: best-of-7 GB/s of weights
//! read and GFLOP/s, for m = 1 (decode), 8 and 128 (prefill).
//!
//! `cargo run --release -p tl-quant --example matmul_speed [-- THREADS [PATH [M]]]`
//! (PATH: portable, avx2, avx512; default the best this CPU has). With one thread the
//! time is the thread's CPU time (/proc/thread-self/schedstat), so other processes on a
//! shared machine do not inflate it.

use std::time::Instant;
use tl_quant::{f32_to_f16, Format, Linear, Path, QLinear};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args.get(1).and_then(|t| t.parse().ok()).unwrap_or(2);
    let path = match args.get(2).map(String::as_str) {
        Some("portable") => Path::Portable,
        Some("avx2") => Path::Avx2,
        Some("avx512") => Path::Avx512,
        _ => Path::best(),
    };
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool");
    let mut s = 1u32;
    let mut rnd = move || {
        s = s.wrapping_mul(1664525).wrapping_add(1013904223);
        (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
    };
    // Optional third argument: only this m (for `perf stat` comparisons).
    let only_m: Option<usize> = args.get(3).and_then(|m| m.parse().ok());
    println!("threads {threads}, path {path:?}");
    println!("{:>10} {:>11} {:>5} {:>9} {:>9} {:>9}", "format", "shape", "m", "us/call", "GB/s", "GFLOP/s");
    for (out, inp) in [(576, 576), (192, 576), (1536, 576), (576, 1536), (49152, 576)] {
        let w: Vec<f32> = (0..out * inp).map(|_| rnd() * 0.1).collect();
        let layers = vec![
            Linear::from_f32(&w, out, inp).expect("f32"),
            Linear::from_stored(
                Format::BF16,
                &w.iter().flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes()).collect::<Vec<u8>>(),
                out,
                inp,
            )
            .expect("bf16"),
            Linear::from_stored(
                Format::F16,
                &w.iter().flat_map(|v| f32_to_f16(*v).to_le_bytes()).collect::<Vec<u8>>(),
                out,
                inp,
            )
            .expect("f16"),
            Linear::from_stored(Format::Q8_0, &blocks(out * inp / 32, 34, &mut rnd), out, inp).expect("q8"),
            Linear::from_stored(Format::Q4_1, &blocks(out * inp / 32, 20, &mut rnd), out, inp).expect("q4_1"),
            Linear::from_int4(&QLinear::quantize(&w, out, inp, 32).expect("int4")).expect("int4"),
        ];
        for l in &layers {
            for m in [1usize, 8, 128] {
                if only_m.is_some_and(|o| o != m) {
                    continue;
                }
                let x: Vec<f32> = (0..m * inp).map(|_| rnd()).collect();
                let mut y = vec![0.0f32; m * out];
                let reps = (2_000_000_000 / (out * inp * m * 2)).clamp(3, 2000);
                let mut times: Vec<f64> = (0..7)
                    .map(|_| {
                        let t = Instant::now();
                        let cpu = pool.install(|| {
                            let c0 = thread_cpu_ns();
                            for _ in 0..reps {
                                l.forward_on(path, &x, m, &mut y).expect("forward");
                            }
                            thread_cpu_ns().zip(c0).map(|(a, b)| (a - b) as f64 * 1e-9)
                        });
                        // One thread: its CPU time, blind to other processes taking the
                        // core; more threads: wall time.
                        let secs = match cpu {
                            Some(c) if threads == 1 => c,
                            _ => t.elapsed().as_secs_f64(),
                        };
                        secs / reps as f64
                    })
                    .collect();
                times.sort_by(|a, b| a.total_cmp(b));
                let t = times[0]; // the fastest run: the least disturbed by other processes
                println!(
                    "{:>10} {:>11} {:>5} {:>9.1} {:>9.2} {:>9.1}",
                    l.format().to_string(),
                    format!("{out}x{inp}"),
                    m,
                    t * 1e6,
                    l.packed_bytes() as f64 / t / 1e9,
                    (2 * out * inp * m) as f64 / t / 1e9
                );
            }
        }
    }
}

/// Nanoseconds this thread has run on a CPU (Linux), so a busy machine slows nothing.
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat").ok()?.split_whitespace().next()?.parse().ok()
}

/// Random GGML blocks with small finite f16 scales (first 2 or 4 bytes).
fn blocks(n: usize, size: usize, rnd: &mut impl FnMut() -> f32) -> Vec<u8> {
    let mut v = Vec::with_capacity(n * size);
    for _ in 0..n {
        v.extend(f32_to_f16(rnd() * 0.01).to_le_bytes());
        v.extend(f32_to_f16(rnd() * 0.01).to_le_bytes());
        v.extend((4..size).map(|_| (rnd() * 127.0) as i8 as u8));
    }
    v
}
