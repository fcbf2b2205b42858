//! `tl probe` (and the deprecated `probe` alias): this machine's two roofs, the ones the benchmark's numbers are read against.
//!
//! `tl probe [--threads 1,2] [--mib 1024] [--repeats 5] [--isa best|avx512|avx2|portable]`
//! measures
//! - read bandwidth (STREAM-like): T threads each sum their contiguous slice of one buffer
//!   far larger than the caches (default 1 GiB; L3 here is 32 MiB). Decode at batch 1 reads
//!   every weight once per token, so `bandwidth / bytes per token` is its roof.
//! - f32 FMA peak: T threads each run `acc = acc * a + b` on 12 independent vector
//!   accumulators (enough to cover the FMA latency times the FMA ports of any current x86
//!   core) from registers only. Prefill is matrix products, so this is its roof.
//!
//! Each measurement runs once untimed, then `--repeats` times; it prints a line per
//! measurement and one JSON object per line (`"probe": "read_bandwidth"` with `gb_s`, or
//! `"fma_peak"` with `gflop_s`, both the median, with `_max`), for scripts
//! (scripts/bench_compare.sh). The SIMD path is chosen at run time, as tl's kernels are.
//! The sums are kept alive with `black_box` only: their values are not the point.

use std::hint::black_box;
use std::process::ExitCode;
use std::sync::Barrier;
use std::time::Instant;

use anyhow::{bail, ensure};
use tl_families::flags::{fail, parse_or_exit};

/// Measure read bandwidth and f32 FMA peak.
#[derive(clap::Parser, Debug, Clone)]
#[command(name = "probe", version, about)]
pub struct ProbeArgs {
    /// Thread counts to measure, comma-separated.
    #[arg(long, default_value = "1,2", value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Size of the read buffer in MiB (make it far larger than the last-level cache).
    #[arg(long, default_value_t = 1024)]
    pub mib: usize,
    /// Timed repetitions of each measurement (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// FMA iterations per thread per measurement, in millions (12 vector FMAs each).
    #[arg(long, default_value_t = 40)]
    pub fma_mega_iters: usize,
    /// SIMD path: best (what the CPU has), avx512, avx2 or portable.
    #[arg(long, default_value = "best")]
    pub isa: String,
    /// Print only the JSON lines.
    #[arg(long)]
    pub json_only: bool,
}

/// The SIMD path a probe runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Isa {
    Avx512,
    Avx2,
    Portable,
}

impl Isa {
    fn available(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx512 | Isa::Avx2 => false,
            Isa::Portable => true,
        }
    }

    fn pick(name: &str) -> anyhow::Result<Isa> {
        let isa = match name {
            "best" => return Ok([Isa::Avx512, Isa::Avx2].into_iter().find(|i| i.available()).unwrap_or(Isa::Portable)),
            "avx512" => Isa::Avx512,
            "avx2" => Isa::Avx2,
            "portable" => Isa::Portable,
            other => bail!("--isa {other}: expected best, avx512, avx2 or portable"),
        };
        ensure!(isa.available(), "--isa {name}: this CPU lacks it");
        Ok(isa)
    }
}

/// Sum of `x` read once, front to back, in as few instructions per byte as the path allows.
fn read_sum(isa: Isa, x: &[f32]) -> f32 {
    match isa {
        // SAFETY: `Isa::pick` checked the CPU has the features these functions enable.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::read_avx512(x) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::read_avx2(x) },
        _ => read_portable(x),
    }
}

/// `iters` rounds of 12 independent multiply-adds per lane; returns a value that depends on all.
fn fma_loop(isa: Isa, iters: usize) -> f32 {
    match isa {
        // SAFETY: as in `read_sum`.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::fma_avx512(iters) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::fma_avx2(iters) },
        _ => fma_portable(iters),
    }
}

/// f32 lanes per vector of the path (what one FMA instruction does, times 2 flops each).
fn lanes(isa: Isa) -> usize {
    match isa {
        Isa::Avx512 => 16,
        Isa::Avx2 => 8,
        Isa::Portable => 8,
    }
}

/// Independent accumulators of the FMA loop.
const ACCS: usize = 12;

