//! The matrix kernel's contract, for every stored format and every instruction set:
//! - each output element is one FMA chain over k ascending from +0.0, on the weights
//!   widened by the format's own definition (written here from the GGML/numbers.md
//!   definitions, not from the crate);
//! - every SIMD path equals the portable one bit for bit, on shapes that hit every edge
//!   (m = 1..=17, out and inp not multiples of the tile);
//! - a row's result does not depend on m, its neighbours or the thread count;
//! - a reordered sum IS caught by these comparisons (negative control).

use tl_quant::{bf16_to_f32, f16_to_f32, f32_to_f16, Format, Linear, Path, QLinear};

#[path = "common/rows.rs"]
mod rows;

use rows::{bits, check_threads_and_rows, Lcg};

/// A finite f16 scale of either sign, magnitude around 2^-6 .. 2^-2.
fn scale(rng: &mut Lcg) -> [u8; 2] {
    f32_to_f16(rng.f() * 0.2).to_le_bytes()
}

/// Random stored bytes of `format` for an `[out, inp]` matrix, and their values widened
/// by the format's definition.
fn stored(format: Format, out: usize, inp: usize, rng: &mut Lcg) -> (Vec<u8>, Vec<f32>) {
    let n = out * inp;
    match format {
        Format::F32 => {
            let w: Vec<f32> = (0..n).map(|_| rng.f()).collect();
            (w.iter().flat_map(|v| v.to_le_bytes()).collect(), w)
        }
        Format::F16 | Format::BF16 => {
            let bf = format == Format::BF16;
            let h: Vec<u16> =
                (0..n).map(|_| if bf { (rng.f().to_bits() >> 16) as u16 } else { f32_to_f16(rng.f() * 3.0) }).collect();
            let w = h.iter().map(|&h| if bf { bf16_to_f32(h) } else { f16_to_f32(h) }).collect();
            (h.iter().flat_map(|h| h.to_le_bytes()).collect(), w)
        }
        Format::Q4_0 | Format::Q4_1 | Format::Q8_0 => {
            let mut bytes = Vec::new();
            let mut w = Vec::with_capacity(n);
            for _ in 0..out * inp / 32 {
                let d = scale(rng);
                let df = f16_to_f32(u16::from_le_bytes(d));
                bytes.extend(d);
                match format {
                    Format::Q8_0 => {
                        let q = rng.bytes(32);
                        w.extend(q.iter().map(|&q| q as i8 as f32 * df));
                        bytes.extend(q);
                    }
                    _ => {
                        let m = if format == Format::Q4_1 { Some(scale(rng)) } else { None };
                        let q = rng.bytes(16);
                        let mut vals = [0.0f32; 32];
                        for j in 0..16 {
                            let (lo, hi) = ((q[j] & 15) as i32, (q[j] >> 4) as i32);
                            vals[j] = match m {
                                // GGML Q4_1: q * d + m (q * d is exact).
                                Some(m) => lo as f32 * df + f16_to_f32(u16::from_le_bytes(m)),
                                // GGML Q4_0: (q - 8) * d.
                                None => (lo - 8) as f32 * df,
                            };
                            vals[j + 16] = match m {
                                Some(m) => hi as f32 * df + f16_to_f32(u16::from_le_bytes(m)),
                                None => (hi - 8) as f32 * df,
                            };
                        }
                        w.extend(vals);
                        if let Some(m) = m {
                            bytes.extend(m);
                        }
                        bytes.extend(q);
                    }
                }
            }
            (bytes, w)
        }
        Format::Int4 { .. } => unreachable!("int4 goes through QLinear"),
        other => unreachable!("{other}: the other block types are tested in tests/blocks.rs"),
    }
}

/// `y[i][n]`: one FMA chain over k ascending from +0.0 (the contract).
fn reference(x: &[f32], m: usize, w: &[f32], out: usize, inp: usize) -> Vec<f32> {
    let mut y = vec![0.0f32; m * out];
    for i in 0..m {
        for n in 0..out {
            y[i * out + n] = (0..inp).fold(0.0f32, |acc, k| x[i * inp + k].mul_add(w[n * inp + k], acc));
        }
    }
    y
}

fn run(l: &Linear, path: Path, x: &[f32], m: usize) -> Vec<f32> {
    let mut y = vec![f32::NAN; m * l.out()];
    l.forward_on(path, x, m, &mut y).unwrap();
    y
}

