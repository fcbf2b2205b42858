//! The GGUF block types kept as stored (Q5_0, Q5_1, IQ4_NL, Q2_K .. Q6_K, MXFP4, and the older
//! Q4_0/Q4_1/Q8_0 through `dequantize`):
//! - `dequantize` equals gguf-py's `gguf.quants.dequantize` (an independent numpy
//!   implementation) on the committed random blocks of scripts/fixtures/make_quant_blocks.py;
//! - a stored layer widens to exactly those values, and on every instruction set computes
//!   each output as one FMA chain over k ascending on them (so it equals the f32 layer over
//!   `dequantize` bit for bit), for m = 1..=17, outputs not a multiple of 16, several widths;
//! - a row's result depends on neither the batch nor the thread count;
//! - short data, non-finite scales, widths that do not split into blocks and overflowing
//!   shapes are errors, never panics.

#[path = "common/rows.rs"]
mod rows;

use rows::{bits, check_threads_and_rows, Lcg};
use tl_quant::{dequantize, f32_to_f16, Format, Linear, Path, QuantError};

const BLOCK_FORMATS: [Format; 9] = [
    Format::Q5_0,
    Format::Q5_1,
    Format::IQ4_NL,
    Format::Q2_K,
    Format::Q3_K,
    Format::Q4_K,
    Format::Q5_K,
    Format::Q6_K,
    Format::MXFP4,
];

/// `(bytes, weights, offsets of the f16 scales)` of one block (ggml-common.h).
fn block(format: Format) -> (usize, usize, &'static [usize]) {
    match format {
        Format::Q4_0 => (18, 32, &[0]),
        Format::Q4_1 => (20, 32, &[0, 2]),
        Format::Q8_0 => (34, 32, &[0]),
        Format::Q5_0 => (22, 32, &[0]),
        Format::Q5_1 => (24, 32, &[0, 2]),
        Format::IQ4_NL => (18, 32, &[0]),
        Format::Q2_K => (84, 256, &[80, 82]),
        Format::Q3_K => (110, 256, &[108]),
        Format::Q4_K => (144, 256, &[0, 2]),
        Format::Q5_K => (176, 256, &[0, 2]),
        Format::Q6_K => (210, 256, &[208]),
        Format::MXFP4 => (17, 32, &[]), // an e8m0 exponent byte at 0 instead
        other => panic!("{other} is not a block format"),
    }
}

/// Random blocks for `[out, inp]`: random bytes, finite random f16 scales.
fn random_blocks(format: Format, out: usize, inp: usize, rng: &mut Lcg) -> Vec<u8> {
    let (bb, k, at) = block(format);
    let mut bytes: Vec<u8> = (0..out * inp / k * bb).map(|_| rng.next() as u8).collect();
    for blk in bytes.chunks_exact_mut(bb) {
        for &a in at {
            blk[a..a + 2].copy_from_slice(&f32_to_f16(rng.f() * 0.1).to_le_bytes());
        }
        if format == Format::MXFP4 {
            // Scales 2^-14 .. 2^-2 (as a model's): products stay far from overflow.
            blk[0] = 114 + (rng.next() % 13) as u8;
        }
    }
    bytes
}

/// One FMA chain over k ascending from +0.0 per output (the crate's contract).
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

/// One record: (type name, rows, cols, bytes, values).
type Record = (String, usize, usize, Vec<u8>, Vec<f32>);

/// The records of quant/tests/data/gguf_blocks.bin.
fn golden() -> Vec<Record> {
    let data = include_bytes!("data/gguf_blocks.bin");
    let (mut at, mut v) = (0, Vec::new());
    let u32_at = |at: usize| u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
    while at < data.len() {
        let n = data[at] as usize;
        let name = String::from_utf8(data[at + 1..at + 1 + n].to_vec()).unwrap();
        at += 1 + n;
        let (rows, cols, nb) = (u32_at(at), u32_at(at + 4), u32_at(at + 8));
        at += 12;
        let bytes = data[at..at + nb].to_vec();
        at += nb;
        let vals = data[at..at + 4 * rows * cols].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()));
        v.push((name, rows, cols, bytes, vals.collect()));
        at += 4 * rows * cols;
    }
    v
}

fn format_named(name: &str) -> Format {
    match name {
        "Q4_0" => Format::Q4_0,
        "Q4_1" => Format::Q4_1,
        "Q8_0" => Format::Q8_0,
        "Q5_0" => Format::Q5_0,
        "Q5_1" => Format::Q5_1,
        "IQ4_NL" => Format::IQ4_NL,
        "Q2_K" => Format::Q2_K,
        "Q3_K" => Format::Q3_K,
        "Q4_K" => Format::Q4_K,
        "Q5_K" => Format::Q5_K,
        "Q6_K" => Format::Q6_K,
        "MXFP4" => Format::MXFP4,
        other => panic!("unknown type {other} in the golden file"),
    }
}

