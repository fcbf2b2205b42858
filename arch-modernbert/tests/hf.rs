//! Tiny random ModernBERTs (scripts/fixtures/make_tiny_modernbert.py) against transformers
//! float32 and sentence-transformers: hidden states (global and sliding-window layers,
//! inputs past the window), the pooled vectors, both classifier poolings and biases on and
//! off; transformers 5's config form read to the same bits as the Hub's; batch and thread
//! invariance bit for bit; bad configs refused naming the field.

use serde_json::{json, Value};
use tl_arch_modernbert::{embed, score};
use tl_core::{EncodeInput, ModelRunner};
use tl_kv as _;
use tl_testkit::encoders::{cases, check_text_invariance, edited, f32s, load_encoder, refusal, u32s};
use tl_testkit::{bits, load_error, max_abs_diff};

/// arch-bert's tolerance: transformers' float32 (BLAS sums, its own erf, LayerNorm and
/// RoPE) against tl's fixed-order sums, a few ulps per operation on O(1) values.
const TOL: f32 = 5e-6;

tl_testkit::fixtures!();

fn hidden_of(runner: &ModelRunner, cases: &[Value]) -> Vec<Vec<f32>> {
    let ids: Vec<Vec<u32>> = cases.iter().map(|c| u32s(&c["ids"])).collect();
    let inputs: Vec<EncodeInput<'_>> = ids.iter().map(|i| EncodeInput::ids(i)).collect();
    runner.encode(&inputs, true).unwrap().into_iter().map(|e| e.hidden.unwrap()).collect()
}

#[test]
fn hidden_states_and_vectors_equal_transformers() {
    let dir = fixture("tiny-modernbert");
    let (runner, texts) = load_encoder(&dir, 2);
    let cases = cases(&dir);
    for c in &cases {
        let got = match c.get("text") {
            Some(t) => texts.text(t.as_str().unwrap()).unwrap(),
            None => texts.pair(c["pair"][0].as_str().unwrap(), c["pair"][1].as_str().unwrap()).unwrap(),
        };
        assert_eq!(got.ids, u32s(&c["ids"]), "tokens of {c}");
    }
    // Past the local window (+-4) and past max_seq_length's cut.
    assert!(cases.iter().any(|c| c["ids"].as_array().unwrap().len() == 24));
    let hidden = hidden_of(&runner, &cases);
    let worst = cases.iter().zip(&hidden).map(|(c, h)| max_abs_diff(h, &f32s(&c["hidden"]))).fold(0.0, f32::max);
    eprintln!("hidden states: max |tl - transformers| = {worst:e}");
    assert!(worst <= TOL, "hidden states differ by {worst:e}");
    let with_text: Vec<&Value> = cases.iter().filter(|c| c["text"].is_string()).collect();
    let strs: Vec<&str> = with_text.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let info = *runner.encoder_info().unwrap();
    assert_eq!((info.vector, info.normalized, info.type_vocab), (Some(36), true, 0));
    for (c, v) in with_text.iter().zip(embed(&runner, &texts, &strs).unwrap()) {
        let d = max_abs_diff(&v, &f32s(&c["vector"]));
        assert!(d <= TOL, "{:?}: vector differs by {d:e}", c["text"]);
    }
    // A pair's type ids (1 for the second text) are not read: ModernBERT has no types.
    let pair = texts.pair("how hot is the water", "the water is hot").unwrap();
    assert!(pair.type_ids.contains(&1));
    let typed = runner.encode(&[pair.input()], true).unwrap().remove(0).hidden.unwrap();
    let plain = runner.encode(&[EncodeInput::ids(&pair.ids)], true).unwrap().remove(0).hidden.unwrap();
    assert_eq!(bits(&typed), bits(&plain));
}

