//! The scheduler over a windowed model (the tiny Gemma 3: two layers with a window of 8,
//! one global; docs/kv.md): its windowed pages go back once out of every window, so the
//! same pool bytes run more sequences at once, and the answers keep their bits alone,
//! together, after a prefix hit longer than the window and under preemption.

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{collect, sampled as req};
use tl_arch_gemma3 as _;
use tl_core::{EngineConfig, KvBackend, KvConfig, ModelRunner, Tokenizer, NO_BLOCK};
use tl_engine::{Engine, EngineOptions, Observer, Request, StepFigures, Usage};
use tl_kv::KvPool;

/// The fixture's window.
const WINDOW: usize = 8;

fn gemma3() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../arch-gemma3/tests/fixtures/tiny-gemma3")
}

/// The fixture with every layer global: the same weights and pool bytes, one group.
fn all_global() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(gemma3().join("config.json")).unwrap()).unwrap();
    cfg["layer_types"] = serde_json::json!(["full_attention", "full_attention", "full_attention"]);
    std::fs::write(dir.path().join("config.json"), serde_json::to_vec(&cfg).unwrap()).unwrap();
    std::fs::copy(gemma3().join("model.safetensors"), dir.path().join("model.safetensors")).unwrap();
    dir
}

/// The most sequences any one step ran; after every step, the pool's invariants and
/// its reference counts against the block tables (a page given back is named by none).
#[derive(Default)]
struct Widest(AtomicUsize, Mutex<Option<String>>);

impl Widest {
    fn check(pool: &dyn KvBackend, tables: &[&[u32]]) -> Result<(), String> {
        let kv = (pool as &dyn std::any::Any).downcast_ref::<KvPool>().ok_or("the pool is not a KvPool")?;
        kv.check_invariants()?;
        let mut held: HashMap<u32, u32> = HashMap::new();
        for &id in tables.iter().flat_map(|t| t.iter()).filter(|&&id| id != NO_BLOCK) {
            *held.entry(id).or_default() += 1;
        }
        for (&id, &n) in &held {
            let refs = pool.refs(id).map_err(|e| e.to_string())?;
            if refs != n {
                return Err(format!("page {id}: refs {refs}, named by {n} block tables"));
            }
        }
        if held.len() != pool.n_in_use() {
            return Err(format!("{} pages in use, {} named by block tables", pool.n_in_use(), held.len()));
        }
        Ok(())
    }

    fn assert_sound(&self) {
        if let Some(e) = self.1.lock().unwrap().as_ref() {
            panic!("pool check: {e}");
        }
    }
}

impl Observer for Widest {
    fn step(&self, f: &StepFigures) {
        self.0.fetch_max(f.seqs, Ordering::Relaxed);
    }
    fn wants_pool(&self) -> bool {
        true
    }
    fn pool(&self, pool: &dyn KvBackend, tables: &[&[u32]]) {
        if let Err(e) = Self::check(pool, tables) {
            self.1.lock().unwrap().get_or_insert(e);
        }
    }
}

fn engine(model: &Path, kv: &str, n_blocks: u32, observer: Option<Arc<dyn Observer>>) -> (Engine, usize) {
    let cfg = EngineConfig {
        max_batch_tokens: 256,
        max_seqs: 16,
        prefill_chunk: 24,
        threads: 2,
        kv: KvConfig { backend: kv.into(), block_tokens: 4, n_blocks: Some(n_blocks), ..KvConfig::default() },
        ..EngineConfig::default()
    };
    let runner = ModelRunner::load(model, &cfg).expect("load");
    let bytes = runner.kv_pool_bytes().expect("pool bytes");
    let tok = Arc::new(Tokenizer::load(runner.config()).expect("tokenizer"));
    let opts = EngineOptions { max_queue: 64, observer, speculate: None, ..Default::default() };
    (Engine::start(runner, tok, opts).expect("start"), bytes)
}