#[test]
fn dequantize_equals_gguf_py_for_every_block_type() {
    let records = golden();
    assert_eq!(records.len(), 12, "one record per block type");
    for (name, rows, cols, bytes, want) in records {
        let format = format_named(&name);
        let got = dequantize(format, &bytes, rows, cols).unwrap();
        assert_eq!(bits(&got), bits(&want), "{name}: tl-quant vs gguf-py");
        // The stored layer widens to the same values, row by row too.
        let l = Linear::from_stored(format, &bytes, rows, cols).unwrap();
        assert_eq!(bits(&l.dequantize()), bits(&want), "{name}: the layer's own widening");
        let mut row = vec![0.0; cols];
        l.row(rows - 1, &mut row).unwrap();
        assert_eq!(bits(&row), bits(&want[(rows - 1) * cols..]), "{name}: row lookup");
    }
}

#[test]
fn every_block_format_is_one_fma_chain_per_element_on_every_path() {
    let paths = Path::all_available();
    eprintln!("paths on this CPU: {paths:?}");
    let mut rng = Lcg(11);
    for format in BLOCK_FORMATS {
        let k = block(format).1;
        // The staged prefill path widens 256 k at a time: 9 blocks of 32 end in a short chunk.
        let wide = if k == 32 { 9 * k } else { 3 * k };
        for (out, inp) in [(1, k), (17, 2 * k), (50, k), (33, wide)] {
            let bytes = random_blocks(format, out, inp, &mut rng);
            let w = dequantize(format, &bytes, out, inp).unwrap();
            let l = Linear::from_stored(format, &bytes, out, inp).unwrap();
            assert_eq!(bits(&l.dequantize()), bits(&w), "{format} {out}x{inp}: widened");
            for m in 1..=17 {
                let x: Vec<f32> = (0..m * inp).map(|_| rng.f()).collect();
                let want = bits(&reference(&x, m, &w, out, inp));
                for &path in &paths {
                    assert_eq!(bits(&run(&l, path, &x, m)), want, "{format} {out}x{inp} m={m} on {path:?}");
                }
            }
        }
    }
}

#[test]
fn stored_blocks_equal_the_f32_layer_over_dequantize() {
    let mut rng = Lcg(12);
    for format in BLOCK_FORMATS {
        let (out, inp) = (40, 2 * block(format).1);
        let bytes = random_blocks(format, out, inp, &mut rng);
        let l = Linear::from_stored(format, &bytes, out, inp).unwrap();
        let f = Linear::from_f32(&dequantize(format, &bytes, out, inp).unwrap(), out, inp).unwrap();
        for m in [1, 6, 37] {
            let x: Vec<f32> = (0..m * inp).map(|_| rng.f() * 4.0).collect();
            let (mut a, mut b) = (vec![0.0; m * out], vec![0.0; m * out]);
            l.forward(&x, m, &mut a).unwrap();
            f.forward(&x, m, &mut b).unwrap();
            assert_eq!(bits(&a), bits(&b), "{format} m={m}");
        }
    }
}

#[test]
fn block_rows_do_not_depend_on_the_batch_nor_the_thread_count() {
    let mut rng = Lcg(13);
    let m = 21;
    for format in BLOCK_FORMATS {
        let (out, inp) = (70, block(format).1 * 2);
        let l = Linear::from_stored(format, &random_blocks(format, out, inp, &mut rng), out, inp).unwrap();
        let x: Vec<f32> = (0..m * inp).map(|_| rng.f()).collect();
        check_threads_and_rows(&l, &x, m, &[0, 9, 20], &format.to_string());
    }
}

