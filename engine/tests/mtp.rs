//! Speculation with the model's own MTP head (engine/src/mtp.rs) on the tiny Qwen3.5 that
//! carries one (arch-qwen3-5/tests/fixtures/tiny-qwen3_5-mtp, a hybrid: the target's state
//! is rolled back past rejected drafts too): every answer is plain decoding's, bit for bit,
//! greedy and sampled, in a batch of chunked prefills, with drafts both accepted and
//! rejected (the engine's counters), again when the prompts come back (no prefix hit for an
//! MTP sequence: the head needs every position's hidden state), and under preemption. An
//! engine without the head refuses `mtp`, naming the field.

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use support::{collect, sampled as req};
use tl_arch_qwen3_5 as _;
use tl_core::{EngineConfig, KvConfig, ModelRunner, Tokenizer};
use tl_engine::{Engine, EngineError, EngineOptions, Request, Speculation, Usage};

fn model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../arch-qwen3-5/tests/fixtures/tiny-qwen3_5-mtp")
}

fn config(n_blocks: u32) -> EngineConfig {
    let kv = KvConfig { block_tokens: 4, n_blocks: Some(n_blocks), state_snapshot_tokens: 0, ..KvConfig::default() };
    EngineConfig { max_batch_tokens: 256, max_seqs: 16, prefill_chunk: 23, threads: 2, kv, ..EngineConfig::default() }
}

/// An engine over the model, with its MTP head when `head`.
fn engine(head: bool, n_blocks: u32, speculate: Option<Speculation>) -> Result<Engine, EngineError> {
    let cfg = config(n_blocks);
    let runner = ModelRunner::load(&model(), &cfg).expect("load");
    let head = head.then(|| ModelRunner::load_draft_head(&model(), &cfg).expect("the MTP head loads"));
    let tok = Arc::new(Tokenizer::load(runner.config()).expect("tokenizer"));
    let opts = EngineOptions { max_queue: 64, speculate, ..Default::default() };
    Engine::start_with_drafters(runner, (None, head), tok, opts)
}

/// Six prompts of 9 to 59 tokens (byte ids).
fn prompts(greedy: bool) -> Vec<Request> {
    (0..6)
        .map(|i| {
            let prompt = (0..9 + 10 * i).map(|j| ((i * 37 + j * 11) % 250) as u32 + 1).collect();
            let mut r = req(prompt, 90 + i as u64, 28);
            if greedy {
                r.params.temperature = 0.0;
            }
            r
        })
        .collect()
}

fn run_all(e: &Engine, reqs: &[Request]) -> Vec<(Vec<(u32, u64)>, Usage)> {
    let rxs: Vec<_> = reqs.iter().map(|r| e.submit(r.clone()).expect("submit")).collect();
    rxs.into_iter().map(collect).collect()
}

fn plain(r: &Request) -> Vec<(u32, u64)> {
    let e = engine(false, 512, None).expect("start");
    e.submit(r.clone()).map(collect).expect("submit").0
}

fn with_mtp(reqs: &[Request]) -> Vec<Request> {
    reqs.iter().map(|r| Request { speculate: Some(Speculation::Mtp { k: 3 }), ..r.clone() }).collect()
}

fn settle(e: &Engine) {
    std::thread::sleep(Duration::from_millis(50));
    let st = e.stats();
    assert_eq!((st.kv_blocks_in_use, st.running, st.waiting), (0, 0, 0), "pool not clean: {st:?}");
}

#[test]
fn mtp_speculation_keeps_the_bits_of_plain_decoding() {
    for greedy in [true, false] {
        let reqs = prompts(greedy);
        let want: Vec<_> = reqs.iter().map(plain).collect();
        let e = engine(true, 512, None).expect("start");
        // Twice: the second time the prompts' blocks are registered (a plain sequence
        // would hit them; an MTP one feeds its prompt again).
        for round in 0..2 {
            let got = run_all(&e, &with_mtp(&reqs));
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(&g.0, w, "greedy {greedy}, round {round}: prompt {i} differs from plain decoding");
            }
        }
        settle(&e);
        let st = e.stats();
        eprintln!("greedy {greedy}: {} drafted, {} accepted", st.draft_tokens, st.draft_accepted);
        assert!(st.draft_tokens > st.draft_accepted, "greedy {greedy}: no draft rejected: {st:?}");
        assert!(st.draft_accepted > 0, "greedy {greedy}: no draft accepted: {st:?}");
    }
}

