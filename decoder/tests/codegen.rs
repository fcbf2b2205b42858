//! The forward's own vector kernels (attention, RMSNorm, the gated activations, `exp`) and
//! the matrix kernels they link with compile every intrinsic inline: no `core::core_arch`
//! function is left in the binary. An intrinsic outside its `target_feature` function
//! (in a closure LLVM did not inline) becomes a call per operation; that made tl-quant's
//! 2-6 row products 20-50x slower than one row (issue 36). tl-quant's `tests/codegen.rs`
//! explains the check; this binary adds tl-decoder's kernels to what it covers.

#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use tl_decoder::kernels::{attend_one, exp16, gelu_tanh_row, rms_norm_row, swiglu_row, Path};

#[path = "../../quant/tests/common/symbols.rs"]
mod symbols;

use symbols::assert_no_outlined_intrinsics;

#[test]
fn no_simd_intrinsic_is_compiled_out_of_line() {
    // Run each kernel on every path, so all of them are certainly linked in.
    let (d, b, n): (usize, usize, usize) = (64, 16, 40);
    let row = |i: usize| -> Vec<u16> {
        (0..b * d).map(|k| tl_quant::f32_to_f16(((i * 31 + k) % 17) as f32 * 0.01)).collect()
    };
    let blocks: Vec<Vec<u16>> = (0..n.div_ceil(b)).map(row).collect();
    let slabs: Vec<&[u16]> = blocks.iter().map(|v| v.as_slice()).collect();
    let x: Vec<f32> = (0..d * 6).map(|i| (i % 13) as f32 * 0.1 - 0.6).collect();
    for path in Path::all_available() {
        for g in 1..=5 {
            let mut out = vec![0.0f32; g * d];
            attend_one(path, &x[..g * d], &slabs, &slabs, b, n, d, &mut out).expect("attention runs");
        }
        let mut y = vec![0.0f32; d];
        rms_norm_row(path, &x[..d], &x[d..2 * d], 1e-5, &mut y);
        swiglu_row(path, &x[..d], &x[d..2 * d], &mut y);
        gelu_tanh_row(path, &x[..d], &x[d..2 * d], &mut y);
        exp16(path, &[0.5; 16]);
    }

    assert_no_outlined_intrinsics("tl_decoder");
}