#[test]
fn bad_block_data_is_an_error() {
    let mut rng = Lcg(14);
    for format in BLOCK_FORMATS.into_iter().chain([Format::Q4_0, Format::Q4_1, Format::Q8_0]) {
        let (bb, k, at) = block(format);
        let (out, inp) = (3, 2 * k);
        let good = random_blocks(format, out, inp, &mut rng);
        // Shorter (and longer) than the shape claims.
        for bytes in [&good[..good.len() - 1], &good[..bb], &[good.clone(), vec![0]].concat()[..]] {
            let want = QuantError::LengthMismatch { what: "w", expected: good.len(), got: bytes.len() };
            assert_eq!(Linear::from_stored(format, bytes, out, inp).unwrap_err(), want, "{format}");
            assert_eq!(dequantize(format, bytes, out, inp).unwrap_err(), want, "{format}");
        }
        // A width that does not split into blocks.
        let bad = QuantError::BadBlocks { format: format.to_string(), inp: k + 16 };
        assert_eq!(Linear::from_stored(format, &good, 1, k + 16).unwrap_err(), bad);
        assert_eq!(dequantize(format, &good, 1, k + 16).unwrap_err(), bad);
        // Rows times row bytes that overflow usize.
        assert!(matches!(
            Linear::from_stored(format, &good, usize::MAX / 2, inp),
            Err(QuantError::ShapeOverflow { .. })
        ));
        assert!(matches!(dequantize(format, &good, usize::MAX / 2, inp), Err(QuantError::ShapeOverflow { .. })));
        // Each scale field of a later block as inf, -inf and NaN.
        for &a in at {
            for h in [0x7C00u16, 0xFC00, 0x7E00, 0x7C01] {
                let mut bytes = good.clone();
                let (row, blk) = (2, 1);
                let off = (row * 2 + blk) * bb + a;
                bytes[off..off + 2].copy_from_slice(&h.to_le_bytes());
                for err in [
                    Linear::from_stored(format, &bytes, out, inp).unwrap_err(),
                    dequantize(format, &bytes, out, inp).unwrap_err(),
                ] {
                    match err {
                        QuantError::NonFiniteScale { row: r, block: b, value, .. } => {
                            assert_eq!((r, b), (row, blk), "{format}: which block");
                            assert!(!value.is_finite());
                        }
                        e => panic!("{format}: {e}"),
                    }
                }
            }
        }
        // MXFP4's exponent byte above 252 (weights that overflow f32; 255 is OCP's NaN).
        if format == Format::MXFP4 {
            for e in [253u8, 254, 255] {
                let mut bytes = good.clone();
                bytes[(2 * 2 + 1) * bb] = e;
                for err in [
                    Linear::from_stored(format, &bytes, out, inp).unwrap_err(),
                    dequantize(format, &bytes, out, inp).unwrap_err(),
                ] {
                    let want = QuantError::ScaleOutOfRange { format: "MXFP4".into(), row: 2, block: 1, exponent: e };
                    assert_eq!(err, want);
                }
            }
        }
    }
}

#[test]
fn block_panels_stay_near_the_file_size() {
    // Packed bytes per stored byte (the panels keep the file's codes; K types add at most
    // 4 bytes of scales per 256 weights, plus rounding the rows up to 16).
    for format in BLOCK_FORMATS {
        let (out, inp) = (64, 4 * block(format).1);
        let bytes = vec![0u8; format.row_bytes(inp).unwrap() * out];
        let l = Linear::from_stored(format, &bytes, out, inp).unwrap();
        let ratio = l.packed_bytes() as f64 / bytes.len() as f64;
        eprintln!("{format}: {ratio:.3} x the file's bytes");
        assert!((1.0..=1.05).contains(&ratio), "{format}: {ratio}");
    }
}

#[test]
fn mxfp4_every_exponent_widens_exactly_on_every_path() {
    // Row e holds exponent e (0 ..= 252: subnormal scales at 0 and 1, the largest finite
    // weights at 252) and random codes; the identity activations read each weight back
    // alone, so every kernel's widening of the e8m0 byte is compared with gguf-py's value
    // (the golden test) and numbers.md's, bit for bit.
    let mut rng = Lcg(15);
    let (out, inp) = (253, 32);
    let mut bytes = Vec::with_capacity(out * 17);
    for e in 0..out {
        bytes.push(e as u8);
        bytes.extend((0..16).map(|_| rng.next() as u8));
    }
    let w = dequantize(Format::MXFP4, &bytes, out, inp).unwrap();
    assert!(w.iter().all(|v| v.is_finite()));
    let l = Linear::from_stored(Format::MXFP4, &bytes, out, inp).unwrap();
    let x: Vec<f32> = (0..inp * inp).map(|i| if i / inp == i % inp { 1.0 } else { 0.0 }).collect();
    for path in Path::all_available() {
        let y = run(&l, path, &x, inp);
        for k in 0..inp {
            for n in 0..out {
                // 0 * (-w) gives -0 where a chain of +0 * w gives +0: compare values there.
                let (got, want) = (y[k * out + n], w[n * inp + k]);
                assert!(got.to_bits() == want.to_bits() || (got == 0.0 && want == 0.0), "{path:?} e={n} k={k}");
            }
        }
    }
}