#[test]
fn mtp_speculation_under_preemption_keeps_the_bits() {
    // 40 blocks of 4 positions for six sequences of up to 87 positions: the newest are
    // preempted, their head state dropped, and rebuilt from the recompute.
    let reqs = prompts(true);
    let want: Vec<_> = reqs.iter().map(plain).collect();
    let e = engine(true, 40, Some(Speculation::Mtp { k: 3 })).expect("start");
    let got = run_all(&e, &reqs);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(&g.0, w, "prompt {i} differs from plain decoding");
    }
    settle(&e);
    let st = e.stats();
    assert!(st.preemptions > 0, "the pool never ran short: {st:?}");
    assert!(st.draft_accepted > 0, "no draft accepted: {st:?}");
}

#[test]
fn mtp_without_the_head_is_refused_naming_the_field() {
    let Err(err) = engine(false, 64, Some(Speculation::Mtp { k: 2 })) else { panic!("started without the head") };
    assert!(matches!(err, EngineError::BadRequest { field: "speculate", .. }), "{err}");
    let e = engine(false, 64, None).expect("start");
    let r = Request { speculate: Some(Speculation::Mtp { k: 2 }), ..prompts(true)[0].clone() };
    let err = e.submit(r).expect_err("an mtp request without the head");
    assert!(matches!(err, EngineError::BadRequest { field: "speculate", .. }), "{err}");
    assert!(err.to_string().contains("MTP head"), "{err}");
}

#[test]
fn mtp_parses_beside_the_other_kinds() {
    assert_eq!("mtp".parse::<Speculation>(), Ok(Speculation::Mtp { k: 4 }));
    assert_eq!("mtp:2".parse::<Speculation>(), Ok(Speculation::Mtp { k: 2 }));
    assert!("mtp:0".parse::<Speculation>().is_err());
}

/// A PEFT adapter over every projection the model adapts (its `adaptable` list), values
/// from a fixed formula (the numbers are not compared with anything: only that speculation
/// keeps them), written into `dir`.
fn write_adapter(runner: &ModelRunner, dir: &std::path::Path) {
    let rank = 4usize;
    let (mut header, mut data) = (serde_json::Map::new(), Vec::new());
    for (m, t) in runner.adapter_loader().targets.iter().enumerate() {
        for (half, rows, cols) in [("lora_A", rank, t.inp), ("lora_B", t.out, rank)] {
            let begin = data.len();
            for i in 0..rows * cols {
                let k = ((i * 2_654_435_761 + m * 977 + rows) >> 7) % 61;
                data.extend_from_slice(&((k as f32 - 30.0) / 256.0).to_le_bytes());
            }
            let name = format!("base_model.model.{}.{half}.weight", t.module);
            header.insert(
                name,
                serde_json::json!({"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, data.len()]}),
            );
        }
    }
    let mut h = serde_json::Value::Object(header).to_string().into_bytes();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut file = (h.len() as u64).to_le_bytes().to_vec();
    file.extend(h);
    file.extend(data);
    std::fs::write(dir.join("adapter_model.safetensors"), file).expect("write");
    let targets = runner.adapter_loader().targets;
    let mut modules: Vec<&str> = targets.iter().map(|t| t.module.rsplit('.').next().unwrap_or("")).collect();
    modules.sort_unstable();
    modules.dedup();
    let cfg =
        serde_json::json!({"peft_type": "LORA", "r": rank, "lora_alpha": 8, "bias": "none", "target_modules": modules});
    std::fs::write(dir.join("adapter_config.json"), cfg.to_string()).expect("config");
}

/// Under a LoRA adapter (the head drafts unadapted; the adapted target verifies), beside
/// plain rows and rows under no adapter: every answer is its plain decoding's, bit for bit.
#[test]
fn mtp_speculation_keeps_adapted_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runner = ModelRunner::load(&model(), &config(512)).expect("load");
    assert!(!runner.adapter_loader().targets.is_empty(), "the hybrid model adapts nothing");
    write_adapter(&runner, dir.path());
    let adapter = Arc::new(runner.load_adapter("a", dir.path()).expect("the adapter"));
    let choice = tl_engine::AdapterChoice::new(adapter);
    let reqs: Vec<Request> = prompts(false)
        .into_iter()
        .enumerate()
        .map(|(i, r)| Request { adapter: (i % 3 != 2).then(|| choice.clone()), ..r })
        .collect();
    let want: Vec<_> = reqs.iter().map(plain).collect();
    let base = plain(&Request { adapter: None, ..reqs[0].clone() });
    assert_ne!(want[0], base, "the adapter changed nothing");
    let e = engine(true, 512, None).expect("start");
    let got = run_all(&e, &with_mtp(&reqs));
    for (i, (g, _)) in got.iter().enumerate() {
        assert_eq!(g, &want[i], "request {i}: MTP speculation under an adapter changed the answer");
    }
    let st = e.stats();
    assert!(st.draft_tokens > st.draft_accepted && st.draft_accepted > 0, "drafts must hit and miss: {st:?}");
}