/// Every format with shapes that hit the edges: `(format, out, inp)`.
fn cases() -> Vec<(Format, usize, usize)> {
    let mut v = Vec::new();
    for out in [1, 15, 16, 17, 33, 50] {
        for inp in [1, 7, 33, 64] {
            v.extend([(Format::F32, out, inp), (Format::F16, out, inp), (Format::BF16, out, inp)]);
        }
        // 288 = 9 blocks: the staged prefill path (256 k a chunk) ends in a short chunk.
        for inp in [32, 96, 288] {
            v.extend([(Format::Q4_0, out, inp), (Format::Q4_1, out, inp), (Format::Q8_0, out, inp)]);
            v.push((Format::Int4 { group: 32 }, out, inp));
        }
        v.push((Format::Int4 { group: 64 }, out, 128));
        v.push((Format::Int4 { group: 6 }, out, 36)); // held as f32: still the same chains
    }
    v
}

/// The layer and its weights widened by the definition.
fn layer(format: Format, out: usize, inp: usize, rng: &mut Lcg) -> (Linear, Vec<f32>) {
    if let Format::Int4 { group } = format {
        let w: Vec<f32> = (0..out * inp).map(|_| rng.f()).collect();
        let q = QLinear::quantize(&w, out, inp, group).unwrap();
        // numbers.md: W_hat = q * f32(s), q unpacked from the low nibble first.
        let groups = inp / group;
        let wh = (0..out * inp)
            .map(|i| {
                let (r, c) = (i / inp, i % inp);
                let byte = q.qweight[i / 2];
                let nib = if c % 2 == 0 { byte & 15 } else { byte >> 4 };
                let qv = ((nib << 4) as i8 >> 4) as f32;
                qv * f16_to_f32(q.scales[r * groups + c / group])
            })
            .collect();
        return (Linear::from_int4(&q).unwrap(), wh);
    }
    let (bytes, w) = stored(format, out, inp, rng);
    (Linear::from_stored(format, &bytes, out, inp).unwrap(), w)
}

#[test]
fn every_format_is_one_fma_chain_per_element_on_every_path() {
    let paths = Path::all_available();
    eprintln!("paths on this CPU: {paths:?}");
    let mut rng = Lcg(1);
    for (format, out, inp) in cases() {
        let (l, w) = layer(format, out, inp, &mut rng);
        assert_eq!(bits(&l.dequantize()), bits(&w), "{format} {out}x{inp}: widened weights");
        for m in 1..=17 {
            let x: Vec<f32> = (0..m * inp).map(|_| rng.f()).collect();
            let want = bits(&reference(&x, m, &w, out, inp));
            for &path in &paths {
                assert_eq!(bits(&run(&l, path, &x, m)), want, "{format} {out}x{inp} m={m} on {path:?}");
            }
        }
    }
}

#[test]
fn native_formats_equal_the_f32_layer_over_their_widened_weights() {
    let mut rng = Lcg(2);
    for (format, out, inp) in cases() {
        let (l, w) = layer(format, out, inp, &mut rng);
        let f = Linear::new_f32(w, out, inp).unwrap();
        for m in [1, 5, 16, 37] {
            let x: Vec<f32> = (0..m * inp).map(|_| rng.f() * 4.0).collect();
            let mut a = vec![0.0; m * out];
            let mut b = vec![0.0; m * out];
            l.forward(&x, m, &mut a).unwrap();
            f.forward(&x, m, &mut b).unwrap();
            assert_eq!(bits(&a), bits(&b), "{format} {out}x{inp} m={m}");
        }
    }
}

#[test]
fn rows_do_not_depend_on_the_batch_nor_the_thread_count() {
    let mut rng = Lcg(3);
    let (out, inp, m) = (200, 96, 40);
    for format in [Format::F32, Format::BF16, Format::Q4_1, Format::Q8_0] {
        let (l, _) = layer(format, out, inp, &mut rng);
        let x: Vec<f32> = (0..m * inp).map(|_| rng.f()).collect();
        // Each row alone, and rows 7..20 as their own batch, give the same bits.
        let all = check_threads_and_rows(&l, &x, m, &[0, 7, 19, 39], &format.to_string());
        let mut y = vec![0.0; 13 * out];
        l.forward(&x[7 * inp..20 * inp], 13, &mut y).unwrap();
        assert_eq!(bits(&y), all[7 * out..20 * out], "{format}: rows 7..20");
    }
}

