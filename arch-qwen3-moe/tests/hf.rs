//! Qwen3-MoE against Hugging Face's float32 forward (tests/fixtures, written by
//! scripts/fixtures/make_tiny_qwen3_moe.py: 8 experts, top 3; renormalised with a dense
//! first layer, and raw with a dense layer after the sparse one), the batch, chunk,
//! thread and `--weights f32` invariances bit for bit, and bad files and configs refused
//! with the field or tensor named.

// Name the plugin crate so its registrations ("qwen3_moe") are linked.
use tl_arch_qwen3_moe as _;

use tl_core::Weights;
use tl_testkit::*;

tl_testkit::fixtures!();

const NAMES: [&str; 2] = ["tiny-qwen3-moe", "tiny-qwen3-moe-raw"];

#[test]
fn tiny_qwen3_moe_matches_hf_normalised_and_raw() {
    for name in NAMES {
        let mut r = load(name, 0, Weights::Native);
        assert_eq!(r.config().arch, "qwen3_moe", "model_type \"qwen3_moe\" selects the architecture");
        let refs = reference(name);
        check_hf(&mut r, &refs, name);
        check_greedy(&mut r, &refs, name);
    }
}

#[test]
fn batches_chunks_threads_and_f32_weights_do_not_change_qwen3_moe_logits() {
    // Chunks that split a prompt's tokens between steps change which tokens share each
    // expert's product; a batch of all prompts routes them together.
    for name in NAMES {
        check_invariance(&fixture(name), &reference(name), &[vec![3, 2, 5], vec![7, 1]]);
    }
}

/// A copy of fixture `name` with its config.json edited by `edit`.
fn edited(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> tempfile::TempDir {
    with_config(&fixture(name), edit)
}

#[test]
fn bad_expert_configs_are_refused_naming_the_field_or_tensor() {
    let name = NAMES[0];
    let top = load_error(edited(name, |c| c["num_experts_per_tok"] = 9.into()).path());
    assert!(top.contains("num_experts_per_tok") && top.contains('9'), "{top}");
    // Fewer experts than the file holds: the router's shape names the mismatch.
    let fewer = load_error(edited(name, |c| c["num_experts"] = 4.into()).path());
    assert!(fewer.contains("mlp.gate.weight"), "{fewer}");
    // More experts than the file holds: the first missing tensor is named.
    let more = load_error(edited(name, |c| c["num_experts"] = 16.into()).path());
    assert!(more.contains("model.layers.1.mlp.gate.weight") || more.contains("experts.8"), "{more}");
    let layers = load_error(edited(name, |c| c["mlp_only_layers"] = serde_json::json!([5])).path());
    assert!(layers.contains("mlp_only_layers"), "{layers}");
    let step = load_error(edited(name, |c| c["decoder_sparse_step"] = 0.into()).path());
    assert!(step.contains("decoder_sparse_step"), "{step}");
}

#[test]
fn a_missing_expert_tensor_is_named() {
    // Rewrite the safetensors without expert 5's up projection of layer 2.
    let dir = edited(NAMES[0], |_| {});
    let path = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&path).expect("read");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).expect("header JSON");
    let gone = "model.layers.2.mlp.experts.5.up_proj.weight";
    let map = header.as_object_mut().expect("object");
    let [begin, end] = [0, 1].map(|i| map[gone]["data_offsets"][i].as_u64().expect("offset") as usize);
    map.remove(gone);
    let data = &bytes[8 + n..];
    let mut kept = Vec::with_capacity(data.len());
    kept.extend_from_slice(&data[..begin]);
    kept.extend_from_slice(&data[end..]);
    // Tensors after the removed one move down by its size, so the ranges still tile.
    for (k, v) in map.iter_mut() {
        if k == "__metadata__" {
            continue;
        }
        for i in 0..2 {
            let o = v["data_offsets"][i].as_u64().expect("offset") as usize;
            if o >= end {
                v["data_offsets"][i] = ((o - (end - begin)) as u64).into();
            }
        }
    }
    let head = serde_json::to_vec(&header).expect("JSON");
    let mut out = (head.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&head);
    out.extend_from_slice(&kept);
    std::fs::write(&path, out).expect("write");
    let err = load_error(dir.path());
    assert!(err.contains(gone), "{err}");
}

