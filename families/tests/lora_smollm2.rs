//! A LoRA adapter on the real SmolLM2-135M-Instruct (the Q4_1 GGUF scripts/fetch_model.sh
//! fetches) equals transformers + peft in float32 on the same file
//! (fixtures/lora/smollm2-reference.json, made by
//! scripts/fixtures/make_smollm2_lora_reference.py through transformers' own GGUF reader):
//! the adapted last logits at the reference's 64 largest within the tolerance rule, the
//! base's there too, and the greedy run until a near-tie. The adapter (rank 8 on every
//! q/k/v/o/gate/up/down of 30 layers, 10 MB in f32) is not committed: both sides compute
//! its values from one formula, exactly (`value`), and the test writes it as a PEFT
//! directory.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tl_core::{Applied, ForwardBatch, ForwardSeq, ModelRunner, Weights};
use tl_families as _;
use tl_testkit::{alloc, argmax, load_path, release};

const MODULES: [&str; 7] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"];
const RANK: usize = 8;

/// The cached SmolLM2 file, or `None` (loudly) when missing and TL_REQUIRE_MODEL is unset.
fn smollm2() -> Option<PathBuf> {
    let cache = std::env::var_os("TL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/tl"));
    let path = cache.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if path.is_file() {
        return Some(path);
    }
    assert!(std::env::var_os("TL_REQUIRE_MODEL").is_none(), "{} missing: run scripts/fetch_model.sh", path.display());
    eprintln!("SKIPPED: {} missing (scripts/fetch_model.sh)", path.display());
    None
}

/// The adapter's matrix `which` of module `module` (index in MODULES) in `layer`, `n`
/// values row-major: `k * 2^-shift` for an integer k in -128..127 mixed from the index
/// (the reference script's `value`, the same integer arithmetic).
fn value(layer: u64, module: u64, b: bool, n: usize) -> Vec<f32> {
    let salt = layer * 40503 + module * 977 + if b { 7919 } else { 0 };
    let scale = if b { 2f32.powi(-10) } else { 2f32.powi(-11) };
    (0..n as u64)
        .map(|i| {
            let h = (i.wrapping_mul(2_654_435_761).wrapping_add(salt)) & 0xFFFF_FFFF;
            let h = h.wrapping_mul(2_246_822_519) & 0xFFFF_FFFF;
            ((h >> 24) as i64 - 128) as f32 * scale
        })
        .collect()
}

/// The adapter as peft saves it, into `dir`.
fn write_adapter(dir: &Path) {
    // SmolLM2-135M: hidden 576, 9 query heads and 3 KV heads of 64, MLP 1536, 30 layers.
    let (d, kv, i) = (576, 192, 1536);
    let shapes = [(d, d), (d, kv), (d, kv), (d, d), (d, i), (d, i), (i, d)];
    let mut tensors = Vec::new();
    for layer in 0..30u64 {
        for (m, (&name, &(inp, out))) in MODULES.iter().zip(&shapes).enumerate() {
            let group = if m < 4 { "self_attn" } else { "mlp" };
            let stem = format!("base_model.model.model.layers.{layer}.{group}.{name}");
            let bytes = |v: Vec<f32>| v.into_iter().flat_map(f32::to_le_bytes).collect::<Vec<u8>>();
            tensors.push((
                format!("{stem}.lora_A.weight"),
                vec![RANK, inp],
                bytes(value(layer, m as u64, false, RANK * inp)),
            ));
            tensors.push((
                format!("{stem}.lora_B.weight"),
                vec![out, RANK],
                bytes(value(layer, m as u64, true, out * RANK)),
            ));
        }
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(n, s, b)| {
            (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b).expect("view"))
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("adapter_model.safetensors")).expect("write");
    let cfg = json!({"peft_type": "LORA", "r": RANK, "lora_alpha": 16, "use_rslora": false, "bias": "none",
                     "target_modules": MODULES, "lora_dropout": 0.0});
    std::fs::write(dir.join("adapter_config.json"), cfg.to_string()).expect("config");
}

/// Logits after each position of `tokens` is fed (one step), the last row.
fn last(r: &mut ModelRunner, tokens: &[u32], adapter: Option<Applied<'_>>) -> Vec<f32> {
    let blocks = alloc(r, tokens.len());
    let seq = ForwardSeq { tokens, start: 0, blocks: &blocks, adapter };
    let out = r.forward(&ForwardBatch { seqs: vec![seq] }).expect("forward").data;
    release(r, &blocks);
    out
}

fn nums(v: &Value) -> Vec<f64> {
    v.as_array().expect("numbers").iter().map(|x| x.as_f64().expect("number")).collect()
}

#[test]
fn an_adapter_on_smollm2_equals_transformers_and_peft() {
    let Some(gguf) = smollm2() else { return };
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lora/smollm2-reference.json");
    let reference: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("reference")).expect("JSON");
    let dir = tempfile::tempdir().expect("tempdir");
    write_adapter(dir.path());
    let mut r = load_path(&gguf, 2, Weights::Native);
    let adapter = r.load_adapter("smollm2", dir.path()).expect("the adapter");
    let applied = Applied { adapter: &adapter, scale: 1.0 };
    for p in reference["prompts"].as_array().expect("prompts") {
        let text = p["text"].as_str().expect("text");
        let ids: Vec<u32> = nums(&p["ids"]).into_iter().map(|x| x as u32).collect();
        let top: Vec<usize> = nums(&p["top_ids"]).into_iter().map(|x| x as usize).collect();
        let tol = p["tolerance"].as_f64().expect("tolerance");
        let ours = last(&mut r, &ids, Some(applied));
        let base = last(&mut r, &ids, None);
        for (what, row, want) in
            [("adapted", &ours, nums(&p["top_logits"])), ("base", &base, nums(&p["base_top_logits"]))]
        {
            let diff = top.iter().zip(&want).map(|(&i, &w)| (f64::from(row[i]) - w).abs()).fold(0.0, f64::max);
            assert!(diff <= tol, "{text:?}: {what} logits: max |tl - transformers| = {diff} > {tol}");
        }
        let moved = top.iter().map(|&i| (ours[i] - base[i]).abs()).fold(0.0f32, f32::max);
        assert!(f64::from(moved) > 10.0 * tol, "{text:?}: the adapter moved the logits by only {moved}");
        // Greedy, one token a step from a fresh prefill each time (as the reference ran).
        let (want, margins) = (nums(&p["greedy"]["tokens"]), nums(&p["greedy"]["margins"]));
        let mut seq = ids.clone();
        for (k, (&w, &margin)) in want.iter().zip(&margins).enumerate() {
            let t = argmax(&last(&mut r, &seq, Some(applied)));
            if t != w as u32 {
                assert!(margin < tol, "{text:?}: greedy step {k}: tl {t}, transformers {w} (margin {margin})");
                break;
            }
            seq.push(t);
        }
    }
}
