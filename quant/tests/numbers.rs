//! f16/bf16 conversions and int4 packing (numbers.md).

use tl_quant::{bf16_to_f32, f16_to_f32, f32_to_f16, pack_int4, unpack_int4, QLinear, QuantError};

#[test]
fn f16_rounds_to_nearest_even() {
    // Ties: 1 + 2^-11 is halfway between 0x3C00 and 0x3C01 -> even 0x3C00;
    // 1 + 3 * 2^-11 is halfway between 0x3C01 and 0x3C02 -> even 0x3C02.
    assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3C00);
    assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3C02);
    // Just above a tie rounds up (truncation would not).
    assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11) + 2f32.powi(-20)), 0x3C01);
    assert_eq!(f32_to_f16(-(1.0 + 3.0 * 2f32.powi(-11))), 0xBC02);
    // Largest finite, and overflow to inf (65520 is the tie between 65504 and 65536).
    assert_eq!(f32_to_f16(65504.0), 0x7BFF);
    assert_eq!(f32_to_f16(65519.0), 0x7BFF);
    assert_eq!(f32_to_f16(65520.0), 0x7C00);
    assert_eq!(f32_to_f16(-1e9), 0xFC00);
    assert_eq!(f32_to_f16(f32::INFINITY), 0x7C00);
    // Subnormals: 2^-24 is the smallest; half of it ties to even zero, 1.5x rounds to 2^-23.
    assert_eq!(f32_to_f16(2f32.powi(-24)), 0x0001);
    assert_eq!(f32_to_f16(2f32.powi(-25)), 0x0000);
    assert_eq!(f32_to_f16(3.0 * 2f32.powi(-25)), 0x0002);
    assert_eq!(f32_to_f16(-2f32.powi(-26)), 0x8000);
    assert_eq!(f32_to_f16(2f32.powi(-14) - 2f32.powi(-24)), 0x03FF);
    assert_eq!(f32_to_f16(-0.0), 0x8000);
    // NaN stays NaN.
    let n = f32_to_f16(f32::NAN);
    assert!(n & 0x7C00 == 0x7C00 && n & 0x03FF != 0, "NaN became {n:#06x}");
    // Widening matches the formula of numbers.md; every pattern round-trips.
    for h in 0..=u16::MAX {
        let (s, e, m) = ((h >> 15) as i32, ((h >> 10) & 0x1F) as i32, (h & 0x3FF) as f64);
        let sign = if s == 1 { -1.0 } else { 1.0 };
        let v = f16_to_f32(h);
        if e == 31 {
            assert_eq!(v.is_nan(), m != 0.0, "{h:#06x}");
            if m == 0.0 {
                assert_eq!(v as f64, sign * f64::INFINITY);
            }
            assert!(f32_to_f16(v) & 0x7C00 == 0x7C00 && (f32_to_f16(v) & 0x3FF != 0) == (m != 0.0));
            continue;
        }
        let want =
            if e == 0 { sign * 2f64.powi(-14) * m / 1024.0 } else { sign * 2f64.powi(e - 15) * (1.0 + m / 1024.0) };
        assert_eq!((v as f64).to_bits(), want.to_bits(), "{h:#06x}");
        assert_eq!(f32_to_f16(v), h, "{h:#06x} did not round-trip");
    }
}

#[test]
fn bf16_widens_by_shifting() {
    for h in [0u16, 0x3F80, 0xBF80, 0x7F80, 0x0001, 0x4049, 0xFFFF] {
        assert_eq!(bf16_to_f32(h).to_bits(), (h as u32) << 16);
    }
    assert_eq!(bf16_to_f32(0x3F80), 1.0);
}

#[test]
fn int4_hand_example() {
    let w = [0.7f32, -1.4, 0.0, 0.29995];
    let q = QLinear::quantize(&w, 1, 4, 4).unwrap();
    // The stored scale is f16(0.2) = 0.199951171875.
    assert_eq!(q.scales.len(), 1);
    assert_eq!(q.scales, vec![0x3266]);
    assert_eq!(f16_to_f32(q.scales[0]) as f64, 0.199951171875);
    // Rounded with the stored scale, 0.29995 -> 2 (with 0.2 it would be 1).
    assert_eq!(unpack_int4(&q.qweight), vec![4, -7, 0, 2]);
    // Nibble order: column 2b low, 2b+1 high; 4-bit two's complement.
    assert_eq!(q.qweight, vec![0x94, 0x20]);
    assert_eq!(pack_int4(&[-8, 7, 1, -1], 1, 4).unwrap(), vec![0x78, 0xF1]);
    assert_eq!(unpack_int4(&[0x78, 0xF1]), vec![-8, 7, 1, -1]);
    let s: f32 = 1638.0 / 8192.0; // 0.199951171875
    assert_eq!(q.dequantize(), vec![4.0 * s, -7.0 * s, 0.0, 2.0 * s]);
    for (a, b) in w.iter().zip(q.dequantize()) {
        assert!((a - b).abs() <= s / 2.0);
    }
}

