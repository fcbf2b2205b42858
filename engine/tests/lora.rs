//! Requests with LoRA adapters through the engine (docs/spec/numbers.md, "Adapters"):
//! requests under different adapters (and none) run in the same steps and each answer is
//! the bits it has alone; the prefix cache never serves a block computed under one
//! adapter (or scale) to another, in memory or on disk after a restart; P/D hand-off is
//! keyed by the adapter and an adapted answer decoded from imported KV keeps its bits;
//! preemption and speculation keep an adapted answer's bits.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tl_arch_llama as _;
use tl_core::{EngineConfig, KvConfig, ModelRunner, SamplingParams, Tokenizer};
use tl_engine::{AdapterChoice, DiskCacheConfig, Engine, EngineOptions, Request, Speculation};

mod support;
use support::{collect, tiny};

fn adapter_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../families/tests/fixtures/lora").join(name)
}

/// An engine over tiny-llama with blocks of 4 positions, and llama-all and llama-rs loaded.
fn engine(n_blocks: u32, max_seqs: usize) -> (Engine, AdapterChoice, AdapterChoice) {
    engine_with(n_blocks, max_seqs, None)
}

/// [`engine`], keeping blocks on disk under `disk` when given.
fn engine_with(n_blocks: u32, max_seqs: usize, disk: Option<&Path>) -> (Engine, AdapterChoice, AdapterChoice) {
    let cfg = EngineConfig {
        max_batch_tokens: 64,
        max_seqs,
        prefill_chunk: 16,
        threads: 2,
        kv: KvConfig { block_tokens: 4, n_blocks: Some(n_blocks), ..KvConfig::default() },
        ..EngineConfig::default()
    };
    let runner = ModelRunner::load(&tiny(), &cfg).expect("load");
    let all = runner.load_adapter("all", &adapter_dir("llama-all")).expect("llama-all");
    let rs = runner.load_adapter("rs", &adapter_dir("llama-rs")).expect("llama-rs");
    let tok = Arc::new(Tokenizer::load(runner.config()).expect("tokenizer"));
    let disk_cache =
        disk.map(|dir| DiskCacheConfig { dir: dir.to_path_buf(), max_bytes: 1 << 30, fingerprint: "fp_lora".into() });
    let e =
        Engine::start(runner, tok, EngineOptions { max_queue: 64, disk_cache, ..Default::default() }).expect("start");
    (e, AdapterChoice::new(Arc::new(all)), AdapterChoice::new(Arc::new(rs)))
}

fn req(prompt: &[u8], seed: u64, adapter: Option<AdapterChoice>) -> Request {
    Request {
        prompt: prompt.iter().map(|&b| u32::from(b)).collect(),
        params: SamplingParams { temperature: 0.8, top_k: 40, ..Default::default() },
        seed,
        choice: 0,
        max_tokens: 12,
        stop: vec![],
        logprobs: Some(2),
        grammar: None,
        logit_bias: vec![],
        speculate: None,
        adapter,
    }
}

type Answer = Vec<(u32, u64)>;

fn alone(e: &Engine, r: Request) -> (Answer, usize) {
    let (out, usage) = collect(e.submit(r).expect("submit"));
    (out, usage.cached_tokens)
}

#[test]
fn mixed_adapters_in_one_engine_answer_as_alone() {
    let (e, all, rs) = engine(256, 8);
    let half = AdapterChoice { scale: 0.5, ..all.clone() };
    let prompt = b"The quick brown fox jumps over the lazy dog";
    let choices = [None, Some(all.clone()), Some(rs.clone()), Some(half), Some(all)];
    let reqs: Vec<Request> =
        choices.iter().enumerate().map(|(i, a)| req(prompt, 7 + i as u64 % 2, a.clone())).collect();
    let want: Vec<Answer> = {
        let (fresh, ..) = engine(256, 1);
        reqs.iter().map(|r| alone(&fresh, r.clone()).0).collect()
    };
    // Different adapters give different answers (else the comparisons below prove little).
    assert_ne!(want[0], want[1], "the adapter changed nothing");
    assert_ne!(want[1], want[3], "scale 0.5 = scale 1");
    let rxs = e.submit_all(reqs.clone()).expect("submit");
    for (i, rx) in rxs.into_iter().enumerate() {
        assert_eq!(collect(rx).0, want[i], "request {i} together with the others");
    }
    // Speculation never changes an adapted answer.
    for (i, r) in reqs.iter().enumerate() {
        let spec = Request { speculate: Some(Speculation::Ngram { k: 3 }), ..r.clone() };
        assert_eq!(alone(&e, spec).0, want[i], "request {i} with n-gram speculation");
    }
}

