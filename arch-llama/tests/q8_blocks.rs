//! The int8-activation mode on the K-quant files people download: a tiny Llama mixed as
//! llama-quantize's Q4_K_M mixes it (Q4_K, attn_v / ffn_down / head Q6_K, a Q5_0
//! fallback, as in a file whose rows do not fit 256-value blocks), one all Q5_K and one
//! all Q5_1 (every one of them with an integer kernel). In `--activations q8`:
//! - chunks, batches, batched decode and thread counts give the same bits (testkit's
//!   split checks), the mode is really on (other bits than the exact path) and near it;
//! - a corrupted block (a NaN scale) or a truncated file gets the exact path's error,
//!   word for word, naming the tensor.

mod common;
#[path = "common/k_model.rs"]
mod k_model;

use tl_arch_llama as _;

use common::*;
use k_model::{tempdir, write_model, write_model_with, Lcg, PROMPTS};
use tl_core::{Activations, EngineConfig, ModelRunner, Weights};

/// A tensor's type by its part and layer.
type Pick = dyn Fn(&str, usize) -> &'static str;

fn q4_k_m(part: &str, layer: usize) -> &'static str {
    match (part, layer) {
        ("token_embd", _) | ("attn_v", _) => "Q6_K",
        ("ffn_down", 0) => "Q6_K",
        ("ffn_down", _) => "Q5_0",
        _ => "Q4_K",
    }
}

fn refs() -> Vec<RefPrompt> {
    PROMPTS
        .iter()
        .map(|p| RefPrompt {
            text: format!("{p:?}"),
            ids: p.to_vec(),
            last_logits: vec![],
            tolerance: 0.0,
            greedy: vec![],
            margins: vec![],
        })
        .collect()
}

#[test]
fn q8_mode_on_k_quant_files_keeps_every_invariance_and_stays_near_the_exact_path() {
    let all = |t: &'static str| move |_: &str, _: usize| t;
    let (q5k, q5_1) = (all("Q5_K"), all("Q5_1"));
    let picks: [(&str, &Pick); 3] = [("q4km", &q4_k_m), ("q5k", &q5k), ("q5_1", &q5_1)];
    for (tag, pick) in picks {
        let dir = tempdir(&format!("q8-{tag}"));
        write_model(&dir, pick, &mut Lcg(31));
        let q8 = check_invariance_with(&dir, &refs(), &[vec![2, 1], vec![1, 1, 1]], Activations::Q8);
        let mut exact = load_with(&dir, 0, Activations::Exact);
        for (p, q) in PROMPTS.iter().zip(&q8) {
            let e = run_in_steps(&mut exact, p, &[]);
            assert_ne!(bits(&e), bits(q), "{tag} {p:?}: q8 gave the exact path's bits");
            let (d, top) = (max_abs_diff(&e, q), max_abs(&e));
            eprintln!("{tag} {p:?}: q8 vs exact max |diff| {d:.3e} of logits up to {top:.2}");
            assert!(d < 0.05 * top, "{tag} {p:?}: {d} of {top}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Both modes' load errors for the model in `dir`.
fn errors(dir: &std::path::Path) -> [String; 2] {
    [Activations::Exact, Activations::Q8].map(|activations| {
        let cfg = EngineConfig { activations, ..engine(0, Weights::Native) };
        match ModelRunner::load(dir, &cfg) {
            Ok(_) => panic!("{}: a damaged file loaded in {activations} mode", dir.display()),
            Err(e) => e.to_string(),
        }
    })
}

#[test]
fn a_corrupted_or_truncated_block_gets_the_exact_paths_error_in_q8_mode() {
    // A NaN scale in the second block of a Q6_K and of a Q4_K tensor (d at 208 and at 0;
    // ffn_down's rows hold two blocks, ffn_up's one). The message names the tensor by the
    // model's name for it.
    for (name, named, at, block) in [
        ("blk.0.ffn_down.weight", "layers.0.mlp.down_proj", 210 + 208, "row 0 block 1"),
        ("blk.1.ffn_up.weight", "layers.1.mlp.up_proj", 144, "row 1 block 0"),
    ] {
        let dir = tempdir("q8-nan");
        write_model_with(&dir, &q4_k_m, &mut Lcg(32), &mut |ts| {
            let t = ts.iter_mut().find(|t| t.name == name).expect("tensor");
            t.data[at..at + 2].copy_from_slice(&0x7E00u16.to_le_bytes());
        });
        let [exact, q8] = errors(&dir);
        assert_eq!(exact, q8, "{name}");
        assert!(q8.contains("model.gguf") && q8.contains(named) && q8.contains(block) && q8.contains("NaN"), "{q8}");
        let _ = std::fs::remove_dir_all(&dir);
    }
    // Cut inside the last tensor's data.
    let dir = tempdir("q8-cut");
    write_model(&dir, &q4_k_m, &mut Lcg(33));
    let file = dir.join("model.gguf");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 100]).unwrap();
    let [exact, q8] = errors(&dir);
    assert_eq!(exact, q8);
    assert!(q8.contains("model.gguf") && q8.contains(".weight"), "{q8}");
    let _ = std::fs::remove_dir_all(&dir);
}
