//! The engine under random load and faults: hundreds of requests with random lengths and
//! shared prefixes, arriving over time, cancelled at random points, on a pool small
//! enough to preempt and to evict cached prefixes. After every step the pool's
//! invariants hold and every held block's reference count equals the number of block
//! tables naming it; at the end every block is free or cached; and every request that
//! completed equals, bit for bit, the same request run alone.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tl_arch_llama as _;
use tl_core::{EngineConfig, KvBackend, KvConfig, ModelRunner, SamplingParams, Tokenizer};
use tl_engine::{Engine, EngineOptions, Event, FinishReason, Observer, Request, UnboundedReceiver};
use tl_kv::KvPool;

fn tiny() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../arch-llama/tests/fixtures/tiny-llama")
}

/// Checks the pool after every step; the first broken invariant is kept.
#[derive(Default)]
struct PoolCheck {
    checks: AtomicUsize,
    broken: Mutex<Option<String>>,
    /// Cached blocks at the last check, with their hashes; and how many of them were
    /// since taken for other data (evictions).
    cached: Mutex<HashMap<u32, u64>>,
    evictions: AtomicUsize,
}

impl PoolCheck {
    fn check(pool: &dyn KvBackend, tables: &[&[u32]]) -> Result<(), String> {
        let kv = (pool as &dyn std::any::Any).downcast_ref::<KvPool>().ok_or("the pool is not a KvPool")?;
        kv.check_invariants()?;
        let mut held: HashMap<u32, u32> = HashMap::new();
        for t in tables {
            for &id in *t {
                *held.entry(id).or_default() += 1;
            }
        }
        for (&id, &n) in &held {
            let refs = pool.refs(id).map_err(|e| e.to_string())?;
            if refs != n {
                return Err(format!("block {id}: refs {refs}, named by {n} block tables"));
            }
        }
        if held.len() != pool.n_in_use() {
            return Err(format!("{} blocks in use, {} named by block tables", pool.n_in_use(), held.len()));
        }
        Ok(())
    }
}

impl Observer for PoolCheck {
    fn wants_pool(&self) -> bool {
        true
    }
    fn pool(&self, pool: &dyn KvBackend, tables: &[&[u32]]) {
        self.checks.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = Self::check(pool, tables) {
            self.broken.lock().expect("lock").get_or_insert(e);
        }
        let Some(kv) = (pool as &dyn std::any::Any).downcast_ref::<KvPool>() else { return };
        let mut cached = self.cached.lock().expect("lock");
        let gone = cached.iter().filter(|&(&id, &h)| kv.hash_of(id).ok().flatten() != Some(h)).count();
        self.evictions.fetch_add(gone, Ordering::Relaxed);
        cached.clear();
        for id in 0..kv.n_blocks() {
            if kv.state(id) == Ok(tl_kv::BlockState::Cached) {
                if let Ok(Some(h)) = kv.hash_of(id) {
                    cached.insert(id, h);
                }
            }
        }
    }
}

fn engine(n_blocks: u32, observer: Option<Arc<dyn Observer>>) -> Engine {
    let cfg = EngineConfig {
        max_batch_tokens: 48,
        max_seqs: 8,
        prefill_chunk: 16,
        threads: 2,
        kv: KvConfig { block_tokens: 4, n_blocks: Some(n_blocks), ..KvConfig::default() },
        ..EngineConfig::default()
    };
    let runner = ModelRunner::load(&tiny(), &cfg).expect("load");
    let tok = Arc::new(Tokenizer::load(runner.config()).expect("tokenizer"));
    Engine::start(runner, tok, EngineOptions { max_queue: 4096, observer, speculate: None, ..Default::default() })
        .expect("start")
}

/// xorshift64*: the test's own reproducible randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One token: id, logprob bits, top (id, logprob bits).
type Tok = (u32, u64, Vec<(u32, u64)>);
/// What a sequence returned: its tokens, text, finish, token counts.
type Out = (Vec<Tok>, String, FinishReason, usize, usize);

/// Events so far, or the finished output.
struct Live {
    rx: Option<UnboundedReceiver<Event>>,
    events: usize,
    cancel_after: Option<usize>,
    toks: Vec<Tok>,
    text: String,
    out: Option<Out>,
}

fn requests(rng: &mut Rng, n: usize) -> Vec<Request> {
    // Four shared prefixes (system prompts) of 6 to 30 tokens.
    let prefixes: Vec<Vec<u32>> =
        (0..4).map(|_| (0..6 + rng.below(25)).map(|_| rng.below(256) as u32).collect()).collect();
    (0..n)
        .map(|_| {
            let mut prompt = prefixes[rng.below(4) as usize].clone();
            if rng.below(8) == 0 {
                prompt.truncate(1 + rng.below(prompt.len() as u64) as usize);
            }
            prompt.extend((0..rng.below(20)).map(|_| rng.below(256) as u32));
            let temperature = [0.0, 0.7, 1.0][rng.below(3) as usize];
            Request {
                prompt,
                params: SamplingParams {
                    temperature,
                    top_k: [0, 20][rng.below(2) as usize],
                    repetition_penalty: [1.0, 1.2][rng.below(2) as usize],
                    ..SamplingParams::default()
                },
                seed: rng.next(),
                choice: rng.below(3) as u32,
                max_tokens: 1 + rng.below(48) as usize,
                stop: vec![],
                logprobs: (rng.below(2) == 0).then_some(2),
                grammar: None,
                logit_bias: vec![],
                speculate: None,
                adapter: None,
            }
        })
        .collect()
}

