//! Tiny random nomic-berts (scripts/fixtures/make_tiny_nomic_bert.py) against the independent
//! torch reference (nomic_bert_reference.py, itself checked there against transformers'
//! NomicBertModel and llama.cpp): hidden states with and without biases and with a partial
//! rotary, token types, the pooled vectors; transformers 5's config form read to the same
//! bits; batch and thread invariance bit for bit; bad configs refused naming the field.

use serde_json::{json, Value};
use tl_arch_nomic_bert::embed;
use tl_core::{EncodeInput, ModelRunner};
use tl_kv as _;
use tl_testkit::encoders::{cases, check_text_invariance, edited, f32s, load_encoder, refusal, u32s};
use tl_testkit::{bits, load_error, max_abs_diff};

/// arch-bert's tolerance: float32 torch (BLAS sums, its own LayerNorm, silu and RoPE)
/// against tl's fixed-order sums, a few ulps per operation on O(1) values.
const TOL: f32 = 5e-6;

tl_testkit::fixtures!();

/// Every case's hidden states, with its type ids (`typed`) or all zeros.
fn hidden_of(runner: &ModelRunner, cases: &[Value], typed: bool) -> Vec<Vec<f32>> {
    let toks: Vec<(Vec<u32>, Vec<u32>)> = cases.iter().map(|c| (u32s(&c["ids"]), u32s(&c["type_ids"]))).collect();
    let inputs: Vec<EncodeInput<'_>> =
        toks.iter().map(|(i, t)| EncodeInput { ids: i, type_ids: typed.then_some(&t[..]) }).collect();
    runner.encode(&inputs, true).unwrap().into_iter().map(|e| e.hidden.unwrap()).collect()
}

#[test]
fn hidden_states_equal_the_reference() {
    for name in ["tiny-nomic-bert", "tiny-nomic-bert-bias"] {
        let dir = fixture(name);
        let (runner, texts) = load_encoder(&dir, 2);
        let cases = cases(&dir);
        for c in &cases {
            let got = match c.get("text") {
                Some(t) => texts.text(t.as_str().unwrap()).unwrap(),
                None => texts.pair(c["pair"][0].as_str().unwrap(), c["pair"][1].as_str().unwrap()).unwrap(),
            };
            assert_eq!(
                (got.ids, got.type_ids),
                (u32s(&c["ids"]), u32s(&c["type_ids"])),
                "{name}: tokens of {}",
                c["ids"]
            );
        }
        let hidden = hidden_of(&runner, &cases, true);
        let worst = cases.iter().zip(&hidden).map(|(c, h)| max_abs_diff(h, &f32s(&c["hidden"]))).fold(0.0, f32::max);
        eprintln!("{name}: max |tl - reference| = {worst:e}");
        assert!(worst <= TOL, "{name}: hidden states differ by {worst:e}");
        // The pair's type ids are read: all zeros gives other states.
        let zeros = hidden_of(&runner, &cases[cases.len() - 1..], false);
        assert!(max_abs_diff(&zeros[0], &f32s(&cases[cases.len() - 1]["hidden"])) > 100.0 * TOL, "{name}");
    }
}

#[test]
fn vectors_equal_the_reference() {
    let dir = fixture("tiny-nomic-bert");
    let (runner, texts) = load_encoder(&dir, 1);
    let info = *runner.encoder_info().unwrap();
    assert_eq!((info.vector, info.normalized, info.type_vocab, info.max_tokens), (Some(36), true, 2, 8192));
    let with_text: Vec<Value> = cases(&dir).into_iter().filter(|c| c["text"].is_string()).collect();
    let strs: Vec<&str> = with_text.iter().map(|c| c["text"].as_str().unwrap()).collect();
    for (c, v) in with_text.iter().zip(embed(&runner, &texts, &strs).unwrap()) {
        let d = max_abs_diff(&v, &f32s(&c["vector"]));
        assert!(d <= TOL, "{:?}: vector differs by {d:e}", c["text"]);
    }
}

#[test]
fn transformers_5_config_form_gives_the_same_bits() {
    let dir = fixture("tiny-nomic-bert");
    let cases = cases(&dir);
    let (hub, _) = load_encoder(&dir, 1);
    let tmp = edited(&dir, |c| {
        let o = c.as_object_mut().unwrap();
        for (hub, hf) in [
            ("n_embd", "hidden_size"),
            ("n_head", "num_attention_heads"),
            ("n_layer", "num_hidden_layers"),
            ("n_inner", "intermediate_size"),
            ("n_positions", "max_position_embeddings"),
            ("layer_norm_epsilon", "layer_norm_eps"),
        ] {
            let v = o.remove(hub).unwrap();
            o.insert(hf.into(), v);
        }
        for k in ["activation_function", "rotary_emb_base", "rotary_emb_fraction", "qkv_proj_bias", "mlp_fc1_bias"] {
            o.remove(k);
        }
        o.remove("mlp_fc2_bias");
        o.insert("hidden_act".into(), json!("silu"));
        o.insert("rope_parameters".into(), json!({"rope_type": "default", "rope_theta": 1000.0}));
    });
    let (hf, _) = load_encoder(tmp.path(), 1);
    for (a, b) in hidden_of(&hub, &cases, true).iter().zip(hidden_of(&hf, &cases, true)) {
        assert_eq!(bits(a), bits(&b));
    }
}

#[test]
fn batch_and_thread_invariance_bit_for_bit() {
    for name in ["tiny-nomic-bert", "tiny-nomic-bert-bias"] {
        check_text_invariance(&fixture(name), "They said: come and see the people, the water, the first day!", 64);
    }
}

#[test]
fn bad_configs_are_refused_naming_the_field() {
    let dir = fixture("tiny-nomic-bert");
    let cases: [(&str, Value); 11] = [
        ("activation_function", json!("gelu")),
        ("prenorm", json!(true)),
        ("causal", json!(true)),
        ("rotary_emb_interleaved", json!(true)),
        ("rotary_emb_scale_base", json!(512)),
        ("rotary_scaling_factor", json!(2.0)),
        ("rotary_emb_fraction", json!(0.0)),
        ("n_head", json!(5)),
        ("architectures", json!(["NomicBertForSequenceClassification"])),
        ("moe_every_n_layers", json!(2)),
        ("use_rms_norm", json!(true)),
    ];
    for (field, value) in cases {
        let e = refusal(&dir, field, &value);
        assert!(e.contains(field), "{field} = {value}: {e}");
    }
    // A bias the config asks for and the checkpoint lacks is named.
    let tmp = edited(&dir, |c| c["qkv_proj_bias"] = json!(true));
    let e = load_error(tmp.path());
    assert!(e.contains("encoder.layers.0.attn.Wqkv.bias"), "{e}");
}