fn read_portable(x: &[f32]) -> f32 {
    // Eight lanes of independent sums: the compiler keeps them in vector registers.
    let mut acc = [0f32; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    acc.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
}

fn fma_portable(iters: usize) -> f32 {
    let (a, b) = (black_box(0.999_999f32), black_box(1e-7f32));
    let mut acc = [[1f32; 8]; ACCS];
    for _ in 0..iters {
        for v in acc.iter_mut() {
            for l in v.iter_mut() {
                *l = *l * a + b;
            }
        }
    }
    acc.iter().flatten().sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::ACCS;
    use std::arch::x86_64::*;

    /// Eight 512-bit accumulators: loads, not the add latency, set the pace.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn read_avx512(x: &[f32]) -> f32 {
        let mut acc = [_mm512_setzero_ps(); 8];
        let mut chunks = x.chunks_exact(128);
        for c in &mut chunks {
            let p = c.as_ptr();
            for (k, a) in acc.iter_mut().enumerate() {
                // SAFETY: `c` holds 128 floats, k * 16 + 16 <= 128.
                *a = _mm512_add_ps(*a, unsafe { _mm512_loadu_ps(p.add(k * 16)) });
            }
        }
        let total = acc.iter().fold(_mm512_setzero_ps(), |s, a| _mm512_add_ps(s, *a));
        _mm512_reduce_add_ps(total) + chunks.remainder().iter().sum::<f32>()
    }

    #[target_feature(enable = "avx2")]
    pub unsafe fn read_avx2(x: &[f32]) -> f32 {
        let mut acc = [_mm256_setzero_ps(); 8];
        let mut chunks = x.chunks_exact(64);
        for c in &mut chunks {
            let p = c.as_ptr();
            for (k, a) in acc.iter_mut().enumerate() {
                // SAFETY: `c` holds 64 floats, k * 8 + 8 <= 64.
                *a = _mm256_add_ps(*a, unsafe { _mm256_loadu_ps(p.add(k * 8)) });
            }
        }
        let mut lanes = [0f32; 8];
        let total = acc.iter().fold(_mm256_setzero_ps(), |s, a| _mm256_add_ps(s, *a));
        // SAFETY: `lanes` holds 8 floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), total) };
        lanes.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn fma_avx512(iters: usize) -> f32 {
        let a = _mm512_set1_ps(std::hint::black_box(0.999_999));
        let b = _mm512_set1_ps(std::hint::black_box(1e-7));
        let mut acc = [_mm512_set1_ps(1.0); ACCS];
        for _ in 0..iters {
            for v in acc.iter_mut() {
                *v = _mm512_fmadd_ps(*v, a, b);
            }
        }
        _mm512_reduce_add_ps(acc.iter().fold(_mm512_setzero_ps(), |s, v| _mm512_add_ps(s, *v)))
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn fma_avx2(iters: usize) -> f32 {
        let a = _mm256_set1_ps(std::hint::black_box(0.999_999));
        let b = _mm256_set1_ps(std::hint::black_box(1e-7));
        let mut acc = [_mm256_set1_ps(1.0); ACCS];
        for _ in 0..iters {
            for v in acc.iter_mut() {
                *v = _mm256_fmadd_ps(*v, a, b);
            }
        }
        let mut lanes = [0f32; 8];
        let total = acc.iter().fold(_mm256_setzero_ps(), |s, v| _mm256_add_ps(s, *v));
        // SAFETY: `lanes` holds 8 floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), total) };
        lanes.iter().sum()
    }
}

/// Seconds of `work(thread index)` on `threads` threads started together, untimed once first,
/// then `repeats` times. Thread start-up is outside the timing: all wait at a barrier.
fn timed_parallel(threads: usize, repeats: usize, work: impl Fn(usize) -> f32 + Sync) -> Vec<f64> {
    let mut secs = Vec::with_capacity(repeats);
    for rep in 0..=repeats {
        let start = Barrier::new(threads + 1);
        let t = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|i| {
                    let (start, work) = (&start, &work);
                    s.spawn(move || {
                        start.wait();
                        black_box(work(i));
                    })
                })
                .collect();
            start.wait();
            let t = Instant::now();
            for h in handles {
                h.join().expect("probe thread panicked");
            }
            t.elapsed().as_secs_f64()
        });
        if rep > 0 {
            secs.push(t);
        }
    }
    secs
}