#[test]
fn the_prefix_cache_is_keyed_by_adapter() {
    let (e, all, rs) = engine(256, 4);
    let prompt = b"Pack my box with five dozen liquor jugs, then pack it again";
    let want_all = {
        let (fresh, all2, _) = engine(256, 1);
        let _ = all2;
        alone(&fresh, req(prompt, 1, Some(all.clone()))).0
    };
    let (_, cached) = alone(&e, req(prompt, 1, Some(all.clone())));
    assert_eq!(cached, 0, "a cold cache");
    // The same prompt under another adapter, another scale, or none: no block is shared.
    for (what, a) in [
        ("another adapter", Some(rs.clone())),
        ("another scale", Some(AdapterChoice { scale: 2.0, ..all.clone() })),
        ("no adapter", None),
    ] {
        let (_, cached) = alone(&e, req(prompt, 1, a));
        assert_eq!(cached, 0, "{what} was served the first adapter's blocks");
    }
    // The same adapter again: a hit, and the same answer as a cold engine's.
    let (out, cached) = alone(&e, req(prompt, 1, Some(all)));
    assert!(cached > 0, "the same adapter found nothing");
    assert_eq!(out, want_all, "a prefix hit changed the adapted answer");
}

#[test]
fn preemption_keeps_an_adapted_answer() {
    let (big, all, rs) = engine(256, 1);
    let choices = [Some(all), Some(rs), None];
    let reqs: Vec<Request> = (0..6)
        .map(|i| {
            let prompt = format!("Sphinx of black quartz, judge my vow number {i}");
            Request { max_tokens: 24, ..req(prompt.as_bytes(), 3, choices[i % 3].clone()) }
        })
        .collect();
    let want: Vec<Answer> = reqs.iter().map(|r| alone(&big, r.clone()).0).collect();
    // A pool for about two of the six: the newest are preempted and recomputed, each under
    // its own adapter.
    let (small, all, rs) = engine(30, 6);
    let choices = [Some(all), Some(rs), None];
    let reqs: Vec<Request> =
        reqs.into_iter().enumerate().map(|(i, r)| Request { adapter: choices[i % 3].clone(), ..r }).collect();
    let rxs = small.submit_all(reqs).expect("submit");
    for (i, rx) in rxs.into_iter().enumerate() {
        assert_eq!(collect(rx).0, want[i], "request {i} in a small pool");
    }
    assert!(small.stats().preemptions > 0, "the small pool never preempted");
}

#[test]
fn a_pd_hand_off_is_keyed_by_adapter() {
    let (e, all, rs) = engine(256, 2);
    let prompt: Vec<u32> =
        b"Hand this prompt off, block by block, to a decoder".iter().map(|&b| u32::from(b)).collect();
    // Prompt blocks computed under `all` are in the cache; held for `rs`, nothing is found.
    let _ = alone(&e, Request { prompt: prompt.clone(), ..req(b"x", 1, Some(all.clone())) });
    assert!(e.hold_prefix_for(&prompt, Some(&all)).expect("hold").n_local() > 0, "same adapter: a hit");
    assert_eq!(e.hold_prefix_for(&prompt, Some(&rs)).expect("hold").n_local(), 0, "another adapter: a hit");
    assert_eq!(e.hold_prefix(&prompt).expect("hold").n_local(), 0, "the base: a hit");
    // Blocks held for one adapter are not submitted under another.
    let held = e.hold_prefix_for(&prompt, Some(&all)).expect("hold");
    let err = e.submit_preloaded(Request { prompt, ..req(b"x", 1, Some(rs)) }, held).expect_err("refused");
    assert!(err.to_string().contains("adapter"), "{err}");
}

