//! Tiny random BERTs (scripts/fixtures/make_tiny_bert.py) against transformers float32 and
//! sentence-transformers: hidden states, every pooling mode, the classification heads,
//! the tokenizer's ids; batch and thread invariance bit for bit; bad inputs refused.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tl_arch_bert::{embed, load, score, TextError, Texts};
use tl_core::{EncodeInput, EngineConfig, ForwardBatch, ModelRunner, RunnerError};
use tl_kv as _;
use tl_testkit::encoders::{check_text_invariance, f32s, reference_json, u32s};
use tl_testkit::max_abs_diff;

/// Hidden states and vectors are O(1); transformers' float32 (BLAS sums, its own erf and
/// LayerNorm) differs from tl's fixed-order sums by a few ulps per operation (8e-7 at
/// most on these fixtures).
const TOL: f32 = 5e-6;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn reference(dir: &Path) -> Value {
    reference_json(dir)
}

fn engine(threads: usize) -> EngineConfig {
    EngineConfig { threads, ..Default::default() }
}

#[test]
fn hidden_states_equal_transformers() {
    let dir = fixture("tiny-bert");
    let (runner, texts) = load(&dir, &engine(2)).unwrap();
    let cases = reference(&dir)["cases"].as_array().unwrap().clone();
    let toks: Vec<(Vec<u32>, Vec<u32>)> = cases.iter().map(|c| (u32s(&c["ids"]), u32s(&c["type_ids"]))).collect();
    // The tokenizer gives sentence-transformers' / transformers' ids, cut at 24.
    for (c, (ids, types)) in cases.iter().zip(&toks) {
        let got = match c.get("text") {
            Some(t) => texts.text(t.as_str().unwrap()).unwrap(),
            None => texts.pair(c["pair"][0].as_str().unwrap(), c["pair"][1].as_str().unwrap()).unwrap(),
        };
        assert_eq!((&got.ids, &got.type_ids), (ids, types), "tokens of {c}");
    }
    assert!(toks.iter().any(|t| t.0.len() == 24) && texts.max_seq_length() == 24, "a text is cut at max_seq_length");
    let inputs: Vec<EncodeInput<'_>> = toks.iter().map(|(i, t)| EncodeInput { ids: i, type_ids: Some(t) }).collect();
    let out = runner.encode(&inputs, true).unwrap();
    let mut worst = 0f32;
    for (c, o) in cases.iter().zip(&out) {
        worst = worst.max(max_abs_diff(o.hidden.as_ref().unwrap(), &f32s(&c["hidden"])));
    }
    eprintln!("hidden states: max |tl - transformers| = {worst:e}");
    assert!(worst <= TOL, "hidden states differ by {worst:e} > {TOL:e}");
    // The pair's type ids matter: all zeros gives other states.
    let (ids, _) = toks.last().unwrap();
    let zeros = runner.encode(&[EncodeInput::ids(ids)], true).unwrap();
    assert!(max_abs_diff(zeros[0].hidden.as_ref().unwrap(), &f32s(&cases.last().unwrap()["hidden"])) > 100.0 * TOL);
}

