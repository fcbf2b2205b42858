//! The real sentence-transformers all-MiniLM-L6-v2 (pulled through tl-hub from its PyPI
//! package) against sentence-transformers' `encode(normalize_embeddings=True)` on 300
//! sentences (scripts/fixtures/make_minilm_reference.py): the same token ids (cut at its
//! max_seq_length 256, several sentences past 512 tokens, non-ASCII scripts), normalised
//! vectors within 1e-5 per component with cosine >= 0.99999; and a sentence's vector the
//! same bits alone, among 31 others, on 1 and 2 threads.

use std::path::PathBuf;

use serde_json::Value;
use tl_arch_bert::{embed, load};
use tl_core::{EncodeInput, EngineConfig};
use tl_kv as _;

const COMPONENT_TOL: f32 = 1e-5;
const MIN_COSINE: f64 = 0.99999;

/// The model directory, or None (loudly) when it cannot be pulled and TL_REQUIRE_MODEL is
/// unset. Pulled once per process: two concurrent pulls of one catalog entry share
/// tl-hub's download path and trip over each other.
fn model() -> Option<PathBuf> {
    static DIR: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);
    let mut dir = DIR.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(d) = dir.as_ref() {
        return Some(d.clone());
    }
    match tl_hub::pull(&tl_hub::HubConfig { progress: false, ..tl_hub::HubConfig::from_env() }, "all-minilm:l6-v2") {
        Ok(p) => {
            *dir = Some(p.clone());
            Some(p)
        }
        Err(e) => {
            assert!(
                std::env::var_os("TL_REQUIRE_MODEL").is_none(),
                "TL_REQUIRE_MODEL is set but all-minilm:l6-v2 could not be pulled: {e}"
            );
            eprintln!("\nSKIPPED: all-minilm:l6-v2 could not be pulled ({e})\n");
            None
        }
    }
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/minilm").join(name)
}

fn reference() -> (Value, Vec<Vec<f32>>) {
    let json: Value = serde_json::from_str(&std::fs::read_to_string(fixture("sentences.json")).unwrap()).unwrap();
    let raw = std::fs::read(fixture("vectors.f32")).unwrap();
    let dim = json["dim"].as_u64().unwrap() as usize;
    let floats: Vec<f32> = raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    (json, floats.chunks_exact(dim).map(<[f32]>::to_vec).collect())
}

fn engine(threads: usize) -> EngineConfig {
    EngineConfig { threads, ..Default::default() }
}

#[test]
fn all_minilm_l6_v2_equals_sentence_transformers() {
    let Some(dir) = model() else { return };
    let (json, want) = reference();
    let sentences: Vec<&str> = json["sentences"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let (runner, texts) = load(&dir, &engine(2)).unwrap();
    assert_eq!(texts.max_seq_length(), 256);
    let info = runner.encoder_info().unwrap();
    assert_eq!((info.vector, info.normalized, info.max_tokens), (Some(384), true, 512));
    // The tokens first: a wrong cut or normaliser shows here, by sentence.
    let mut cut = 0;
    for (i, (s, ids)) in sentences.iter().zip(json["ids"].as_array().unwrap()).enumerate() {
        let want: Vec<u32> = ids.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        let got = texts.text(s).unwrap().ids;
        assert_eq!(got, want, "sentence {i} ({s:?}) tokenizes differently");
        cut += usize::from(json["untruncated_lengths"][i].as_u64().unwrap() > 512);
    }
    assert!(cut >= 2, "the reference has sentences past 512 tokens");
    let mut got = Vec::new();
    for chunk in sentences.chunks(32) {
        got.extend(embed(&runner, &texts, chunk).unwrap());
    }
    let (mut worst, mut worst_cos) = (0f32, 1f64);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let d = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        let dot: f64 = g.iter().zip(w).map(|(&a, &b)| a as f64 * b as f64).sum();
        let norms: f64 = [g, w].iter().map(|v| v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt()).product();
        let cos = dot / norms;
        assert!(d <= COMPONENT_TOL && cos >= MIN_COSINE, "sentence {i}: max |diff| {d:e}, cosine {cos}");
        worst = worst.max(d);
        worst_cos = worst_cos.min(cos);
    }
    eprintln!("all-MiniLM-L6-v2, {} sentences: max |diff| {worst:e}, min cosine {worst_cos}", got.len());
}

#[test]
fn all_minilm_l6_v2_is_batch_and_thread_invariant() {
    let Some(dir) = model() else { return };
    let (json, _) = reference();
    let sentences: Vec<&str> = json["sentences"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let (one, texts) = load(&dir, &engine(1)).unwrap();
    let (two, _) = load(&dir, &engine(2)).unwrap();
    // 32 sentences of different lengths (1 to 256 tokens), the probe (a non-ASCII one) at 20.
    let toks: Vec<Vec<u32>> = sentences[..64].iter().step_by(2).map(|s| texts.text(s).unwrap().ids).collect();
    let probe = 20;
    assert!(toks.iter().map(Vec::len).collect::<std::collections::BTreeSet<_>>().len() > 16);
    let inputs: Vec<EncodeInput<'_>> = toks.iter().map(|t| EncodeInput::ids(t)).collect();
    let alone = one.encode(&inputs[probe..=probe], false).unwrap().remove(0).vector.unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for runner in [&one, &two] {
        let among = runner.encode(&inputs, false).unwrap();
        assert_eq!(bits(among[probe].vector.as_ref().unwrap()), bits(&alone));
        let alone_here = runner.encode(&inputs[3..=3], false).unwrap().remove(0).vector.unwrap();
        assert_eq!(bits(among[3].vector.as_ref().unwrap()), bits(&alone_here));
    }
}
