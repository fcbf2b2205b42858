//! The q8 KV cache (`"q8-slab"`) on the Llama fixtures: every invariance the f16 cache
//! keeps (chunked prefill, a batch, batched decode, 1 and 2 threads, `--weights f32`)
//! holds bit for bit, and the distance from the f16 cache is measured (docs/kv.md).

mod common;

use tl_arch_llama as _;

use common::*;
use tl_core::Weights;

#[test]
fn q8_cache_keeps_batch_chunk_and_thread_invariance_on_llama() {
    check_invariance_kv(&fixture("tiny-llama"), &reference("tiny-llama"), &[vec![3, 2, 5], vec![7, 1]], Q8);
}

#[test]
fn q8_cache_keeps_batch_chunk_and_thread_invariance_on_llama3() {
    check_invariance_kv(&fixture("tiny-llama3"), &reference("tiny-llama3"), &[vec![3, 2, 5]], Q8);
}

#[test]
fn q8_cache_stays_near_the_f16_cache_on_llama() {
    for name in ["tiny-llama", "tiny-llama3"] {
        let refs = reference(name);
        let (worst, same, _) = q8_distance(&fixture(name), &refs, 16, name);
        // Measured 2026-12 (docs/kv.md): well inside the HF tolerance scale; a broken
        // scale or a code read as unsigned moves the logits by whole units.
        let tol = refs.iter().map(|p| tolerance(&p.last_logits)).fold(0.0f32, f32::max);
        assert!(worst <= 30.0 * tol, "{name}: q8 moves the logits by {worst} (> 30 x {tol})");
        assert!(same * 2 >= refs.len(), "{name}: only {same} of {} greedy runs agree", refs.len());
    }
}

#[test]
fn q8_cache_is_not_the_f16_cache() {
    // The backend really is used: the logits differ from f16's somewhere.
    let p = &reference("tiny-llama")[0];
    let a = run_in_steps(&mut load_path_kv(&fixture("tiny-llama"), 0, Weights::Native, F16), &p.ids, &[]);
    let b = run_in_steps(&mut load_path_kv(&fixture("tiny-llama"), 0, Weights::Native, Q8), &p.ids, &[]);
    assert_ne!(bits(&a), bits(&b));
}

/// SmolLM2-135M (Q4_1 GGUF, scripts/fetch_model.sh; skipped when missing): the q8 cache's
/// distance from the f16 cache over 32 greedy steps (docs/kv.md quotes the output).
#[test]
fn q8_cache_distance_on_smollm2() {
    let cache = std::env::var_os("TL_CACHE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/tl"));
    let path = cache.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if !path.is_file() {
        assert!(std::env::var_os("TL_REQUIRE_MODEL").is_none(), "{} is missing", path.display());
        eprintln!("SKIPPED: {} is missing", path.display());
        return;
    }
    let g = tl_core::Gguf::open(&path).expect("gguf");
    let tok = tl_core::Tokenizer::from_gguf(&g).expect("tokenizer");
    let texts = [
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>user\nWrite a short poem about the sea.<|im_end|>\n<|im_start|>assistant\n",
        "The quick brown fox jumps over the lazy dog. Once upon a time, in a small village,",
        &"A key-value cache stores the keys and values of every past token. ".repeat(12),
    ];
    let refs: Vec<RefPrompt> = texts
        .iter()
        .map(|t| RefPrompt {
            text: t.chars().take(40).collect(),
            ids: tok.encode(t).expect("encode"),
            last_logits: vec![],
            tolerance: 0.0,
            greedy: vec![],
            margins: vec![],
        })
        .collect();
    let (worst, same, common) = q8_distance(&path, &refs, 32, "SmolLM2-135M-Q4_1");
    eprintln!(
        "SmolLM2: max |logit diff| {worst:.3e}; {same} of {} greedy runs equal; shortest common prefix {common}",
        refs.len()
    );
    assert!(worst < 2.0, "q8 moves SmolLM2's logits by {worst}");
}

#[test]
fn a_memory_budget_buys_about_twice_the_blocks_of_q8() {
    // The runner sizes a budgeted pool by the backend's own bytes per block.
    let blocks = |kv: &str| {
        let mut cfg = engine_kv(0, Weights::Native, kv);
        cfg.kv.n_blocks = None;
        cfg.kv.memory_bytes = 64 << 10; // below what max_seqs x context would ask for
        let r = tl_core::ModelRunner::load(&fixture("tiny-llama"), &cfg).expect("load");
        let n = r.pool().lock().expect("pool").n_blocks();
        n
    };
    let (f16, q8) = (blocks(F16), blocks(Q8));
    eprintln!("64 KiB holds {f16} f16 blocks, {q8} q8 blocks");
    // head_dim 16 here: (16 + 2) / 32 = 0.5625 of the bytes, 1.78x the blocks.
    assert!(q8 as f64 >= 1.7 * f16 as f64, "{q8} q8 blocks for {f16} f16 blocks");
}

#[test]
fn the_runner_reports_the_q8_pool_bytes() {
    let bytes = |kv: &str| load_path_kv(&fixture("tiny-llama"), 0, Weights::Native, kv).kv_pool_bytes().expect("bytes");
    // The same 256 blocks; head_dim 16: (16 + 2) / (2 * 16) of the f16 bytes.
    assert_eq!(bytes(Q8) * 32, bytes(F16) * 18);
}