/// A copy of tiny-bert whose 1_Pooling turns on `keys`.
fn with_pooling(tmp: &Path, keys: &[&str]) -> PathBuf {
    let src = fixture("tiny-bert");
    let dir = tmp.join(keys.join("+"));
    std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
    for f in ["config.json", "model.safetensors", "modules.json", "sentence_bert_config.json", "tokenizer.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let mut cfg = serde_json::json!({"word_embedding_dimension": 36});
    for k in keys {
        cfg[*k] = Value::Bool(true);
    }
    std::fs::write(dir.join("1_Pooling/config.json"), cfg.to_string()).unwrap();
    dir
}

#[test]
fn every_pooling_mode_equals_sentence_transformers() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = reference(&fixture("tiny-bert"))["cases"].as_array().unwrap().clone();
    let texts: Vec<&str> = cases.iter().filter_map(|c| c["text"].as_str()).collect();
    let modes: [(&str, &[&str]); 7] = [
        ("cls", &["pooling_mode_cls_token"]),
        ("max", &["pooling_mode_max_tokens"]),
        ("mean", &["pooling_mode_mean_tokens"]),
        ("mean_sqrt_len", &["pooling_mode_mean_sqrt_len_tokens"]),
        ("weightedmean", &["pooling_mode_weightedmean_tokens"]),
        ("lasttoken", &["pooling_mode_lasttoken"]),
        ("cls+mean", &["pooling_mode_cls_token", "pooling_mode_mean_tokens"]),
    ];
    let mut seen: Vec<Vec<f32>> = Vec::new();
    for (name, keys) in modes {
        let (runner, tx) = load(&with_pooling(tmp.path(), keys), &engine(1)).unwrap();
        let info = runner.encoder_info().unwrap();
        assert_eq!((info.vector, info.normalized), (Some(36 * keys.len()), true), "{name}");
        let got = embed(&runner, &tx, &texts).unwrap();
        for (c, v) in cases.iter().filter(|c| c["text"].is_string()).zip(&got) {
            let want = f32s(&c["vectors"][name]);
            let d = max_abs_diff(v, &want);
            assert!(d <= TOL, "{name}: {:?} differs by {d:e}", c["text"]);
            let norm: f64 = v.iter().map(|&x| x as f64 * x as f64).sum();
            assert!((norm - 1.0).abs() < 1e-6, "{name}: normalised");
        }
        seen.push(got[2].clone());
    }
    // The modes are not the same vector under other names (but mean and mean_sqrt_len,
    // a scalar apart, are once normalised).
    for i in 0..seen.len() - 1 {
        for j in i + 1..seen.len() - 1 {
            if (i, j) == (2, 3) {
                continue;
            }
            assert!(max_abs_diff(&seen[i], &seen[j]) > 100.0 * TOL, "modes {i} and {j} agree");
        }
    }
}

#[test]
fn classification_heads_equal_transformers_and_cross_encoder() {
    for (name, want) in [("tiny-bert-cls", "logits"), ("tiny-bert-ce", "scores")] {
        let dir = fixture(name);
        let (runner, texts) = load(&dir, &engine(2)).unwrap();
        let info = *runner.encoder_info().unwrap();
        assert_eq!(info.vector, None, "{name}: a classifier without modules.json pools nothing");
        let cases = reference(&dir)["cases"].as_array().unwrap().clone();
        let pairs: Vec<(&str, &str)> =
            cases.iter().map(|c| (c["pair"][0].as_str().unwrap(), c["pair"][1].as_str().unwrap())).collect();
        let got = score(&runner, &texts, &pairs).unwrap();
        for (c, s) in cases.iter().zip(&got) {
            assert_eq!(
                texts.pair(c["pair"][0].as_str().unwrap(), c["pair"][1].as_str().unwrap()).unwrap().ids,
                u32s(&c["ids"])
            );
            let d = max_abs_diff(s, &f32s(&c[want]));
            assert!(d <= TOL, "{name}: {:?}: {s:?} vs {} ({d:e})", c["pair"], c[want]);
        }
        assert_eq!(info.scores, Some(if name == "tiny-bert-cls" { 2 } else { 1 }));
    }
}

#[test]
fn batch_and_thread_invariance_bit_for_bit() {
    check_text_invariance(&fixture("tiny-bert"), "They said: come and see the people, the water, the first day!", 40);
}

fn bad_batch(e: RunnerError, words: &str) {
    match e {
        RunnerError::BadBatch(m) => assert!(m.contains(words), "{m:?} lacks {words:?}"),
        e => panic!("expected a bad batch naming {words:?}, got {e}"),
    }
}

