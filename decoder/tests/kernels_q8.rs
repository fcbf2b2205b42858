//! The q8 KV cache's attention read (decoder/src/kv_rows.rs): every SIMD path equals the
//! portable one, and the portable one equals the documented arithmetic over the
//! dequantized rows (docs/spec/numbers.md, "q8 KV rows"), bit for bit.

mod common;

use common::*;
use tl_decoder::kernels::{widen, Path};
use tl_quant::f16_to_f32;

/// The q8 kernel (codes times the row scale, loaded in place) follows the same documented
/// arithmetic over the dequantized values, on every path, bit for bit, including windows.
#[test]
fn q8_attention_paths_equal_the_reference_bit_for_bit() {
    let paths = simd_paths();
    let mut rng = Rng(0x0833_0833);
    let mut cases = 0;
    for d in [64, 16, 24, 8] {
        for group in [1, 3, 5] {
            for n in KEYS {
                for b in [4, 7] {
                    let c = Case::new(&mut rng, group, n, d, b).quantized();
                    let lo = n / 3;
                    let scale = 1.0 / (d as f32).sqrt();
                    let portable = c.run_q8(Path::Portable, lo, scale);
                    assert!(portable.iter().all(|x| x.is_finite()), "d {d} group {group} n {n}: not finite");
                    let want = c.reference_span(lo, scale, false);
                    assert_eq!(
                        bits(&portable),
                        bits(&want),
                        "q8 portable != reference: d {d} group {group} n {n} b {b}"
                    );
                    for &p in &paths {
                        assert_eq!(bits(&c.run_q8(p, lo, scale)), bits(&portable), "{p:?}: d {d} group {group} n {n}");
                    }
                    cases += 1;
                }
            }
        }
    }
    eprintln!("{cases} q8 cases equal on {} paths", paths.len() + 1);
    // The comparison is sharp: the same case read as f16 differs.
    let c = Case::new(&mut Rng(5), 1, 33, 64, 4).quantized();
    let mut f16 = Case::new(&mut Rng(5), 1, 33, 64, 4);
    f16.q8 = None;
    assert_ne!(bits(&c.run_q8(Path::Portable, 0, 0.125)), bits(&f16.run_span(Path::Portable, 0, 0.125)));
}

/// The q8 kernel's inlined scale widening equals tl-quant's on all 65536 f16 patterns
/// (NaN stays NaN).
#[test]
fn q8_scales_widen_like_tl_quant() {
    for h in 0..=u16::MAX {
        let (ours, want) = (widen(h), f16_to_f32(h));
        assert!(ours.to_bits() == want.to_bits() || (ours.is_nan() && want.is_nan()), "{h:#06x}: {ours} != {want}");
    }
}
