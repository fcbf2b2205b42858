//! The int8-activation mode (numbers.md "q8 activations") against an independent
//! reference: scripts/fixtures/make_q8_activations.py quantizes rows with numpy and
//! computes each layer's outputs with exact rational arithmetic rounded once per product
//! and fused multiply-add (quant/tests/data/q8_activations.json). Every instruction set
//! gives those bits; a row's result depends on neither the batch nor the thread count; the
//! formats without an integer kernel are unchanged by the mode; the distance from the
//! exact path is printed.

#[path = "common/rows.rs"]
mod rows;

use rows::{bits, check_threads_and_rows, Lcg};
use serde_json::Value;
use tl_quant::{f32_to_f16, quantize_q8_row, Activations, Format, Linear, Path};

fn golden() -> Value {
    serde_json::from_str(include_str!("data/q8_activations.json")).expect("json")
}

fn f32s(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|b| f32::from_bits(b.as_u64().unwrap() as u32)).collect()
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u32).collect()
}

fn format(name: &str) -> Format {
    match name {
        "Q8_0" => Format::Q8_0,
        "Q4_0" => Format::Q4_0,
        "Q4_1" => Format::Q4_1,
        "Q4_K" => Format::Q4_K,
        "Q5_K" => Format::Q5_K,
        "Q6_K" => Format::Q6_K,
        "Q5_0" => Format::Q5_0,
        "Q5_1" => Format::Q5_1,
        other => panic!("{other}"),
    }
}

#[test]
fn rows_quantize_as_the_reference() {
    let g = golden();
    for (i, c) in g["rows"].as_array().unwrap().iter().enumerate() {
        let tl_quant::Q8Row { q, d, s } = quantize_q8_row(&f32s(&c["x"])).unwrap();
        let want_q: Vec<i8> = c["q"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap() as i8).collect();
        let want_s: Vec<i32> = c["s"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap() as i32).collect();
        assert_eq!(q, want_q, "row {i}: codes");
        assert_eq!(bits(&d), u32s(&c["d"]), "row {i}: scales");
        assert_eq!(s, want_s, "row {i}: code sums");
    }
    assert!(quantize_q8_row(&[1.0; 33]).is_err(), "a row that does not split into blocks of 32");
}