/// Eight prompts of 100 tokens (byte ids), each with 12 tokens to generate.
fn prompts() -> Vec<Request> {
    (0..8).map(|i| req((0..100).map(|j| ((i * 37 + j * 11) % 250) as u32 + 1).collect(), 40 + i as u64, 12)).collect()
}

fn run_all(e: &Engine, reqs: &[Request]) -> Vec<(Vec<(u32, u64)>, Usage)> {
    let rxs: Vec<_> = reqs.iter().map(|r| e.submit(r.clone()).expect("submit")).collect();
    rxs.into_iter().map(collect).collect()
}

fn settle(e: &Engine) {
    std::thread::sleep(Duration::from_millis(50));
    let st = e.stats();
    assert_eq!((st.kv_blocks_in_use, st.running, st.waiting), (0, 0, 0), "pool not clean: {st:?}");
}

/// The same pool bytes (30 blocks of every layer's 4 positions: 112-token sequences need
/// 28 each) run one sequence at a time when every layer keeps every position, and
/// several when the windowed layers keep their window only; each answer has the bits it
/// has alone, on the f16 and the q8 cache.
#[test]
fn the_same_pool_bytes_admit_more_windowed_sequences() {
    let global = all_global();
    for kv in ["f16-slab", "q8-slab"] {
        let wide = Arc::new(Widest::default());
        let (e, bytes) = engine(global.path(), kv, 30, Some(wide.clone()));
        run_all(&e, &prompts());
        settle(&e);
        let before = wide.0.load(Ordering::Relaxed);

        let wide = Arc::new(Widest::default());
        let (e, windowed_bytes) = engine(&gemma3(), kv, 30, Some(wide.clone()));
        assert_eq!(bytes, windowed_bytes, "{kv}: the two pools differ in size");
        let together = run_all(&e, &prompts());
        settle(&e);
        let after = wide.0.load(Ordering::Relaxed);
        wide.assert_sound();
        eprintln!("windowed-admission {kv}: at most {before} sequences per step with every position kept, {after} with windows");
        assert_eq!(before, 1, "{kv}");
        assert!(after >= 2 * before, "{kv}: {after} sequences at once with windows, {before} without");

        for (r, t) in prompts().iter().zip(&together) {
            let (alone, _) = engine(&gemma3(), kv, 64, None).0.submit(r.clone()).map(collect).expect("submit");
            assert_eq!(&alone, &t.0, "{kv}: an answer changed beside its neighbours in a windowed pool");
        }
    }
}

/// A prompt several windows long, run twice: the second run starts from cached pages of
/// more positions than the window (the windowed groups' pages of old blocks went back to
/// the cache as the first run passed them) and samples the same bits.
#[test]
fn a_prefix_hit_longer_than_the_window_keeps_the_bits() {
    for kv in ["f16-slab", "q8-slab"] {
        let prompt: Vec<u32> = (0..61).map(|j| (j * 13 % 250) as u32 + 1).collect();
        let target = req(prompt.clone(), 7, 16);
        let (alone, _) = engine(&gemma3(), kv, 64, None).0.submit(target.clone()).map(collect).expect("submit");
        let (e, _) = engine(&gemma3(), kv, 64, None);
        let mut warm = target.clone();
        warm.seed = 1;
        collect(e.submit(warm).expect("submit"));
        let (again, usage) = collect(e.submit(target.clone()).expect("submit"));
        assert!(usage.cached_tokens > 4 * WINDOW, "{kv}: {usage:?}");
        assert_eq!(usage.cached_tokens, prompt.len() - 1, "{kv}: {usage:?}");
        assert_eq!(again, alone, "{kv}: the answer changed after a prefix hit longer than the window");

        // A small pool: the three share cached pages, and those of old blocks go back
        // (to the cache, and are evicted) while the others still hold theirs.
        let watch = Arc::new(Widest::default());
        let (e, _) = engine(&gemma3(), kv, 24, Some(watch.clone()));
        let outs = run_all(&e, &[target.clone(), target.clone(), target.clone()]);
        for (o, _) in &outs {
            assert_eq!(o, &alone, "{kv}: the answer changed in a small pool");
        }
        settle(&e);
        watch.assert_sound();
    }
}