/// A product large enough to go out in many chunks claimed by the threads (256 KiB of
/// panels or more each): the last chunk short, the last panel partial (1000 = 62.5 panels).
/// Whichever thread claims a chunk, each element is the one chain of the contract.
#[test]
fn chunked_products_are_the_same_chains_at_every_thread_count() {
    let mut rng = Lcg(9);
    let (out, inp, m) = (1000, 4096, 2);
    for format in [Format::F32, Format::Q8_0] {
        let (l, w) = layer(format, out, inp, &mut rng);
        let x: Vec<f32> = (0..m * inp).map(|_| rng.f()).collect();
        let want = bits(&reference(&x, m, &w, out, inp));
        for t in [1, 2, 3, 5] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(t).build().unwrap();
            let y = pool.install(|| {
                let mut y = vec![f32::NAN; m * out];
                l.forward(&x, m, &mut y).unwrap();
                y
            });
            assert_eq!(bits(&y), want, "{format}: {t} threads");
        }
    }
}

#[test]
fn a_reordered_sum_is_caught() {
    // Negative control: the comparisons above would see a kernel that summed in another
    // order (descending k, or two interleaved accumulators).
    let mut rng = Lcg(4);
    let (out, inp, m) = (64, 96, 4);
    let (l, w) = layer(Format::F32, out, inp, &mut rng);
    let x: Vec<f32> = (0..m * inp).map(|_| rng.f()).collect();
    let y = bits(&run(&l, Path::best(), &x, m));
    let desc: Vec<f32> = (0..m * out)
        .map(|e| {
            let (i, n) = (e / out, e % out);
            (0..inp).rev().fold(0.0f32, |acc, k| x[i * inp + k].mul_add(w[n * inp + k], acc))
        })
        .collect();
    let split: Vec<f32> = (0..m * out)
        .map(|e| {
            let (i, n) = (e / out, e % out);
            let mut a = [0.0f32; 2];
            for k in 0..inp {
                a[k % 2] = x[i * inp + k].mul_add(w[n * inp + k], a[k % 2]);
            }
            a[0] + a[1]
        })
        .collect();
    let differs = |v: &[f32]| bits(v).iter().zip(&y).filter(|(a, b)| a != b).count();
    assert!(differs(&desc) > 0, "descending order went unnoticed");
    assert!(differs(&split) > 0, "split accumulators went unnoticed");
}

#[test]
fn stored_layers_refuse_bad_shapes_and_lengths() {
    assert!(Linear::from_stored(Format::Q4_1, &[0; 20], 1, 31).is_err());
    assert!(Linear::from_stored(Format::Q4_1, &[0; 19], 1, 32).is_err());
    assert!(Linear::from_stored(Format::F16, &[0; 6], 2, 2).is_err());
    assert!(Linear::from_stored(Format::Int4 { group: 32 }, &[0; 16], 1, 32).is_err());
    let l = Linear::from_stored(Format::F16, &[0; 8], 2, 2).unwrap();
    assert!(l.row(2, &mut [0.0; 2]).is_err());
    assert!(l.row(1, &mut [0.0; 3]).is_err());
    let other = Linear::from_stored(Format::F32, &[0; 16], 2, 2).unwrap();
    assert!(Linear::concat(&[&l, &other]).is_err(), "formats differ");
    assert!(Linear::concat(&[&l, &l]).is_err(), "2 outputs is not a whole panel");
    assert!(Linear::concat(&[]).is_err());
}

#[test]
fn concat_runs_the_parts_side_by_side() {
    let mut rng = Lcg(5);
    let (a, _) = layer(Format::Q4_1, 32, 64, &mut rng);
    let (b, _) = layer(Format::Q4_1, 48, 64, &mut rng);
    let (c, _) = layer(Format::Q4_1, 21, 64, &mut rng);
    let all = Linear::concat(&[&a, &b, &c]).unwrap();
    assert_eq!((all.out(), all.inp()), (101, 64));
    let m = 3;
    let x: Vec<f32> = (0..m * 64).map(|_| rng.f()).collect();
    let y = run(&all, Path::best(), &x, m);
    let parts = [run(&a, Path::best(), &x, m), run(&b, Path::best(), &x, m), run(&c, Path::best(), &x, m)];
    for i in 0..m {
        let want: Vec<u32> = parts.iter().flat_map(|p| bits(&p[i * p.len() / m..(i + 1) * p.len() / m])).collect();
        assert_eq!(bits(&y[i * 101..(i + 1) * 101]), want, "row {i}");
    }
}

#[test]
fn row_lookup_widens_like_the_kernel() {
    let mut rng = Lcg(6);
    for (format, out, inp) in [(Format::Q8_0, 40, 64), (Format::Q4_1, 17, 32), (Format::BF16, 5, 7)] {
        let (l, w) = layer(format, out, inp, &mut rng);
        let mut row = vec![0.0; inp];
        for r in [0, out / 2, out - 1] {
            l.row(r, &mut row).unwrap();
            assert_eq!(bits(&row), bits(&w[r * inp..(r + 1) * inp]), "{format} row {r}");
        }
    }
}
