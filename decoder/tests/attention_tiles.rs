//! Query tiles: the kernel runs up to `MAX_ROWS` rows (consecutive positions x query heads)
//! in one pass over the keys, and each row must come out bit for bit as that position's
//! heads computed alone (which kernels.rs holds to the documented arithmetic). Every
//! path, f16 and q8 blocks, sinks or none, head sizes with a partial last chunk, key
//! counts across the value pass's key blocks, and keys that start past 0.

mod common;

use common::*;
use tl_core::Q8Slab;
use tl_decoder::kernels::{attend_span_sinks, attend_tile, Path, Span, MAX_ROWS};

/// One run of the kernel: `(q, span, sinks, heads, tokens)` (tokens 0: one position
/// through `attend_span_sinks`) to its output.
type Run<'a> = &'a dyn Fn(&[f32], Span, &[f32], usize, usize) -> Vec<f32>;

/// The blocks of a case as the kernel reads them, f16 or q8.
fn run_both(c: &Case, f: &mut dyn FnMut(&str, Run<'_>)) {
    let k: Vec<&[u16]> = c.k.iter().map(Vec::as_slice).collect();
    let v: Vec<&[u16]> = c.v.iter().map(Vec::as_slice).collect();
    let f16 = |q: &[f32], span: Span, sinks: &[f32], heads: usize, tokens: usize| -> Vec<f32> {
        let mut out = vec![f32::NAN; q.len()];
        if tokens == 0 {
            attend_span_sinks(Path::Portable, q, (&k, &v), c.b, (span, sinks), &mut out).expect("runs");
        } else {
            attend_tile(Path::Portable, q, (&k, &v), c.b, (span, sinks, heads), tokens, &mut out).expect("runs");
        }
        out
    };
    f("f16", &f16);
    let q8 = c.q8.as_ref().expect("quantized");
    let k8: Vec<Q8Slab<'_>> = q8[0].iter().map(|(c, s)| Q8Slab { codes: c, scales: s }).collect();
    let v8: Vec<Q8Slab<'_>> = q8[1].iter().map(|(c, s)| Q8Slab { codes: c, scales: s }).collect();
    let q8f = |q: &[f32], span: Span, sinks: &[f32], heads: usize, tokens: usize| -> Vec<f32> {
        let mut out = vec![f32::NAN; q.len()];
        if tokens == 0 {
            attend_span_sinks(Path::Portable, q, (&k8, &v8), c.b, (span, sinks), &mut out).expect("runs");
        } else {
            attend_tile(Path::Portable, q, (&k8, &v8), c.b, (span, sinks, heads), tokens, &mut out).expect("runs");
        }
        out
    };
    f("q8", &q8f);
}

#[test]
fn a_tile_row_equals_its_position_alone_bit_for_bit() {
    let mut rng = Rng(0x7a11_e5ee_d00d_0001);
    let mut cases = 0;
    for d in [64, 16, 24, 128, 80] {
        for heads in [1, 3, 4, 5, 8] {
            for tokens in [2, 3, 4, 8, MAX_ROWS] {
                for n in [tokens, tokens + 1, 17, 70, 300] {
                    if n < tokens {
                        continue;
                    }
                    for lo in [0, 5] {
                        if lo + tokens > n {
                            continue;
                        }
                        let c = Case::new(&mut rng, tokens * heads, n, d, 16).quantized();
                        let sinks: Vec<f32> = if d == 16 { (0..heads).map(|_| rng.f32(4.0)).collect() } else { vec![] };
                        let span = Span { lo, n, d, scale: 1.0 / (d as f32).sqrt() };
                        run_both(&c, &mut |kind, run| {
                            let tile = run(&c.q, span, &sinks, heads, tokens);
                            for t in 0..tokens {
                                let rows = t * heads * d..(t + 1) * heads * d;
                                let alone_span = Span { n: n - tokens + 1 + t, ..span };
                                let alone = run(&c.q[rows.clone()], alone_span, &sinks, heads, 0);
                                assert_eq!(
                                    bits(&tile[rows]),
                                    bits(&alone),
                                    "{kind}: d {d} heads {heads} tokens {tokens} n {n} lo {lo}: position {t}"
                                );
                            }
                        });
                        cases += 1;
                    }
                }
            }
        }
    }
    eprintln!("{cases} tiles equal their positions alone");
}

#[test]
fn tiles_are_the_same_bits_on_every_path() {
    let paths = simd_paths();
    let mut rng = Rng(0x7a11_e5ee_d00d_0002);
    for d in [64, 24, 128] {
        for (heads, tokens) in [(3, 4), (4, 3), (1, 8), (5, 2), (2, 6)] {
            for n in [tokens, 33, 300] {
                let c = Case::new(&mut rng, tokens * heads, n, d, 16).quantized();
                let span = Span { lo: 0, n, d, scale: 0.125 };
                let k: Vec<&[u16]> = c.k.iter().map(Vec::as_slice).collect();
                let v: Vec<&[u16]> = c.v.iter().map(Vec::as_slice).collect();
                let q8 = c.q8.as_ref().expect("quantized");
                let k8: Vec<Q8Slab<'_>> = q8[0].iter().map(|(c, s)| Q8Slab { codes: c, scales: s }).collect();
                let v8: Vec<Q8Slab<'_>> = q8[1].iter().map(|(c, s)| Q8Slab { codes: c, scales: s }).collect();
                let f16 = |p: Path| {
                    let mut out = vec![f32::NAN; c.q.len()];
                    attend_tile(p, &c.q, (&k, &v), c.b, (span, &[], heads), tokens, &mut out).expect("runs");
                    out
                };
                let q8 = |p: Path| {
                    let mut out = vec![f32::NAN; c.q.len()];
                    attend_tile(p, &c.q, (&k8, &v8), c.b, (span, &[], heads), tokens, &mut out).expect("runs");
                    out
                };
                let (f0, q0) = (f16(Path::Portable), q8(Path::Portable));
                assert!(f0.iter().chain(&q0).all(|x| x.is_finite()));
                for &p in &paths {
                    assert_eq!(bits(&f16(p)), bits(&f0), "{p:?} f16: d {d} heads {heads} tokens {tokens} n {n}");
                    assert_eq!(bits(&q8(p)), bits(&q0), "{p:?} q8: d {d} heads {heads} tokens {tokens} n {n}");
                }
            }
        }
    }
}

/// The negative control: a tile whose earlier position wrongly saw the later keys would
/// differ from that position alone, and the comparison catches it (so the equalities
/// above are not vacuous): the last position of a tile differs from the first's.
#[test]
fn tile_positions_see_different_keys() {
    let mut rng = Rng(3);
    let (d, heads, tokens, n) = (64, 3, 4, 40);
    let mut c = Case::new(&mut rng, tokens * heads, n, d, 16);
    // Every position asks the same question: only the keys it sees differ.
    let first = c.q[..heads * d].to_vec();
    for t in 1..tokens {
        c.q[t * heads * d..(t + 1) * heads * d].copy_from_slice(&first);
    }
    let k: Vec<&[u16]> = c.k.iter().map(Vec::as_slice).collect();
    let v: Vec<&[u16]> = c.v.iter().map(Vec::as_slice).collect();
    let span = Span { lo: 0, n, d, scale: 0.125 };
    let mut out = vec![f32::NAN; c.q.len()];
    attend_tile(Path::Portable, &c.q, (&k, &v), c.b, (span, &[], heads), tokens, &mut out).expect("runs");
    let rows = heads * d;
    assert_ne!(bits(&out[..rows]), bits(&out[(tokens - 1) * rows..]), "position 0 saw position 3's keys");
}

#[test]
fn tiles_refuse_what_does_not_fit() {
    let mut rng = Rng(4);
    let c = Case::new(&mut rng, 6, 10, 16, 16);
    let k: Vec<&[u16]> = c.k.iter().map(Vec::as_slice).collect();
    let v: Vec<&[u16]> = c.v.iter().map(Vec::as_slice).collect();
    let mut out = vec![0.0; c.q.len()];
    let span = Span { lo: 0, n: 10, d: 16, scale: 0.25 };
    let run = |span: Span, heads: usize, tokens: usize, out: &mut [f32]| {
        attend_tile(Path::Portable, &c.q, (&k, &v), c.b, (span, &[], heads), tokens, out)
    };
    assert!(run(span, 3, 2, &mut out).is_ok());
    assert!(run(span, 2, 3, &mut out).is_ok());
    assert!(run(Span { lo: 9, ..span }, 3, 2, &mut out).is_err(), "the first position would see no key");
    assert!(run(Span { n: 17, ..span }, 3, 2, &mut out).is_err(), "keys past the slabs");
    assert!(run(span, 3, 3, &mut out).is_err(), "q holds 2 positions of 3 heads");
    assert!(run(span, 3, 2, &mut out[..40]).is_err(), "out too short");
    let one = |tokens: usize| {
        let q = vec![0.5f32; tokens * 16];
        let mut o = vec![0.0f32; tokens * 16];
        let kk: Vec<&[u16]> = (0..2).map(|_| k[0]).collect();
        let span = Span { lo: 0, n: 20, d: 16, scale: 0.25 };
        attend_tile(Path::Portable, &q, (&kk, &kk), 16, (span, &[], 1), tokens, &mut o)
    };
    assert!(one(MAX_ROWS).is_ok());
    assert!(one(MAX_ROWS + 1).is_err(), "more positions than the kernel's rows");
}
