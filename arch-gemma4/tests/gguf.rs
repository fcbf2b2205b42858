//! Gemma 4 GGUF files as llama.cpp's own converter writes them (tests/fixtures/*/model.gguf,
//! scripts/fixtures/make_gemma4_gguf.sh: convert_hf_to_gguf.py of the llama-cpp-python
//! 0.3.36 sdist over the F32 fixtures, `--outtype f32`): the metadata gives the
//! checkpoint's config (per-layer inputs, shared KV, both head sizes, proportional RoPE
//! from `rope_freqs`, `attention_k_eq_v` from the missing `attn_v`, the double-wide MLP
//! from the per-layer `feed_forward_length`), and the converter keeps every value, so the
//! file gives the safetensors checkpoint's logits and greedy runs bit for bit, the MoE's
//! stacked experts included; a Q8_0 MoE file is held to HF over its dequantized blocks.
//! Bad files are refused naming the key or tensor.

use tl_arch_gemma4::Gemma4Config;
use tl_core::Weights;
use tl_core::{Gguf, WeightStore};
use tl_testkit::{
    alone, check_invariance, check_same_bits, gguf_error, gguf_with_u32_meta, greedy, load_path, max_abs_diff,
    reference_at, run_in_steps,
};

tl_testkit::fixtures!();

const NAMES: [&str; 3] = ["tiny-gemma4", "tiny-gemma4-kv", "tiny-gemma4-moe"];

#[test]
fn the_gemma4_metadata_gives_the_checkpoints_config() {
    for name in NAMES {
        let st = load_path(&fixture(name), 0, Weights::Native);
        let g = load_path(&fixture(name).join("model.gguf"), 0, Weights::Native);
        let typed = |r: &tl_core::ModelRunner| r.config().arch_config::<Gemma4Config>().expect("typed").clone();
        assert_eq!(typed(&g), typed(&st), "{name}: the parsed config");
        assert_eq!(g.config().json()["tl_tokenizer"], "byte", "{name}: no vocabulary in the file");
        let (a, b) = (g.kv_layout(), st.kv_layout());
        assert_eq!((a.n_layers(), a.owning_layers(), a.n_groups()), (b.n_layers(), b.owning_layers(), b.n_groups()));
    }
}

#[test]
fn the_f32_gemma4_gguf_equals_the_safetensors_bit_for_bit() {
    for name in NAMES {
        let refs = reference_at(&fixture(name));
        let mut st = load_path(&fixture(name), 0, Weights::Native);
        let mut g = load_path(&fixture(name).join("model.gguf"), 0, Weights::Native);
        let want = alone(&mut st, &refs);
        check_same_bits(&mut g, &refs, &want, &format!("{name}: GGUF"));
        let longest = refs.iter().max_by_key(|p| p.ids.len()).expect("prompts");
        assert_eq!(greedy(&mut g, &longest.ids, 16), greedy(&mut st, &longest.ids, 16), "{name}: greedy run");
    }
}

#[test]
fn a_q8_0_gemma4_moe_gguf_matches_hf_over_its_blocks_and_keeps_the_invariances() {
    // gguf-py's Q8_0 blocks, the stacked experts among them (served per expert from block
    // rows), against HF over the same dequantized values with f16 keys and values
    // (reference.Q8_0.json; Q8_0 itself
    // moves these logits by 0.5 to 2, so the checkpoint's reference cannot tell) within
    // each prompt's parity tolerance; as stored it equals `--weights f32` bit for bit,
    // with every testkit invariance.
    let dir = fixture("tiny-gemma4-moe");
    let path = dir.join("model.Q8_0.gguf");
    let store = Gguf::open(&path).expect("open");
    for experts in ["ffn_gate_up_exps", "ffn_down_exps"] {
        let info = store.info(&format!("blk.0.{experts}.weight")).expect("stacked experts");
        assert_eq!(info.dtype, tl_core::DType::Other("Q8_0".into()), "{experts}");
    }
    let text = std::fs::read_to_string(dir.join("reference.Q8_0.json")).expect("reference.Q8_0.json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let mut r = load_path(&path, 0, Weights::Native);
    for p in json["prompts"].as_array().expect("prompts") {
        let nums = |k: &str| p[k].as_array().expect(k).iter().map(|x| x.as_f64().expect("number")).collect::<Vec<_>>();
        let ids: Vec<u32> = nums("ids").into_iter().map(|x| x as u32).collect();
        // tl's pool keeps K and V in f16: the reference with them rounded so.
        let hf: Vec<f32> = nums("f16_kv_last_logits").into_iter().map(|x| x as f32).collect();
        let tolerance = p["tolerance"].as_f64().expect("tolerance") as f32;
        let diff = max_abs_diff(&run_in_steps(&mut r, &ids, &[]), &hf);
        eprintln!("Q8_0 ({} tokens): max |ours - HF| = {diff:.3e}", ids.len());
        assert!(diff <= tolerance, "Q8_0 ({} tokens): {diff} over {tolerance}", ids.len());
    }
    check_invariance(&path, &reference_at(&dir), &[vec![3, 2, 5]]);
}

#[test]
fn bad_gemma4_gguf_files_are_refused_naming_the_key_or_tensor() {
    let src = std::fs::read(fixture(NAMES[0]).join("model.gguf")).expect("read");
    // No layer left to own the KV the shared ones read.
    let err = gguf_error(&gguf_with_u32_meta(src.clone(), "gemma4.attention.shared_kv_layers", 6));
    assert!(err.contains("gemma4.attention.shared_kv_layers"), "{err}");
    // A partial RoPE on the sliding layers.
    let err = gguf_error(&gguf_with_u32_meta(src.clone(), "gemma4.rope.dimension_count_swa", 8));
    assert!(err.contains("gemma4.rope.dimension_count_swa"), "{err}");
    // A key head size the value heads do not share.
    let err = gguf_error(&gguf_with_u32_meta(src.clone(), "gemma4.attention.key_length_swa", 8));
    assert!(err.contains("key_length_swa"), "{err}");
    // A sliding window the config cannot take.
    let err = gguf_error(&gguf_with_u32_meta(src.clone(), "gemma4.attention.sliding_window", 0));
    assert!(err.contains("sliding_window"), "{err}");
    // rope_freqs other than 1 for the rotated pairs then 1e30: its 4 ones, then the first
    // 1e30 made 2.
    let (one, big) = (1f32.to_le_bytes(), 1e30f32.to_le_bytes());
    let pattern: Vec<u8> = [one, one, one, one, big].concat();
    let at = src.windows(pattern.len()).position(|w| w == pattern).expect("rope_freqs data") + 16;
    let mut bad = src.clone();
    bad[at..at + 4].copy_from_slice(&2f32.to_le_bytes());
    let err = gguf_error(&bad);
    assert!(err.contains("rope_freqs.weight"), "{err}");
}
