//! P/D in the engine (engine/src/pd.rs): a held prefill's blocks wait under a lease that
//! one fetch (an export) or an expiry releases; a decode engine that imports them and
//! starts from `len - 1` computed positions produces the same tokens and logprobs, bit
//! for bit, as one engine running the whole request; an envelope of another prompt's KV
//! is refused; an unused preload gives its blocks back.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tl_arch_llama as _;
use tl_core::{EngineConfig, KvConfig, ModelRunner, SamplingParams, Tokenizer};
use tl_engine::{Engine, EngineOptions, Event, PdError, Request, UnboundedReceiver};

mod support;
use support::tiny;

fn engine(model: &Path) -> Engine {
    engine_kv(model, "f16-slab")
}

/// [`engine`] over the KV backend named `kv`.
fn engine_kv(model: &Path, kv: &str) -> Engine {
    let cfg = EngineConfig {
        max_batch_tokens: 96,
        max_seqs: 4,
        prefill_chunk: 24,
        threads: 1,
        kv: KvConfig { backend: kv.into(), block_tokens: 16, n_blocks: Some(64), ..KvConfig::default() },
        ..EngineConfig::default()
    };
    let runner = ModelRunner::load(model, &cfg).expect("load");
    let tok = Arc::new(Tokenizer::load(runner.config()).expect("tokenizer"));
    Engine::start(runner, tok, EngineOptions { max_queue: 16, observer: None, speculate: None, ..Default::default() })
        .expect("start")
}

fn req(prompt: &[u32], max_tokens: usize) -> Request {
    Request {
        prompt: prompt.to_vec(),
        params: SamplingParams { temperature: 0.9, ..SamplingParams::default() },
        seed: 77,
        choice: 0,
        max_tokens,
        stop: vec![],
        logprobs: Some(2),
        grammar: None,
        logit_bias: vec![],
        speculate: None,
        adapter: None,
    }
}

/// (id, logprob bits, top bits) per token.
type Tokens = Vec<(u32, u64, Vec<(u32, u64)>)>;

fn tokens(rx: UnboundedReceiver<Event>) -> Tokens {
    tokens_cached(rx).0
}

/// The tokens as [`tokens`] gives them, and the answer's `cached_tokens`.
fn tokens_cached(mut rx: UnboundedReceiver<Event>) -> (Tokens, usize) {
    let mut out = Vec::new();
    loop {
        match rx.blocking_recv().expect("engine hung up") {
            Event::Token { token, .. } => out.push((
                token.id,
                token.logprob.to_bits(),
                token.top.iter().map(|&(i, l)| (i, l.to_bits())).collect(),
            )),
            Event::Done { usage, .. } => return (out, usage.cached_tokens),
            Event::Error(e) => panic!("{e}"),
        }
    }
}