#[test]
fn the_gguf_of_the_same_weights_equals_the_safetensors_bit_for_bit() {
    // llama.cpp's layout: the router as `ffn_gate_inp`, the experts stacked in
    // `ffn_{gate,up,down}_exps` (served per expert without a copy), the config from the
    // `qwen3moe.*` metadata; the dense first layer found by its missing router.
    let name = NAMES[0];
    let path = fixture(name).join("model.gguf");
    let mut g = load_path(&path, 0, Weights::Native);
    let c = g.config().json().clone();
    assert_eq!((c["tl_arch"].as_str(), c["num_experts"].as_u64()), (Some("qwen3_moe"), Some(8)));
    assert_eq!((c["num_experts_per_tok"].as_u64(), c["moe_intermediate_size"].as_u64()), (Some(3), Some(32)));
    assert_eq!((c["norm_topk_prob"].as_bool(), &c["mlp_only_layers"]), (Some(true), &serde_json::json!([0])));
    let refs = reference(name);
    let want = alone(&mut load(name, 0, Weights::Native), &refs);
    check_same_bits(&mut g, &refs, &want, "GGUF");
    check_same_bits(&mut load_path(&path, 0, Weights::F32), &refs, &want, "GGUF, --weights f32");
    check_hf(&mut g, &refs, "tiny-qwen3-moe GGUF");
}

#[test]
fn an_mxfp4_gguf_computes_on_its_blocks_and_equals_their_f32_widening() {
    // llama-quantize MXFP4_MOE's file (scripts/fixtures/make_mxfp4_gguf.sh): the stacked
    // experts MXFP4 (an e8m0 exponent and 32 e2m1 codes a block), attention Q8_0. Kept as
    // stored, it equals `--weights f32` (gguf-py's values, quant/tests/blocks.rs) bit for
    // bit, and the batch, chunk, thread and decode invariances hold on it.
    let name = NAMES[0];
    let path = fixture(name).join("model.MXFP4_MOE.gguf");
    let store = tl_core::Gguf::open(&path).expect("open");
    let info = tl_core::WeightStore::info(&store, "blk.1.ffn_gate_exps.weight").expect("stacked experts");
    assert_eq!(info.dtype, tl_core::DType::Other("MXFP4".into()));
    let refs = reference(name);
    check_invariance(&path, &refs, &[vec![3, 2, 5], vec![7, 1]]);
    // 4-bit experts move the logits, but not far: still this model (1.7-2.0 of 12-20).
    let mut r = load_path(&path, 0, Weights::Native);
    for p in &refs {
        let diff = max_abs_diff(&run_in_steps(&mut r, &p.ids, &[]), &p.last_logits);
        eprintln!("MXFP4_MOE vs HF float32: max |logit diff| {diff:.4} (logits up to {:.2})", max_abs(&p.last_logits));
        assert!(diff < 0.25 * max_abs(&p.last_logits), "{diff}");
    }
}

#[test]
fn mxfp4_data_shorter_than_its_tensor_claims_is_refused_naming_it() {
    // The last tensor's 17-byte blocks cut short: the reader sizes MXFP4 by its own facts
    // (Candle's type list lacks it), so the cut is found at open, naming the tensor.
    let src = std::fs::read(fixture(NAMES[0]).join("model.MXFP4_MOE.gguf")).expect("read");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("cut.gguf");
    std::fs::write(&path, &src[..src.len() - 40]).expect("write");
    let err = load_error(&path);
    assert!(err.contains("blk.") && err.contains("runs past the end of the file"), "{err}");
}

#[test]
fn q8_activations_keep_the_invariances_of_a_mixture_of_experts() {
    // The MXFP4_MOE file: Q8_0 attention runs on int8 rows, the MXFP4 experts and the
    // router stay exact; tokens grouped per expert still give each row its own bits.
    let path = fixture(NAMES[0]).join("model.MXFP4_MOE.gguf");
    let refs = reference(NAMES[0]);
    let q8 = check_invariance_with(&path, &refs, &[vec![3, 2, 5], vec![7, 1]], tl_core::Activations::Q8);
    let exact = alone(&mut load_path(&path, 0, Weights::Native), &refs);
    assert_ne!(bits(&q8[0]), bits(&exact[0]), "the mode changed nothing");
}

#[test]
fn q8_cache_keeps_the_invariances_on_qwen3_moe() {
    for name in NAMES {
        check_invariance_kv(&fixture(name), &reference(name), &[vec![3, 2, 5], vec![7, 1]], Q8);
        q8_distance(&fixture(name), &reference(name), 16, name);
    }
}