#[test]
fn bad_inputs_are_refused_with_clear_errors() {
    let dir = fixture("tiny-bert");
    let (runner, texts) = load(&dir, &engine(1)).unwrap();
    match embed(&runner, &texts, &["fine", ""]) {
        Err(TextError::Empty { index: 1 }) => {}
        r => panic!("empty text: {r:?}"),
    }
    bad_batch(
        runner.encode(&[EncodeInput::ids(&[2, 143, 3])], false).unwrap_err(),
        "input 0: token id 143 >= vocab_size 143",
    );
    bad_batch(
        runner.encode(&[EncodeInput::ids(&[2, 3]), EncodeInput::ids(&[])], false).unwrap_err(),
        "input 1: no tokens",
    );
    bad_batch(runner.encode(&[], false).unwrap_err(), "no inputs");
    bad_batch(
        runner.encode(&[EncodeInput::ids(&[5; 41])], false).unwrap_err(),
        "41 tokens, the model reads at most 40",
    );
    let types = [0, 2, 0];
    let input = EncodeInput { ids: &[2, 7, 3], type_ids: Some(&types) };
    bad_batch(runner.encode(&[input], false).unwrap_err(), "token type 2");
    let input = EncodeInput { ids: &[2, 7, 3], type_ids: Some(&types[..2]) };
    bad_batch(runner.encode(&[input], false).unwrap_err(), "2 type ids for 3 tokens");
    // An encoder runs no forward steps.
    let mut runner = runner;
    let blocks = [0u32];
    bad_batch(runner.forward(&ForwardBatch::single(&[2, 3], 0, &blocks)).unwrap_err(), "encoder");
    // A decoder answers no encode.
    let tiny_llama = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../arch-llama/tests/fixtures/tiny-llama");
    if let Ok(dec) = ModelRunner::load(&tiny_llama, &engine(1)) {
        bad_batch(dec.encode(&[EncodeInput::ids(&[1, 2])], false).unwrap_err(), "not an encoder");
    }
}

#[test]
fn broken_sentence_transformers_files_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let err = |dir: &Path| load(dir, &engine(1)).err().map(|e| e.to_string()).unwrap_or_default();
    let dir = with_pooling(tmp.path(), &["pooling_mode_mean_tokens"]);
    std::fs::remove_file(dir.join("1_Pooling/config.json")).unwrap();
    let e = err(&dir);
    assert!(e.contains("1_Pooling/config.json") && e.contains("missing"), "{e}");
    let dir = with_pooling(&tmp.path().join("b"), &[]);
    let e = err(&dir);
    assert!(e.contains("no pooling mode"), "{e}");
    let dir = with_pooling(&tmp.path().join("c"), &["pooling_mode_mean_tokens"]);
    let dense = r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
        {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
        {"idx":2,"name":"2","path":"2_Dense","type":"sentence_transformers.models.Dense"}]"#;
    std::fs::write(dir.join("modules.json"), dense).unwrap();
    let e = err(&dir);
    assert!(e.contains("2_Dense") && e.contains("not one tl runs"), "{e}");
    let dir = with_pooling(&tmp.path().join("d"), &["pooling_mode_mean_tokens"]);
    let cfg = std::fs::read_to_string(dir.join("config.json")).unwrap().replace("\"gelu\"", "\"relu\"");
    std::fs::write(dir.join("config.json"), cfg).unwrap();
    let e = err(&dir);
    assert!(e.contains("hidden_act"), "{e}");
    // Without modules.json a BertModel pools by the mean, unnormalised (sentence-transformers' default).
    let dir = with_pooling(&tmp.path().join("e"), &["pooling_mode_mean_tokens"]);
    std::fs::remove_file(dir.join("modules.json")).unwrap();
    let (runner, _) = load(&dir, &engine(1)).unwrap();
    assert_eq!((runner.encoder_info().unwrap().vector, runner.encoder_info().unwrap().normalized), (Some(36), false));
}

#[test]
fn texts_refuse_a_max_seq_length_past_the_positions() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = with_pooling(tmp.path(), &["pooling_mode_mean_tokens"]);
    std::fs::write(dir.join("sentence_bert_config.json"), r#"{"max_seq_length": 41}"#).unwrap();
    let e = load(&dir, &engine(1)).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("max_seq_length") && e.contains("2..=40"), "{e}");
    let _ = Texts::load; // the type the lead's code holds
}