/// Take whatever events are ready; true when the sequence is over (done or cancelled).
fn poll(l: &mut Live) -> bool {
    let Some(rx) = l.rx.as_mut() else { return true };
    loop {
        if l.cancel_after.is_some_and(|k| l.events >= k) {
            l.rx = None; // the client leaves: the engine reaps it at its next step
            return true;
        }
        match rx.try_recv() {
            Ok(Event::Token { token, text }) => {
                l.events += 1;
                let top = token.top.iter().map(|&(i, p)| (i, p.to_bits())).collect();
                l.toks.push((token.id, token.logprob.to_bits(), top));
                l.text.push_str(&text);
            }
            Ok(Event::Done { finish, text, usage, .. }) => {
                l.text.push_str(&text);
                let toks = std::mem::take(&mut l.toks);
                l.out = Some((toks, l.text.clone(), finish, usage.prompt_tokens, usage.completion_tokens));
                l.rx = None;
                return true;
            }
            Ok(Event::Error(e)) => panic!("engine error: {e}"),
            Err(tokio::sync::mpsc::error::TryRecvError::Empty) => return false,
            Err(e) => panic!("engine hung up: {e}"),
        }
    }
}

fn alone(e: &Engine, r: &Request) -> Out {
    let mut l = Live {
        rx: Some(e.submit(r.clone()).expect("submit")),
        events: 0,
        cancel_after: None,
        toks: vec![],
        text: String::new(),
        out: None,
    };
    while !poll(&mut l) {
        std::thread::sleep(Duration::from_micros(200));
    }
    l.out.expect("finished")
}

#[test]
fn random_load_and_cancellations_keep_the_pool_sound_and_answers_exact() {
    let t0 = Instant::now();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let reqs = requests(&mut rng, 600);
    let check = Arc::new(PoolCheck::default());
    // 40 blocks of 4 tokens: 8 running sequences of up to ~100 tokens need more, so the
    // scheduler preempts, and cached prefixes are evicted to make room.
    let e = engine(40, Some(Arc::clone(&check) as Arc<dyn Observer>));
    let mut live: Vec<Live> = Vec::new();
    let mut next = 0;
    while next < reqs.len() || live.iter().any(|l| l.rx.is_some()) {
        // Arrivals: a random handful every round.
        for _ in 0..rng.below(6) {
            if next < reqs.len() {
                let cancel_after = (rng.below(4) == 0).then(|| rng.below(12) as usize);
                let rx = e.submit(reqs[next].clone()).expect("submit");
                live.push(Live { rx: Some(rx), events: 0, cancel_after, toks: vec![], text: String::new(), out: None });
                next += 1;
            }
        }
        for l in live.iter_mut() {
            poll(l);
        }
        std::thread::sleep(Duration::from_micros(500));
        assert!(t0.elapsed() < Duration::from_secs(50), "the load phase did not finish");
    }
    // Idle: nothing runs or waits, every block is free or cached.
    let t = Instant::now();
    loop {
        let s = e.stats();
        if s.running == 0 && s.waiting == 0 && s.kv_blocks_in_use == 0 {
            assert_eq!(s.kv_blocks_free + s.kv_blocks_cached, s.kv_blocks_total);
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "never idle: {s:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    let s = e.stats();
    if let Some(b) = check.broken.lock().expect("lock").take() {
        panic!("pool invariant broken: {b}");
    }
    let checks = check.checks.load(Ordering::Relaxed);
    assert!(checks >= s.steps, "{checks} checks for {} steps", s.steps);
    assert!(s.preemptions > 0, "no preemption: {s:?}");
    assert!(s.prefix_hit_tokens > 0, "no prefix hit: {s:?}");
    assert!(s.cancelled > 0, "no cancellation reached the engine: {s:?}");
    let evictions = check.evictions.load(Ordering::Relaxed);
    assert!(evictions > 0, "no cached block was evicted");
    assert!(s.steps >= 2000, "only {} steps", s.steps);
    drop(e);

    // Every completed request, alone on a fresh engine with a roomy pool: the same bits.
    let solo = engine(256, None);
    let done: Vec<(usize, &Out)> =
        live.iter().enumerate().filter_map(|(i, l)| l.out.as_ref().map(|o| (i, o))).collect();
    assert!(done.len() >= reqs.len() / 2, "only {} of {} completed", done.len(), reqs.len());
    for &(i, out) in &done {
        assert_eq!(&alone(&solo, &reqs[i]), out, "request {i} differs from its run alone");
    }
    eprintln!(
        "stress: {} requests, {} completed, {} cancelled, {} steps, {} preemptions, {} prefix-hit tokens, {evictions} evictions, {} pool checks, {:.1} s",
        reqs.len(),
        done.len(),
        s.cancelled,
        s.steps,
        s.preemptions,
        s.prefix_hit_tokens,
        checks,
        t0.elapsed().as_secs_f64()
    );
}
