//! Constrained decoding (sampling.md step 3a) through the engine: a JSON schema's output
//! parses and fits the schema; a constrained seeded sequence is the same bit for bit alone,
//! among concurrent neighbours (constrained or not) and under preemption; a bad schema is
//! refused at submit, naming the field; `logit_bias` bans and forces tokens.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tl_arch_llama as _;
use tl_core::{EngineConfig, KvConfig, ModelRunner, SamplingParams, Tokenizer};
use tl_engine::{Engine, EngineError, EngineOptions, Event, FinishReason, Grammar, GrammarSpec, Request};

mod support;
use support::{smollm2, tiny};

fn engine(model: &Path, n_blocks: u32) -> (Engine, Arc<Tokenizer>) {
    let cfg = EngineConfig {
        max_batch_tokens: 96,
        max_seqs: 16,
        prefill_chunk: 24,
        threads: 2,
        kv: KvConfig { block_tokens: 4, n_blocks: Some(n_blocks), ..KvConfig::default() },
        ..EngineConfig::default()
    };
    let runner = ModelRunner::load(model, &cfg).expect("load");
    let tok = Arc::new(Tokenizer::load(runner.config()).expect("tokenizer"));
    (
        Engine::start(
            runner,
            Arc::clone(&tok),
            EngineOptions { max_queue: 64, observer: None, speculate: None, ..Default::default() },
        )
        .expect("start"),
        tok,
    )
}

fn schema_grammar(schema: Value) -> Option<Grammar> {
    Some(Grammar { spec: GrammarSpec::JsonSchema(schema), field: "response_format" })
}

fn req(prompt: Vec<u32>, seed: u64, temperature: f64, max_tokens: usize, grammar: Option<Grammar>) -> Request {
    Request {
        prompt,
        params: SamplingParams { temperature, top_p: 0.95, ..SamplingParams::default() },
        seed,
        choice: 0,
        max_tokens,
        stop: vec![],
        logprobs: Some(2),
        grammar,
        logit_bias: vec![],
        speculate: None,
        adapter: None,
    }
}

/// (ids, logprob bits, top bits), text, finish.
type Out = (Vec<(u32, u64, Vec<(u32, u64)>)>, String, FinishReason);

fn collect(e: &Engine, r: Request) -> Result<Out, EngineError> {
    let rx = e.submit(r)?;
    Ok(drain(rx))
}

fn drain(mut rx: tl_engine::UnboundedReceiver<Event>) -> Out {
    let (mut toks, mut text) = (Vec::new(), String::new());
    loop {
        match rx.blocking_recv().expect("engine hung up") {
            Event::Token { token, text: t } => {
                toks.push((
                    token.id,
                    token.logprob.to_bits(),
                    token.top.iter().map(|&(i, l)| (i, l.to_bits())).collect(),
                ));
                text.push_str(&t);
            }
            Event::Done { finish, text: t, .. } => {
                text.push_str(&t);
                return (toks, text, finish);
            }
            Event::Error(e) => panic!("sequence failed: {e}"),
        }
    }
}

fn person() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "colour": {"enum": ["red", "green", "blue"]},
            "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}
        },
        "required": ["name", "age", "colour", "tags"],
        "additionalProperties": false
    })
}

/// The output of `person()`: parses, has exactly its fields, each in range.
fn check_person(text: &str) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
    let o = v.as_object().unwrap_or_else(|| panic!("not an object: {text}"));
    assert_eq!(o.keys().collect::<Vec<_>>(), ["name", "age", "colour", "tags"], "{text}");
    assert!(o["name"].as_str().is_some_and(|s| s.chars().count() <= 12), "{text}");
    assert!(o["age"].as_u64().is_some_and(|a| a <= 120), "{text}");
    assert!(["red", "green", "blue"].contains(&o["colour"].as_str().unwrap_or("")), "{text}");
    let tags = o["tags"].as_array().unwrap_or_else(|| panic!("tags: {text}"));
    assert!(tags.len() <= 3 && tags.iter().all(Value::is_boolean), "{text}");
    // Fixed whitespace: no newline, tab or leading space (JSON strings cannot hold a raw one).
    assert!(text.starts_with('{') && !text.contains(['\n', '\t', '\r']), "{text:?}");
}

fn byte_prompt(s: &str) -> Vec<u32> {
    s.bytes().map(u32::from).collect()
}