#[test]
fn int4_packs_every_value_and_round_trips() {
    let q: Vec<i8> = (0..32).map(|i| (i % 16) as i8 - 8).collect();
    let packed = pack_int4(&q, 2, 16).unwrap();
    assert_eq!(packed.len(), 16);
    assert_eq!(unpack_int4(&packed), q);
    let all: Vec<u8> = (0..=255).collect();
    assert_eq!(pack_int4(&unpack_int4(&all), 16, 32).unwrap(), all);
}

#[test]
fn quantize_zero_and_underflowing_groups_give_zero_q() {
    // Group 0 all zero; group 1 so small that max/7 underflows f16 to zero.
    let w = [0.0f32, -0.0, 0.0, 0.0, 1e-9, -1e-9, 0.0, 1e-10];
    let q = QLinear::quantize(&w, 1, 8, 4).unwrap();
    assert_eq!(q.scales, vec![0, 0]);
    assert_eq!(unpack_int4(&q.qweight), vec![0; 8]);
    assert!(q.dequantize().iter().all(|v| *v == 0.0));
}

#[test]
fn quantize_error_bound_holds_per_group() {
    let mut state = 7u32;
    let w: Vec<f32> = (0..6 * 64)
        .map(|_| {
            state = state.wrapping_mul(1664525).wrapping_add(1013904223);
            ((state >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 3.0
        })
        .collect();
    let q = QLinear::quantize(&w, 6, 64, 16).unwrap();
    let wh = q.dequantize();
    for (i, (a, b)) in w.iter().zip(&wh).enumerate() {
        let s = f16_to_f32(q.scales[(i / 64) * 4 + (i % 64) / 16]);
        assert!((a - b).abs() <= s / 2.0, "element {i}: {a} vs {b}, s = {s}");
    }
}

#[test]
fn int4_errors_are_refused() {
    let w = [0.5f32; 8];
    assert!(matches!(QLinear::quantize(&w, 1, 8, 3), Err(QuantError::BadGroup { group: 3, inp: 8 })));
    assert!(matches!(QLinear::quantize(&w, 1, 8, 0), Err(QuantError::BadGroup { .. })));
    assert!(matches!(QLinear::quantize(&w, 1, 8, 6), Err(QuantError::BadGroup { group: 6, .. })));
    assert!(matches!(QLinear::quantize(&w, 1, 8, 5), Err(QuantError::BadGroup { .. })));
    assert!(matches!(
        QLinear::quantize(&w, 2, 8, 4),
        Err(QuantError::LengthMismatch { what: "w", expected: 16, got: 8 })
    ));
    let mut bad = w;
    bad[5] = f32::NAN;
    assert!(matches!(QLinear::quantize(&bad, 1, 8, 4), Err(QuantError::NonFiniteWeight { row: 0, col: 5, .. })));
    bad[5] = f32::NEG_INFINITY;
    assert!(matches!(QLinear::quantize(&bad, 1, 8, 4), Err(QuantError::NonFiniteWeight { col: 5, .. })));
    let mut big = w;
    big[2] = 7.0 * 65504.0;
    assert!(QLinear::quantize(&big, 1, 8, 4).is_ok());
    big[2] = 7.0 * 65504.0 * 1.0001;
    assert!(matches!(QLinear::quantize(&big, 1, 8, 4), Err(QuantError::ScaleOverflow { row: 0, group: 0, .. })));
    assert!(matches!(pack_int4(&[0, 8], 1, 2), Err(QuantError::QOutOfRange { index: 1, value: 8 })));
    assert!(matches!(pack_int4(&[-9, 0], 1, 2), Err(QuantError::QOutOfRange { index: 0, value: -9 })));
    assert!(matches!(pack_int4(&[0, 0, 0], 1, 3), Err(QuantError::OddColumns { cols: 3 })));
    assert!(matches!(pack_int4(&[0, 0], 2, 2), Err(QuantError::LengthMismatch { what: "q", .. })));
    // from_parts checks lengths, the group and the scales.
    assert!(QLinear::from_parts(2, 8, 4, vec![0; 8], vec![0; 4]).is_ok());
    assert!(matches!(
        QLinear::from_parts(2, 8, 4, vec![0; 7], vec![0; 4]),
        Err(QuantError::LengthMismatch { what: "qweight", expected: 8, got: 7 })
    ));
    assert!(matches!(
        QLinear::from_parts(2, 8, 4, vec![0; 8], vec![0; 3]),
        Err(QuantError::LengthMismatch { what: "scales", expected: 4, got: 3 })
    ));
    assert!(matches!(QLinear::from_parts(2, 8, 3, vec![0; 8], vec![0; 4]), Err(QuantError::BadGroup { .. })));
    assert!(matches!(
        QLinear::from_parts(2, 8, 4, vec![0; 8], vec![0, 0x7C00, 0, 0]),
        Err(QuantError::BadScale { row: 0, group: 1, .. })
    ));
    assert!(matches!(
        QLinear::from_parts(2, 8, 4, vec![0; 8], vec![0, 0, 0xBC00, 0]),
        Err(QuantError::BadScale { row: 1, group: 0, .. })
    ));
    // Messages name the buffer.
    let e = QLinear::from_parts(2, 8, 4, vec![0; 7], vec![0; 4]).unwrap_err();
    assert!(e.to_string().contains("qweight"), "{e}");
}
