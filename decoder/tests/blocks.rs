//! The public blocks a family composes: per-head q/k RMSNorm and the RoPE tables act on
//! exactly the heads they name, each as the row kernel defines it.

use tl_decoder::kernels::rms_norm_row;
use tl_decoder::{head_rms_norm, Path, Rope, RopeTables};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Deterministic values in about [-2, 2].
fn vals(n: usize, seed: u32) -> Vec<f32> {
    (0..n).map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 4001) as f32 / 1000.0 - 2.0).collect()
}

/// Each q head is `rms_norm_row` of its own D values with the q weight, each k head with
/// the k weight, and the v heads are untouched; rows are independent (a row normed alone
/// is the same bits as in a batch of 40).
#[test]
fn head_norm_norms_each_q_and_k_head_alone() {
    let (h, hkv, d, n) = (4usize, 2usize, 24usize, 40usize);
    let stride = (h + 2 * hkv) * d;
    let x = vals(n * stride, 7);
    let (qw, kw) = (vals(d, 1), vals(d, 2));
    for path in Path::all_available() {
        let mut got = x.clone();
        head_rms_norm(path, &mut got, stride, (h, &qw), (hkv, &kw), 1e-6);
        for t in 0..n {
            let row = &x[t * stride..(t + 1) * stride];
            let mut want = row.to_vec();
            for head in 0..h + hkv {
                let w = if head < h { &qw } else { &kw };
                rms_norm_row(
                    Path::Portable,
                    &row[head * d..(head + 1) * d],
                    w,
                    1e-6,
                    &mut want[head * d..(head + 1) * d],
                );
            }
            assert_eq!(bits(&got[t * stride..(t + 1) * stride]), bits(&want), "{path:?} row {t}");
            assert_eq!(bits(&want[(h + hkv) * d..]), bits(&row[(h + hkv) * d..]), "v changed");
            assert_ne!(bits(&want[..d]), bits(&row[..d]), "q not normed");
            let mut alone = row.to_vec();
            head_rms_norm(path, &mut alone, stride, (h, &qw), (hkv, &kw), 1e-6);
            assert_eq!(bits(&alone), bits(&want));
        }
    }
}

/// RoPE from a table rotates the halves of each named head by the angle `pos * f`, leaves
/// other columns alone, and two tables (Gemma 3's local and global bases) differ.
#[test]
fn rope_tables_rotate_the_named_heads() {
    let d = 8usize;
    let inv = [1.0f32, 0.5, 0.25, 0.125];
    let pos = [0usize, 3, 1000];
    let stride = 3 * d;
    let x = vals(pos.len() * stride, 3);
    let mut t = RopeTables::default();
    t.fill(&pos, &Rope::plain(inv.to_vec()));
    let mut got = x.clone();
    t.apply(&mut got, stride, d, 2, d); // heads 1 and 2 only
    for (r, &p) in pos.iter().enumerate() {
        let row = &x[r * stride..(r + 1) * stride];
        let out = &got[r * stride..(r + 1) * stride];
        assert_eq!(bits(&out[..d]), bits(&row[..d]), "head 0 changed");
        for head in 1..3 {
            for i in 0..d / 2 {
                let a = p as f32 * inv[i];
                let (c, s) = (a.cos(), a.sin());
                let (x1, x2) = (row[head * d + i], row[head * d + i + d / 2]);
                assert_eq!(out[head * d + i].to_bits(), (x1 * c - x2 * s).to_bits());
                assert_eq!(out[head * d + i + d / 2].to_bits(), (x2 * c + x1 * s).to_bits());
            }
        }
    }
    let mut other = RopeTables::default();
    other.fill(&pos, &Rope::plain(vec![1.0, 0.1, 0.01, 0.001]));
    let mut y = x.clone();
    other.apply(&mut y, stride, d, 2, d);
    assert_ne!(bits(&y), bits(&got));
}
