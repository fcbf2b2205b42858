//! The kernels' code is what the instruction-set paths promise: no SIMD intrinsic is
//! compiled as a function of its own.
//!
//! Why this is the guard against issue 36's cliff: the kernels are generic over
//! `simd::Isa` and get the instruction set's features only by being inlined into one
//! `#[target_feature]` function per path. A piece LLVM declines to inline (a closure, which
//! cannot be marked `inline(always)`) is compiled without those features, and then each
//! intrinsic in it, `_mm512_fmadd_ps` and the rest, is an out-of-line function: a call,
//! with its vectors passed through memory, per multiply-add. That made 2-6 row products of
//! the block types 20-50x slower than one row, while the 1-row and 8-row tiles, inlined,
//! were fast. An outlined intrinsic always leaves a symbol in `core::core_arch`, so this
//! test reads the symbol table of its own executable (which links tl-quant's kernels) and
//! names every such function. It times nothing.
//!
//! `tl_quant::Linear` is called below so every kernel is linked into this binary.

#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use tl_quant::{Activations, Format, Linear, Path};

#[path = "common/symbols.rs"]
mod symbols;

use symbols::{assert_no_outlined_intrinsics, simd_intrinsic};

#[test]
fn the_symbol_check_recognises_an_outlined_intrinsic() {
    // The mangled names the cliff left in tl's binaries (nm, before the fix).
    assert!(simd_intrinsic("_ZN4core9core_arch3x867avx512f15_mm512_fmadd_ps17h0123456789abcdefE"));
    assert!(simd_intrinsic("_ZN4core9core_arch3x864avx215_mm256_sllv_epi3217h0123456789abcdefE"));
    assert!(!simd_intrinsic("_ZN4core9core_arch3x865xsave7_xgetbv17h0123456789abcdefE"));
    assert!(!simd_intrinsic("_ZN8tl_quant6kernel10run_avx51217h0123456789abcdefE"));
}

#[test]
fn no_simd_intrinsic_is_compiled_out_of_line() {
    // Run the kernels (a float and a block kind, small and staged row counts) on every
    // path, so they are certainly linked into this binary.
    let (out, inp) = (32, 256);
    let w: Vec<f32> = (0..out * inp).map(|i| (i % 7) as f32 * 0.01).collect();
    let f32_layer = Linear::from_f32(&w, out, inp).unwrap();
    let bytes = vec![0u8; Format::Q4_K.row_bytes(inp).unwrap() * out];
    let q4k = Linear::from_stored(Format::Q4_K, &bytes, out, inp).unwrap();
    // And the int8-activation kernels, with the unpacking each kind adds.
    let q8: Vec<Linear> = [Format::Q8_0, Format::Q4_1, Format::Q5_K, Format::Q6_K]
        .into_iter()
        .map(|f| {
            let b = vec![0u8; f.row_bytes(inp).unwrap() * out];
            Linear::from_stored(f, &b, out, inp).unwrap().with_activations(Activations::Q8)
        })
        .collect();
    for path in Path::all_available() {
        for m in [1, 2, 3, 4, 9] {
            let x = vec![0.5f32; m * inp];
            let mut y = vec![0.0f32; m * out];
            f32_layer.forward_on(path, &x, m, &mut y).unwrap();
            q4k.forward_on(path, &x, m, &mut y).unwrap();
            for l in &q8 {
                l.forward_on(path, &x, m, &mut y).unwrap();
            }
        }
    }

    assert_no_outlined_intrinsics("tl_quant");
}