/// Wait (up to 10 s) for `done`: engine stats are published at the end of a step, after
/// the events a test reads, so a test that reads them right after an answer waits.
fn settle(done: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !done() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn wait_idle(e: &Engine) {
    let t0 = Instant::now();
    while e.stats().running + e.stats().waiting > 0 {
        assert!(t0.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn imported_kv_gives_the_single_engine_answer_bit_for_bit() {
    imported_kv_gives_the_single_engine_answer("f16-slab");
}

/// The same over q8 caches on both sides: the envelope is version 2 and carries codes
/// and scales, so the decode engine holds exactly what the prefill engine computed.
#[test]
fn imported_q8_kv_gives_the_single_engine_answer_bit_for_bit() {
    imported_kv_gives_the_single_engine_answer("q8-slab");
}

/// A q8 prefill's KV offered to an f16 decode engine is refused (and the reverse),
/// taking no block.
#[test]
fn kv_of_another_element_type_is_refused() {
    for (from, to) in [("q8-slab", "f16-slab"), ("f16-slab", "q8-slab")] {
        let (p, d) = (engine_kv(&tiny(), from), engine_kv(&tiny(), to));
        let a: Vec<u32> = (0..40).map(|i| 5 + i).collect();
        tokens(p.submit_held(req(&a, 1), "a".into(), Duration::from_secs(30)).expect("prefill"));
        let env = p.take_lease("a", 0, Some(3)).expect("fetch");
        let mut pre = d.hold_prefix(&a).expect("hold");
        let err = d.import_into(&mut pre, &a, &env).expect_err("another element type");
        assert!(err.to_string().contains("element types differ"), "{from} -> {to}: {err}");
        drop(pre);
        assert_eq!(d.stats().kv_blocks_in_use, 0, "{from} -> {to}: nothing imported");
    }
}

fn imported_kv_gives_the_single_engine_answer(kv: &str) {
    let engine = |m: &Path| engine_kv(m, kv);
    let (p, d, one) = (engine(&tiny()), engine(&tiny()), engine(&tiny()));
    let mut local_seen = 0;
    // Shorter than a block, block aligned (len - 1 = 32), and a partial last block.
    for len in [7usize, 33, 45] {
        let prompt: Vec<u32> = (0..len as u32).map(|i| 3 + (i * 7) % 250).collect();
        let want = tokens(one.submit(req(&prompt, 12)).expect("submit"));

        let id = format!("lease-{len}");
        tokens(p.submit_held(req(&prompt, 1), id.clone(), Duration::from_secs(30)).expect("prefill"));
        let lease = p.lease(&id).expect("the lease exists once the prefill finished");
        assert_eq!(lease.tokens, len);
        assert_eq!(lease.blocks.len(), len.div_ceil(16));
        assert_eq!(p.lease_counts().held, 1);
        // The step publishes its pool counts after the answer's last event: wait for them.
        settle(|| p.stats().kv_blocks_in_use == lease.blocks.len());
        assert_eq!(p.stats().kv_blocks_in_use, lease.blocks.len(), "the lease holds its blocks");

        let mut pre = d.hold_prefix(&prompt).expect("hold");
        let need = pre.needed(len);
        let env = p.take_lease(&id, pre.n_blocks(), Some(need)).expect("fetch");
        assert_eq!(p.lease_counts().held, 0);
        assert_eq!(p.stats().kv_blocks_in_use, 0, "the fetch released the lease");
        assert!(matches!(p.take_lease(&id, 0, None), Err(PdError::UnknownLease { .. })), "fetched once");
        d.import_into(&mut pre, &prompt, &env).expect("import");
        assert_eq!(pre.n_blocks(), need);
        let (hits0, local) = (d.stats().prefix_hit_tokens, pre.n_local() * 16);
        let (got, cached) = tokens_cached(d.submit_preloaded(req(&prompt, 12), pre).expect("decode"));
        assert_eq!(got, want, "prompt of {len}: decode from imported KV differs from one engine");
        // The answer counts every preloaded position as cached (vLLM counts KV loaded
        // through a connector so); the prefix-cache counter only the local blocks.
        assert_eq!(cached, len - 1, "prompt of {len}: cached_tokens");
        assert_eq!(d.stats().prefix_hit_tokens - hits0, local, "prompt of {len}: prefix-cache hits");
        local_seen += local;
        wait_idle(&d);
        assert_eq!(d.stats().kv_blocks_in_use, 0);
    }
    assert!(local_seen > 0, "the 45-token prompt found the 33-token one's blocks in D's prefix cache");
}

#[test]
fn another_prompts_kv_is_refused_and_an_unused_preload_gives_its_blocks_back() {
    let (p, d) = (engine(&tiny()), engine(&tiny()));
    let a: Vec<u32> = (0..40).map(|i| 5 + i).collect();
    let mut b = a.clone();
    b[3] = 200; // same length, another first block
    tokens(p.submit_held(req(&a, 1), "a".into(), Duration::from_secs(30)).expect("prefill"));
    let env = p.take_lease("a", 0, Some(3)).expect("fetch");
    let mut pre = d.hold_prefix(&b).expect("hold");
    let err = d.import_into(&mut pre, &b, &env).expect_err("a's KV for b");
    assert!(matches!(err, PdError::Mismatch { .. }), "{err}");
    assert_eq!(d.stats().kv_blocks_in_use, 0, "nothing imported");
    // The right prompt imports; dropping the preload unused releases the blocks.
    let mut pre = d.hold_prefix(&a).expect("hold");
    d.import_into(&mut pre, &a, &env).expect("import");
    assert_eq!(pre.n_blocks(), 3);
    assert_eq!(d.stats().kv_blocks_in_use, 3, "the preload holds what it imported");
    drop(pre);
    let g = d.stats();
    assert_eq!(g.kv_blocks_in_use, 0, "{g:?}");
}

#[test]
fn an_unfetched_lease_expires() {
    let p = engine(&tiny());
    let prompt: Vec<u32> = (0..20).collect();
    tokens(p.submit_held(req(&prompt, 1), "x".into(), Duration::from_millis(50)).expect("prefill"));
    assert_eq!(p.expire_leases().expect("expire"), 0, "not yet");
    std::thread::sleep(Duration::from_millis(80));
    assert_eq!(p.expire_leases().expect("expire"), 1);
    let c = p.lease_counts();
    assert_eq!((c.held, c.expired, c.fetched), (0, 1, 0));
    assert_eq!(p.stats().kv_blocks_in_use, 0);
    assert!(p.lease("x").is_none());
}