#[test]
fn transformers_5_config_form_gives_the_same_bits() {
    let dir = fixture("tiny-modernbert");
    let cases = cases(&dir);
    let (hub, _) = load_encoder(&dir, 1);
    let tmp = edited(&dir, |c| {
        let o = c.as_object_mut().unwrap();
        for k in ["global_rope_theta", "local_rope_theta", "global_attn_every_n_layers"] {
            o.remove(k);
        }
        o.insert(
            "layer_types".into(),
            json!(["full_attention", "sliding_attention", "sliding_attention", "full_attention"]),
        );
        o.insert(
            "rope_parameters".into(),
            json!({"full_attention": {"rope_type": "default", "rope_theta": 160000.0},
                   "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
        );
    });
    let (t5, _) = load_encoder(tmp.path(), 1);
    for (a, b) in hidden_of(&hub, &cases).iter().zip(hidden_of(&t5, &cases)) {
        assert_eq!(bits(a), bits(&b));
    }
    // And the window matters: a global model is another model.
    let tmp = edited(&dir, |c| c["global_attn_every_n_layers"] = json!(1));
    let (all_global, _) = load_encoder(tmp.path(), 1);
    let long = [cases[7].clone()];
    let d = max_abs_diff(&hidden_of(&all_global, &long)[0], &f32s(&cases[7]["hidden"]));
    assert!(d > 100.0 * TOL, "global-only layers land {d:e} from the reference");
}

#[test]
fn classifiers_equal_transformers_and_cross_encoder() {
    for (name, want, labels) in [("tiny-modernbert-cls", "logits", 2), ("tiny-modernbert-ce", "scores", 1)] {
        let dir = fixture(name);
        let (runner, texts) = load_encoder(&dir, 2);
        let info = *runner.encoder_info().unwrap();
        assert_eq!((info.vector, info.scores), (None, Some(labels)), "{name}");
        let cases = cases(&dir);
        let pairs: Vec<(&str, &str)> =
            cases.iter().map(|c| (c["pair"][0].as_str().unwrap(), c["pair"][1].as_str().unwrap())).collect();
        for (c, s) in cases.iter().zip(score(&runner, &texts, &pairs).unwrap()) {
            let d = max_abs_diff(&s, &f32s(&c[want]));
            assert!(d <= TOL, "{name}: {:?}: {s:?} vs {} ({d:e})", c["pair"], c[want]);
        }
        if labels == 1 {
            // The logits too: the sigmoid is the cross-encoder's, not the model's.
            let tmp = edited(&dir, |c| c["sentence_transformers"] = json!({"activation_fn": "torch.nn.Identity"}));
            let (raw, _) = load_encoder(tmp.path(), 1);
            for (c, s) in cases.iter().zip(score(&raw, &texts, &pairs).unwrap()) {
                assert!(max_abs_diff(&s, &f32s(&c["logits"])) <= TOL, "{name}: logits of {:?}", c["pair"]);
            }
        }
    }
}

#[test]
fn batch_and_thread_invariance_bit_for_bit() {
    for name in ["tiny-modernbert", "tiny-modernbert-cls"] {
        check_text_invariance(&fixture(name), "They said: come and see the people, the water, the first day!", 64);
    }
}

#[test]
fn bad_configs_are_refused_naming_the_field() {
    let dir = fixture("tiny-modernbert");
    let cases: [(&str, Value, &str); 8] = [
        ("hidden_activation", json!("silu"), "hidden_activation"),
        ("architectures", json!(["ModernBertForTokenClassification"]), "architectures"),
        ("classifier_pooling", json!("max"), "classifier_pooling"),
        ("layer_types", json!(["full_attention"]), "layer_types"),
        ("rope_scaling", json!({"rope_type": "linear", "factor": 2.0}), "rope_scaling"),
        ("num_attention_heads", json!(4), "num_attention_heads"),
        ("global_rope_theta", json!(-1), "global_rope_theta"),
        ("norm_bias", json!("yes"), "norm_bias"),
    ];
    for (field, value, named) in cases {
        let e = refusal(&dir, field, &value);
        assert!(e.contains(named), "{field} = {value}: {e}");
    }
    let tmp = edited(&dir, |c| {
        c["rope_parameters"] = json!({"full_attention": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}})
    });
    let e = load_error(tmp.path());
    assert!(e.contains("rope_parameters.full_attention"), "{e}");
    // A missing tensor is named.
    let tmp = edited(&dir, |c| c["attention_bias"] = json!(true));
    let e = load_error(tmp.path());
    assert!(e.contains("layers.0.attn.Wqkv.bias"), "{e}");
}