#[test]
fn q8_layers_equal_the_reference_on_every_path() {
    let g = golden();
    for l in g["layers"].as_array().unwrap() {
        let name = l["format"].as_str().unwrap();
        let (out, inp, m) = (
            l["out"].as_u64().unwrap() as usize,
            l["inp"].as_u64().unwrap() as usize,
            l["m"].as_u64().unwrap() as usize,
        );
        let hex = l["bytes"].as_str().unwrap();
        let bytes: Vec<u8> =
            (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
        let layer = Linear::from_stored(format(name), &bytes, out, inp).unwrap().with_activations(Activations::Q8);
        assert!(layer.has_int8_kernel());
        let x = f32s(&l["x"]);
        for path in Path::all_available() {
            let mut y = vec![f32::NAN; m * out];
            layer.forward_on(path, &x, m, &mut y).unwrap();
            assert_eq!(bits(&y), u32s(&l["y"]), "{name} on {path:?}");
        }
    }
}

/// The formats with an integer kernel.
const INT8: [Format; 8] =
    [Format::Q8_0, Format::Q4_0, Format::Q4_1, Format::Q5_0, Format::Q5_1, Format::Q4_K, Format::Q5_K, Format::Q6_K];

/// Random stored blocks of `format` (one of [`INT8`]) with finite f16 scales (where they
/// sit: the format's own block shape).
fn random(format: Format, out: usize, inp: usize, rng: &mut Lcg) -> Vec<u8> {
    let shape = format.block_shape().expect("a block type");
    let mut b: Vec<u8> = (0..out * inp / shape.weights * shape.bytes).map(|_| rng.next() as u8).collect();
    for blk in b.chunks_exact_mut(shape.bytes) {
        for &at in shape.f16_scales {
            blk[at..at + 2].copy_from_slice(&f32_to_f16(rng.f() * 0.05).to_le_bytes());
        }
    }
    b
}

#[test]
fn q8_rows_do_not_depend_on_the_batch_nor_the_threads_and_stay_near_the_exact_path() {
    let mut rng = Lcg(5);
    let (out, inp, m) = (70, 256, 19);
    for format in INT8 {
        let bytes = random(format, out, inp, &mut rng);
        let q8 = Linear::from_stored(format, &bytes, out, inp).unwrap().with_activations(Activations::Q8);
        let x: Vec<f32> = (0..m * inp).map(|_| rng.f()).collect();
        let batch = check_threads_and_rows(&q8, &x, m, &[0, 7, 18], &format.to_string());
        // The distance from the exact path (f32 activations over the same weights).
        let exact = Linear::from_stored(format, &bytes, out, inp).unwrap();
        let mut e = vec![0.0; m * out];
        exact.forward(&x, m, &mut e).unwrap();
        let q: Vec<f32> = batch.iter().map(|&b| f32::from_bits(b)).collect();
        let (diff, scale) =
            e.iter().zip(&q).fold((0.0f32, 0.0f32), |(d, s), (a, b)| (d.max((a - b).abs()), s.max(a.abs())));
        eprintln!("{format}: q8 vs exact, max |diff| {diff:.2e} of outputs up to {scale:.2e}");
        assert!(diff > 0.0 && diff < 0.02 * scale, "{format}: {diff} of {scale}");
    }
}

#[test]
fn formats_without_an_integer_kernel_are_unchanged_by_the_mode() {
    let (out, inp) = (20, 256);
    let w: Vec<f32> = (0..out * inp).map(|i| ((i * 37 % 101) as f32 - 50.0) / 400.0).collect();
    let x: Vec<f32> = (0..3 * inp).map(|i| ((i * 13 % 31) as f32 - 15.0) / 16.0).collect();
    let f = Linear::from_f32(&w, out, inp).unwrap();
    assert!(!f.has_int8_kernel());
    let (mut a, mut b) = (vec![0.0; 3 * out], vec![0.0; 3 * out]);
    f.forward(&x, 3, &mut a).unwrap();
    f.clone().with_activations(Activations::Q8).forward(&x, 3, &mut b).unwrap();
    assert_eq!(bits(&a), bits(&b));
}

#[test]
fn the_largest_codes_against_the_largest_activations_give_the_portable_sums_on_every_path() {
    // Every code bit set (Q8_0's codes -1, so also a block of -128s), activations all +1 or
    // all -1 (codes ±127): the kernels' 16-bit partial sums at their bounds (AVX2 adds
    // 4-bit codes' pair sums over 4 words, 5-bit over 2, 6-bit over 2 groups).
    let (out, inp) = (20, 512);
    for format in INT8 {
        for fill in [0xFFu8, 0x80] {
            let mut rng = Lcg(9);
            let mut bytes = random(format, out, inp, &mut rng);
            let shape = format.block_shape().expect("a block type");
            let scale = |i: usize| shape.f16_scales.iter().any(|&at| (at..at + 2).contains(&i));
            for blk in bytes.chunks_exact_mut(shape.bytes) {
                for (i, b) in blk.iter_mut().enumerate() {
                    if !scale(i) {
                        *b = fill;
                    }
                }
            }
            let layer = Linear::from_stored(format, &bytes, out, inp).unwrap().with_activations(Activations::Q8);
            for sign in [1.0f32, -1.0] {
                let x = vec![sign; 3 * inp];
                let mut want = vec![0.0; 3 * out];
                layer.forward_on(Path::Portable, &x, 3, &mut want).unwrap();
                for path in Path::all_available() {
                    let mut y = vec![f32::NAN; 3 * out];
                    layer.forward_on(path, &x, 3, &mut y).unwrap();
                    assert_eq!(bits(&y), bits(&want), "{format} fill {fill:#x} sign {sign} on {path:?}");
                }
            }
        }
    }
}