/// P/D over the windowed model: a held prefill keeps every group's pages for its lease,
/// the decode side takes its own cached pages (every group of a block, or none) and
/// imports the rest, checking each page's group hash, and answers with the bits of one
/// engine running the whole request.
#[test]
fn pd_moves_every_group_and_keeps_the_bits() {
    let (p, _) = engine(&gemma3(), "f16-slab", 64, None);
    let (d, _) = engine(&gemma3(), "f16-slab", 64, None);
    let mut local_seen = 0;
    for len in [45usize, 53] {
        let prompt: Vec<u32> = (0..len).map(|j| (j * 13 % 250) as u32 + 1).collect();
        let (want, _) =
            engine(&gemma3(), "f16-slab", 64, None).0.submit(req(prompt.clone(), 7, 12)).map(collect).unwrap();
        let id = format!("lease-{len}");
        collect(p.submit_held(req(prompt.clone(), 7, 1), id.clone(), Duration::from_secs(30)).expect("prefill"));
        let lease = p.lease(&id).expect("lease");
        assert_eq!(lease.blocks.len(), len.div_ceil(4) * 3, "a lease keeps every group's pages");
        let mut pre = d.hold_prefix(&prompt).expect("hold");
        let need = pre.needed(len);
        let env = p.take_lease(&id, pre.n_blocks(), Some(need)).expect("fetch");
        d.import_into(&mut pre, &prompt, &env).expect("import");
        assert_eq!(pre.n_blocks(), need);
        local_seen += pre.n_local();
        let (got, usage) = collect(d.submit_preloaded(req(prompt.clone(), 7, 12), pre).expect("decode"));
        assert_eq!(usage.cached_tokens, len - 1);
        assert_eq!(got, want, "prompt of {len}: decode from imported KV differs from one engine");
        settle(&d);
    }
    assert!(local_seen > 0, "the 53-token prompt found the 45-token one's pages in D's cache");
    // Another prompt's KV is refused: its pages' group hashes are not this prompt's.
    let a: Vec<u32> = (0..40).map(|j| j as u32 + 5).collect();
    let b: Vec<u32> = (0..40).map(|j| j as u32 + 6).collect();
    collect(p.submit_held(req(a, 7, 1), "a".into(), Duration::from_secs(30)).expect("prefill"));
    let env = p.take_lease("a", 0, None).expect("fetch");
    let mut pre = d.hold_prefix(&b).expect("hold");
    assert!(d.import_into(&mut pre, &b, &env).is_err(), "another prompt's KV was imported");
}

/// Preemption of windowed sequences: eight prompts of 100 tokens generating 24 each in a
/// pool of 30 blocks' bytes, where each sequence's global layer grows to 124 positions
/// while its windowed layers keep 8: the eight cannot all fit, so running sequences
/// preempt each other and recompute (checked through the engine's count: with the model
/// windowed on every layer, admission counts what a sequence will hold and preemption is
/// only a matter of timing, see serve's determinism test); every answer keeps the bits
/// it has alone.
#[test]
fn preempted_windowed_sequences_keep_their_bits() {
    let reqs: Vec<Request> = prompts()
        .into_iter()
        .map(|mut r| {
            r.max_tokens = 24;
            r
        })
        .collect();
    let (e, _) = engine(&gemma3(), "f16-slab", 256, None);
    let alone: Vec<_> = reqs.iter().map(|r| collect(e.submit(r.clone()).expect("submit")).0).collect();
    let watch = Arc::new(Widest::default());
    let (e, _) = engine(&gemma3(), "f16-slab", 30, Some(watch.clone()));
    let outs = run_all(&e, &reqs);
    let st = e.stats();
    assert!(st.preemptions > 0, "the small pool never preempted: {st:?}");
    for (i, (o, _)) in outs.iter().enumerate() {
        assert_eq!(o, &alone[i], "request {i} changed under preemption in a windowed pool");
    }
    settle(&e);
    watch.assert_sound();
}
