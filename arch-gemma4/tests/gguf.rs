//! Gemma 4 GGUF files as llama.cpp's own converter writes them (tests/fixtures/*/model.gguf,
//! scripts/fixtures/make_gemma4_gguf.sh: convert_hf_to_gguf.py of the llama-cpp-python
//! 0.3.36 sdist over the F32 fixtures, `--outtype f32`): the metadata gives the
//! checkpoint's config (per-layer inputs, shared KV, both head sizes, proportional RoPE
//! from `rope_freqs`, `attention_k_eq_v` from the missing `attn_v`, the double-wide MLP
//! from the per-layer `feed_forward_length`), and the converter keeps every value, so the
//! file gives the safetensors checkpoint's logits and greedy runs bit for bit. Bad files
//! are refused naming the key or tensor.

use tl_arch_gemma4::Gemma4Config;
use tl_core::Weights;
use tl_testkit::{alone, check_same_bits, gguf_error, gguf_with_u32_meta, greedy, load_path, reference_at};

tl_testkit::fixtures!();

const NAMES: [&str; 2] = ["tiny-gemma4", "tiny-gemma4-kv"];

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