/// (median, max) of `amount / seconds` over the runs.
fn median_max(amount: f64, secs: &[f64]) -> (f64, f64) {
    let mut r: Vec<f64> = secs.iter().map(|s| amount / s.max(1e-9)).collect();
    r.sort_by(f64::total_cmp);
    ((r[(r.len() - 1) / 2] + r[r.len() / 2]) / 2.0, r[r.len() - 1])
}

/// The read loop must touch every element once (a loop that skipped some would report a
/// bandwidth it never reached): on a pattern whose sum is exact in f32 at every lane, the
/// path's sum equals the f64 sum, for lengths that end mid-vector and mid-unroll.
fn self_check(isa: Isa) -> anyhow::Result<()> {
    for len in [0, 1, 15, 127, 128, 129, 1000, 100_003] {
        let x: Vec<f32> = (0..len).map(|i| (i % 7) as f32).collect();
        let want: f64 = x.iter().map(|&v| v as f64).sum();
        let got = read_sum(isa, &x);
        ensure!(got as f64 == want, "probe self-check: {isa:?} read loop sums {len} elements to {got}, not {want}");
    }
    Ok(())
}

fn run(cli: &ProbeArgs) -> anyhow::Result<()> {
    ensure!(cli.repeats > 0, "--repeats must be at least 1");
    ensure!(cli.mib > 0, "--mib must be at least 1");
    ensure!(cli.threads.iter().all(|&t| t > 0), "--threads counts must be at least 1");
    let isa = Isa::pick(&cli.isa)?;
    let isa_name = format!("{isa:?}");
    self_check(isa)?;
    // Non-zero, so no page is the shared zero page: every read touches real memory.
    let buf = vec![1f32; cli.mib * 1024 * 1024 / 4];
    let bytes = (buf.len() * 4) as f64;
    for &t in &cli.threads {
        let slice = buf.len().div_ceil(t);
        let secs = timed_parallel(t, cli.repeats, |i| read_sum(isa, buf.chunks(slice).nth(i).unwrap_or(&[])));
        let (gb_s, max) = median_max(bytes / 1e9, &secs);
        if !cli.json_only {
            println!("read bandwidth, {t} thread(s), {isa_name}, {} MiB: {gb_s:.1} GB/s (max {max:.1})", cli.mib);
        }
        let j = serde_json::json!({"probe": "read_bandwidth", "isa": isa_name, "threads": t, "mib": cli.mib,
            "repeats": cli.repeats, "gb_s": (gb_s * 100.0).round() / 100.0, "gb_s_max": (max * 100.0).round() / 100.0});
        println!("{j}");
    }
    let iters = cli.fma_mega_iters.max(1) * 1_000_000;
    for &t in &cli.threads {
        let secs = timed_parallel(t, cli.repeats, |_| fma_loop(isa, iters));
        let flops = (t * iters * ACCS * lanes(isa) * 2) as f64;
        let (gflop_s, max) = median_max(flops / 1e9, &secs);
        if !cli.json_only {
            println!(
                "f32 FMA peak, {t} thread(s), {isa_name}, {ACCS} accumulators: {gflop_s:.1} GFLOP/s (max {max:.1})"
            );
        }
        let j = serde_json::json!({"probe": "fma_peak", "isa": isa_name, "threads": t, "accumulators": ACCS,
            "repeats": cli.repeats, "gflop_s": (gflop_s * 10.0).round() / 10.0, "gflop_s_max": (max * 10.0).round() / 10.0});
        println!("{j}");
    }
    Ok(())
}

impl ProbeArgs {
    /// Run the command.
    pub fn run(&self) -> anyhow::Result<()> {
        run(self)
    }
}

/// The `probe` alias binary's main.
pub fn main() -> ExitCode {
    match parse_or_exit::<ProbeArgs>().run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}