#[test]
fn tiny_json_schema_output_fits_the_schema_and_ignores_traffic() {
    let (e, _) = engine(&tiny(), 1024);
    let prompt = byte_prompt("Describe a person as JSON: ");
    // The random tiny model knows no JSON: only the grammar makes this valid. Greedy and
    // sampled, several seeds.
    let mut alone = Vec::new();
    for (seed, t) in [(1, 0.0), (2, 0.9), (3, 1.0), (4, 0.7)] {
        let out = collect(&e, req(prompt.clone(), seed, t, 200, schema_grammar(person()))).expect("submit");
        assert_eq!(out.2, FinishReason::Stop, "seed {seed}: {:?}", out.1);
        check_person(&out.1);
        alone.push(out);
    }
    // The same four among unconstrained and otherwise-constrained neighbours, in one engine
    // with a pool small enough to preempt.
    let (e, _) = engine(&tiny(), 60);
    let mut rxs = Vec::new();
    for i in 0..12u64 {
        let g = match i % 3 {
            0 => None,
            1 => schema_grammar(json!({"type": "array", "items": {"type": "integer"}, "maxItems": 5})),
            _ => schema_grammar(json!({"type": "object"})),
        };
        rxs.push(e.submit(req(byte_prompt(&format!("noise {i} ")), 100 + i, 0.8, 40 + i as usize, g)).expect("n"));
        if i % 3 == 1 {
            let k = (i / 3) as usize;
            let (seed, t) = [(1, 0.0), (2, 0.9), (3, 1.0), (4, 0.7)][k];
            rxs.push(e.submit(req(prompt.clone(), seed, t, 200, schema_grammar(person()))).expect("target"));
        }
    }
    let outs: Vec<Out> = rxs.into_iter().map(drain).collect();
    let targets: Vec<&Out> =
        outs.iter().enumerate().filter(|(j, _)| [2, 6, 10, 14].contains(j)).map(|(_, o)| o).collect();
    for (k, (a, b)) in alone.iter().zip(targets).enumerate() {
        assert_eq!(a, b, "constrained target {k} differs under load");
    }
    assert!(e.stats().preemptions > 0, "the small pool never preempted: {:?}", e.stats());
}

#[test]
fn bad_schemas_are_refused_at_submit_naming_the_field() {
    let (e, _) = engine(&tiny(), 256);
    let prompt = byte_prompt("x");
    for schema in [
        json!({"type": "no-such-type"}),
        json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}),
        json!({"type": "string", "pattern": "(unclosed"}),
        json!({"type": "integer", "minimum": 5, "maximum": 1}),
        json!({"allOf": [{"type": "string"}, {"type": "integer"}]}),
    ] {
        let t0 = Instant::now();
        let r = e.submit(req(prompt.clone(), 1, 0.0, 8, schema_grammar(schema.clone())));
        match r {
            Err(EngineError::BadRequest { field, reason }) => {
                assert_eq!(field, "response_format", "{schema}");
                assert!(!reason.is_empty());
            }
            other => panic!("{schema}: expected BadRequest, got {:?}", other.map(|_| ())),
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "{schema}: compile took {:?}", t0.elapsed());
    }
    // The engine still serves.
    let out = collect(&e, req(prompt, 1, 0.0, 4, None)).expect("plain request");
    assert_eq!(out.0.len(), 4);
}

#[test]
fn logit_bias_bans_and_forces() {
    let (e, _) = engine(&tiny(), 256);
    let prompt = byte_prompt("abc");
    let free = collect(&e, req(prompt.clone(), 5, 0.0, 6, None)).expect("free");
    let first = free.0[0].0;
    // Banning the greedy first token changes it; nothing banned is ever produced.
    let mut r = req(prompt.clone(), 5, 0.0, 6, None);
    r.logit_bias = vec![(first, -100.0)];
    let banned = collect(&e, r).expect("banned");
    assert!(banned.0.iter().all(|t| t.0 != first), "{:?}", banned.0);
    // +100 on 'z' makes it the greedy choice everywhere.
    let mut r = req(prompt.clone(), 5, 0.0, 6, None);
    r.logit_bias = vec![(b'z' as u32, 100.0)];
    let forced = collect(&e, r).expect("forced");
    assert_eq!(forced.1, "zzzzzz");
    // Out of range: refused at submit.
    for bias in [vec![(100_000u32, 1.0)], vec![(1, 101.0)], vec![(1, 1.0), (1, 2.0)]] {
        let mut r = req(prompt.clone(), 5, 0.0, 6, None);
        r.logit_bias = bias.clone();
        assert!(matches!(e.submit(r), Err(EngineError::BadRequest { field: "logit_bias", .. })), "{bias:?} accepted");
    }
}

#[test]
fn smollm2_trie_and_schema() {
    let Some(model) = smollm2() else { return };
    let (e, tok) = engine(&model, 512);
    // The trie's bytes: plain tokens decode to themselves, special ones are marked.
    let bytes = tl_engine::token_bytes(&tok, 49152);
    let im_end = tok.token_to_id("<|im_end|>").expect("im_end");
    assert_eq!(bytes[im_end as usize], b"\xff<|im_end|>");
    let hello = tok.encode("Hello").expect("encode");
    assert_eq!(bytes[hello[0] as usize], tok.decode_bytes(&hello[..1]).unwrap());
    let prompt = tok
        .encode(
            "<|im_start|>user\nGive a person (name, age, favourite colour, tags) as JSON.<|im_end|>\n<|im_start|>assistant\n",
        )
        .expect("encode");
    let a = collect(&e, req(prompt.clone(), 11, 0.0, 120, schema_grammar(person()))).expect("greedy");
    assert_eq!(a.2, FinishReason::Stop, "{:?}", a.1);
    check_person(&a.1);
    let b = collect(&e, req(prompt, 12, 0.8, 120, schema_grammar(person()))).expect("sampled");
    assert_eq!(b.2, FinishReason::Stop, "{:?}", b.1);
    check_person(&b.1);
}