/// Waits until the engine is idle with `done` true of its stats (published after a step's
/// events).
fn settled(e: &Engine, done: impl Fn(&tl_engine::Stats) -> bool) {
    let t0 = Instant::now();
    while !(done(&e.stats()) && e.stats().running + e.stats().waiting == 0) {
        assert!(t0.elapsed() < Duration::from_secs(10), "engine did not settle: {:?}", e.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_disk_cache_is_keyed_by_adapter() {
    let prompt = b"Blocks written under one adapter, read back after a restart";
    let dir = tempfile::tempdir().expect("tempdir");
    let cold = {
        let (e, all, _) = engine_with(256, 2, Some(dir.path()));
        let (out, cached) = alone(&e, req(prompt, 4, Some(all)));
        assert_eq!(cached, 0, "a cold cache");
        settled(&e, |s| s.disk.written > 0);
        out
    };
    // A restarted engine over the same directory: the same prompt under another adapter,
    // another scale or none reads nothing from disk; under the same adapter it does, and
    // answers with a cold run's bits.
    let (e, all, rs) = engine_with(256, 2, Some(dir.path()));
    for (what, a) in [
        ("another adapter", Some(rs)),
        ("another scale", Some(AdapterChoice { scale: 0.5, ..all.clone() })),
        ("no adapter", None),
    ] {
        let (_, cached) = alone(&e, req(prompt, 4, a));
        assert_eq!(cached, 0, "{what} was served the adapter's blocks from disk");
    }
    settled(&e, |_| true);
    assert_eq!(e.stats().disk.read, 0, "blocks read from disk for another adapter");
    let (out, cached) = alone(&e, req(prompt, 4, Some(all)));
    assert!(cached > 0, "the same adapter found nothing on disk");
    assert_eq!(out, cold, "an answer from disk blocks differs from a cold run's");
    settled(&e, |s| s.disk.read > 0);
}

#[test]
fn an_adapted_answer_decoded_from_imported_kv_keeps_its_bits() {
    let (one, all, _) = engine(256, 1);
    let (p, all_p, _) = engine(256, 2);
    let (d, all_d, _) = engine(256, 2);
    let prompt: Vec<u32> = b"Prefill here, decode there, under one adapter".iter().map(|&b| u32::from(b)).collect();
    let full = Request { prompt: prompt.clone(), ..req(b"x", 9, Some(all)) };
    let (want, _) = alone(&one, full.clone());
    let (base, _) = alone(&one, Request { adapter: None, ..full.clone() });
    assert_ne!(want, base, "the adapter changed nothing");

    let held = Request { max_tokens: 1, adapter: Some(all_p), ..full.clone() };
    let _ = collect(p.submit_held(held, "l".into(), Duration::from_secs(30)).expect("prefill"));
    let mut pre = d.hold_prefix_for(&prompt, Some(&all_d)).expect("hold");
    let need = pre.needed(prompt.len());
    let env = p.take_lease("l", pre.n_blocks(), Some(need)).expect("fetch");
    d.import_into(&mut pre, &prompt, &env).expect("import");
    let (got, cached) = {
        let (out, usage) = collect(d.submit_preloaded(Request { adapter: Some(all_d), ..full }, pre).expect("decode"));
        (out, usage.cached_tokens)
    };
    assert_eq!(cached, prompt.len() - 1, "the decode engine prefilled again");
    assert_eq!(got, want, "decoding from imported KV changed the adapted answer");
}

#[test]
fn draft_model_speculation_keeps_adapted_answers() {
    let (plain, all, rs) = engine(256, 1);
    let choices = [Some(all.clone()), Some(rs), None, Some(AdapterChoice { scale: 0.5, ..all })];
    let reqs: Vec<Request> = choices
        .iter()
        .enumerate()
        .map(|(i, a)| Request { max_tokens: 20, ..req(b"one two three one two three one two", i as u64, a.clone()) })
        .collect();
    let want: Vec<Answer> = reqs.iter().map(|r| alone(&plain, r.clone()).0).collect();
    // The draft is the base model (drafts know no adapter): its tokens are accepted only
    // where the adapted target agrees, and every answer keeps its plain bits, together or
    // alone. (An adapter is data: the one loaded above serves this engine's runner too.)
    let cfg = EngineConfig {
        max_batch_tokens: 64,
        max_seqs: 4,
        prefill_chunk: 16,
        threads: 2,
        kv: KvConfig { block_tokens: 4, n_blocks: Some(256), ..KvConfig::default() },
        ..EngineConfig::default()
    };
    let runner = ModelRunner::load(&tiny(), &cfg).expect("load");
    let draft = ModelRunner::load(&tiny(), &cfg).expect("load draft");
    let tok = Arc::new(Tokenizer::load(runner.config()).expect("tokenizer"));
    let opts = EngineOptions { max_queue: 64, spec_step_rows: usize::MAX, ..Default::default() };
    let e = Engine::start_with_draft(runner, Some(draft), tok, opts).expect("start");
    let spec: Vec<Request> =
        reqs.iter().map(|r| Request { speculate: Some(Speculation::Draft { k: 3 }), ..r.clone() }).collect();
    for (i, rx) in e.submit_all(spec.clone()).expect("submit").into_iter().enumerate() {
        assert_eq!(collect(rx).0, want[i], "request {i} drafted, together");
    }
    for (i, r) in spec.into_iter().enumerate() {
        assert_eq!(alone(&e, r).0, want[i], "request {i} drafted, alone");
    }
    let st = e.stats();
    assert!(st.draft_tokens > st.draft_accepted && st.draft_accepted > 0, "drafts must hit and miss: {st:?}");
}
