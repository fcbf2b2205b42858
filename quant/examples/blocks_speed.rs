//! Speed of one linear layer per GGUF block type at a 1B model's MLP shape (2048 x 8192,
//! Llama-3.2-1B's down projection), beside F32 and Q4_0 in the same run: median of 5 timed
//! runs, as GB/s of packed weight bytes and GFLOP/s, for m = 1 (decode) and m = 128
//! (prefill). Never asserted anywhere: a measurement.
//!
//! `cargo run --release -p tl-quant --example blocks_speed [-- THREADS [PATH [OUT INP]]]`
//! (PATH: portable, avx2, avx512; default the best this CPU has). `FORMATS=Q4_K,Q6_K` and
//! `MS=1,128` pick rows (F32 and Q4_0 are always run, the baselines). With THREADS = 1
//! the time is the worker thread's CPU time and the row shows the fastest of the runs, so
//! a machine shared with other processes slows nothing; with more, wall time, the median.
//! `ACTIVATIONS=q8` runs every layer in the int8-activation mode (the formats without an
//! integer kernel stay exact).

use std::time::Instant;
use tl_quant::{f32_to_f16, Activations, Format, Linear, Path};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args.get(1).and_then(|t| t.parse().ok()).unwrap_or(2);
    let path = match args.get(2).map(String::as_str) {
        Some("portable") => Path::Portable,
        Some("avx2") => Path::Avx2,
        Some("avx512") => Path::Avx512,
        _ => Path::best(),
    };
    let out: usize = args.get(3).and_then(|t| t.parse().ok()).unwrap_or(2048);
    let inp: usize = args.get(4).and_then(|t| t.parse().ok()).unwrap_or(8192);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool");
    let mut s = 1u64;
    let mut rnd = move || {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (s >> 33) as u32
    };
    println!("threads {threads}, path {path:?}, {out}x{inp}");
    println!("{:>8} {:>5} {:>10} {:>8} {:>9} {:>8}", "format", "m", "us/call", "GB/s", "GFLOP/s", "MiB");
    let f32w: Vec<f32> = (0..out * inp).map(|_| (rnd() as f32 / u32::MAX as f32 - 0.5) * 0.1).collect();
    let mut layers = vec![Linear::from_f32(&f32w, out, inp).expect("f32")];
    drop(f32w);
    let pick = std::env::var("FORMATS").ok();
    let ms: Vec<usize> = std::env::var("MS")
        .ok()
        .map(|v| v.split(',').filter_map(|m| m.trim().parse().ok()).collect())
        .unwrap_or(vec![1, 128]);
    for format in [
        Format::Q4_0,
        Format::Q8_0,
        Format::Q4_K,
        Format::Q6_K,
        Format::Q5_K,
        Format::Q5_0,
        Format::Q5_1,
        Format::Q3_K,
        Format::Q2_K,
        Format::IQ4_NL,
    ] {
        if format != Format::Q4_0
            && pick.as_deref().is_some_and(|p| !p.split(',').any(|n| n.trim() == format.to_string()))
        {
            continue;
        }
        let shape = format.block_shape().expect("a block format");
        let (bb, k, at) = (shape.bytes, shape.weights, shape.f16_scales);
        let mut bytes: Vec<u8> = (0..out * inp / k * bb).map(|_| rnd() as u8).collect();
        for b in bytes.chunks_exact_mut(bb) {
            for &a in at {
                let v = (rnd() as f32 / u32::MAX as f32 - 0.5) * 0.01;
                b[a..a + 2].copy_from_slice(&f32_to_f16(v).to_le_bytes());
            }
        }
        let t = Instant::now();
        layers.push(Linear::from_stored(format, &bytes, out, inp).expect("layer"));
        eprintln!("{format}: packed in {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    }
    let act: Activations =
        std::env::var("ACTIVATIONS").ok().map_or(Activations::Exact, |a| a.parse().expect("exact or q8"));
    let layers: Vec<Linear> = layers.into_iter().map(|l| l.with_activations(act)).collect();
    println!("activations {act}");
    for m in ms {
        let x: Vec<f32> = (0..m * inp).map(|_| rnd() as f32 / u32::MAX as f32 - 0.5).collect();
        let mut y = vec![0.0f32; m * out];
        for l in &layers {
            let reps = (4_000_000_000 / (out * inp * m * 2)).clamp(2, 200);
            let mut times: Vec<f64> = (0..5)
                .map(|_| {
                    let t = Instant::now();
                    let cpu = pool.install(|| {
                        let c0 = thread_cpu_ns();
                        for _ in 0..reps {
                            l.forward_on(path, &x, m, &mut y).expect("forward");
                        }
                        thread_cpu_ns().zip(c0).map(|(a, b)| (a - b) as f64 * 1e-9)
                    });
                    let secs = match cpu {
                        Some(c) if threads == 1 => c,
                        _ => t.elapsed().as_secs_f64(),
                    };
                    secs / reps as f64
                })
                .collect();
            times.sort_by(|a, b| a.total_cmp(b));
            let t = if threads == 1 { times[0] } else { times[2] };
            println!(
                "{:>8} {:>5} {:>10.1} {:>8.2} {:>9.1} {:>8.1}",
                l.format().to_string(),
                m,
                t * 1e6,
                l.packed_bytes() as f64 / t / 1e9,
                (2 * out * inp * m) as f64 / t / 1e9,
                l.packed_bytes() as f64 / (1 << 20) as f64
            );
        }
    }
}

/// Nanoseconds this thread has run on a CPU (Linux), so a busy machine slows nothing.
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat").ok()?.split_whitespace().next()?.parse().ok()
}
