//! Prompt caches on disk (engine/src/disk_cache.rs): a restarted engine over the same
//! directory answers a long shared prompt without prefilling its full blocks, and so does
//! one whose pool evicted them; a corrupted, truncated or foreign file is refused,
//! deleted and recomputed (the answer keeps every bit of a cold run's); the directory
//! never grows past its bound, oldest files out first.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tl_arch_llama as _;
use tl_core::{EngineConfig, KvConfig, ModelRunner, SamplingParams, Tokenizer};
use tl_engine::{DiskCacheConfig, Engine, EngineOptions, Event, Request, Stats};

mod support;
use support::tiny;

const B: usize = 16;

/// An engine over the tiny model with `n_blocks` KV blocks of backend `kv`, keeping
/// blocks under `disk` (bounded by `max_bytes`) when given.
fn engine(kv: &str, n_blocks: u32, disk: Option<(&Path, u64)>) -> Engine {
    let cfg = EngineConfig {
        max_batch_tokens: 96,
        max_seqs: 4,
        prefill_chunk: 24,
        threads: 1,
        kv: KvConfig { backend: kv.into(), block_tokens: B as u32, n_blocks: Some(n_blocks), ..KvConfig::default() },
        ..EngineConfig::default()
    };
    let runner = ModelRunner::load(&tiny(), &cfg).expect("load");
    let tok = Arc::new(Tokenizer::load(runner.config()).expect("tokenizer"));
    let disk_cache = disk.map(|(dir, max_bytes)| DiskCacheConfig {
        dir: dir.to_path_buf(),
        max_bytes,
        fingerprint: "fp_test".into(),
    });
    Engine::start(runner, tok, EngineOptions { max_queue: 16, disk_cache, ..Default::default() }).expect("start")
}

fn req(prompt: &[u32]) -> Request {
    Request {
        prompt: prompt.to_vec(),
        params: SamplingParams { temperature: 0.9, ..SamplingParams::default() },
        seed: 77,
        choice: 0,
        max_tokens: 6,
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

/// The answer to `prompt`, bit for bit, and its `cached_tokens` (prompt positions not
/// prefilled).
fn answer(e: &Engine, prompt: &[u32]) -> (Tokens, usize) {
    let mut rx = e.submit(req(prompt)).expect("submit");
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

/// The engine's stats once it is idle and has published them (they are published at
/// the end of a step, after the events a test reads).
fn settled(e: &Engine, done: impl Fn(&Stats) -> bool) -> Stats {
    let t0 = Instant::now();
    while !(done(&e.stats()) && e.stats().running + e.stats().waiting == 0) {
        assert!(t0.elapsed() < Duration::from_secs(10), "engine did not settle: {:?}", e.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
    e.stats()
}

/// A 70-token prompt: 4 full blocks can be reused (the last token is always fed).
fn prompt(seed: u32) -> Vec<u32> {
    (0..70).map(|i| 3 + (i * 7 + seed * 13) % 200).collect()
}

/// The file of block `k` of `p`.
fn block_file(dir: &Path, kv: &str, p: &[u32], k: usize) -> PathBuf {
    let mut h = None;
    for j in 0..=k {
        h = Some(tl_kv::block_hash(h, &p[j * B..(j + 1) * B]));
    }
    dir.join(format!("fp_test-{kv}")).join(format!("{:016x}.kvb", h.expect("k >= 0")))
}

fn kvb_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "kvb"))
        .map(|e| e.metadata().expect("meta").len())
        .sum()
}

fn restart_answers_from_disk(kv: &str) {
    let p = prompt(1);
    let cold = answer(&engine(kv, 64, None), &p);
    assert_eq!(cold.1, 0);
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let e = engine(kv, 64, Some((dir.path(), 1 << 30)));
        assert_eq!(answer(&e, &p), cold, "{kv}: writing through changes nothing");
        assert!(settled(&e, |s| s.disk.written >= 4).disk.written >= 4);
    }
    for k in 0..4 {
        assert!(block_file(dir.path(), kv, &p, k).is_file(), "{kv}: block {k} on disk");
    }
    // A new engine: an empty pool, the same directory.
    let e = engine(kv, 64, Some((dir.path(), 1 << 30)));
    let (tokens, cached) = answer(&e, &p);
    assert_eq!(cached, 4 * B, "{kv}: the 4 full blocks were not prefilled");
    assert_eq!(tokens, cold.0, "{kv}: the answer keeps every bit of a cold run's");
    let s = settled(&e, |s| s.disk.read == 4);
    assert_eq!((s.disk.read, s.disk.refused, s.prefix_hit_tokens), (4, 0, 4 * B));
}

#[test]
fn a_restarted_engine_answers_from_disk_without_prefilling() {
    restart_answers_from_disk("f16-slab");
}

/// The same over a q8 pool: its files are envelopes of version 2.
#[test]
fn a_restarted_q8_engine_answers_from_disk_without_prefilling() {
    restart_answers_from_disk("q8-slab");
    let dir = tempfile::tempdir().expect("tempdir");
    let p = prompt(1);
    drop(answer(&engine("q8-slab", 64, Some((dir.path(), 1 << 30))), &p));
    let env = std::fs::read(block_file(dir.path(), "q8-slab", &p, 0)).expect("file");
    assert_eq!(u32::from_le_bytes(env[8..12].try_into().expect("4")), 2, "version 2");
}

/// Blocks the pool evicted (other prompts took their place) come back from disk.
#[test]
fn evicted_blocks_come_back_from_disk() {
    let p = prompt(1);
    let cold = answer(&engine("f16-slab", 64, None), &p);
    let dir = tempfile::tempdir().expect("tempdir");
    let e = engine("f16-slab", 12, Some((dir.path(), 1 << 30)));
    assert_eq!(answer(&e, &p), cold);
    for s in 2..6 {
        answer(&e, &prompt(s));
    }
    settled(&e, |_| true);
    let (tokens, cached) = answer(&e, &p);
    assert_eq!((tokens, cached), (cold.0, 4 * B));
    assert!(settled(&e, |s| s.disk.read > 0).disk.read > 0, "evicted blocks were read back");
}

/// Each bad file of block 1 (of 4 on disk): the engine takes block 0 from disk, refuses
/// and deletes block 1's file, prefills from there with the cold answer's bits, and
/// writes block 1 again: the same bytes as before the damage.
#[test]
fn bad_files_are_refused_recomputed_and_rewritten() {
    let p = prompt(1);
    let cold = answer(&engine("f16-slab", 64, None), &p);
    let good = tempfile::tempdir().expect("tempdir");
    drop(answer(&engine("f16-slab", 64, Some((good.path(), 1 << 30))), &p));
    let q8 = tempfile::tempdir().expect("tempdir");
    drop(answer(&engine("q8-slab", 64, Some((q8.path(), 1 << 30))), &p));
    let original = std::fs::read(block_file(good.path(), "f16-slab", &p, 1)).expect("block 1");
    let block2 = std::fs::read(block_file(good.path(), "f16-slab", &p, 2)).expect("block 2");
    let q8_block1 = std::fs::read(block_file(q8.path(), "q8-slab", &p, 1)).expect("q8 block 1");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("a flipped byte in the slabs", {
            let mut b = original.clone();
            let at = b.len() / 2;
            b[at] ^= 0x10;
            b
        }),
        ("a flipped checksum", {
            let mut b = original.clone();
            let at = b.len() - 1;
            b[at] ^= 1;
            b
        }),
        ("truncated", original[..original.len() - 9].to_vec()),
        ("empty", Vec::new()),
        ("another block's file", block2),
        ("a q8 pool's file", q8_block1),
        ("not an envelope", b"hello".repeat(100)),
        ("larger than the bound", vec![0; (1 << 20) + 1]),
    ];
    for (what, bytes) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let from = good.path().join("fp_test-f16-slab");
        let to = dir.path().join("fp_test-f16-slab");
        std::fs::create_dir_all(&to).expect("mkdir");
        for f in std::fs::read_dir(&from).expect("dir").flatten() {
            std::fs::copy(f.path(), to.join(f.file_name())).expect("copy");
        }
        let bad = block_file(dir.path(), "f16-slab", &p, 1);
        std::fs::write(&bad, &bytes).expect("damage");
        let e = engine("f16-slab", 64, Some((dir.path(), 1 << 20)));
        let (tokens, cached) = answer(&e, &p);
        assert_eq!(cached, B, "{what}: only block 0 was served from disk");
        assert_eq!(tokens, cold.0, "{what}: the answer keeps every bit of a cold run's");
        let s = settled(&e, |s| s.disk.refused == 1 && s.disk.written >= 1);
        assert_eq!((s.disk.read, s.disk.refused), (1, 1), "{what}");
        drop(e);
        assert_eq!(std::fs::read(&bad).expect("rewritten"), original, "{what}: recomputed to the same bytes");
    }
}

/// Many distinct prompts through a directory bounded at 3.5 blocks: after each, the
/// files fit, and the ones that went were the oldest.
#[test]
fn the_directory_never_grows_past_its_bound() {
    let probe = tempfile::tempdir().expect("tempdir");
    drop(answer(&engine("f16-slab", 64, Some((probe.path(), 1 << 30))), &prompt(1)));
    let blk = std::fs::metadata(block_file(probe.path(), "f16-slab", &prompt(1), 0)).expect("file").len();
    let max = 3 * blk + blk / 2;
    let dir = tempfile::tempdir().expect("tempdir");
    let sub = dir.path().join("fp_test-f16-slab");
    let e = engine("f16-slab", 64, Some((dir.path(), max)));
    for s in 1..7 {
        let p = prompt(s);
        answer(&e, &p[..40]); // two full blocks
        settled(&e, |st| st.disk.written == 2 * s as usize);
        assert!(kvb_bytes(&sub) <= max, "prompt {s}: {} bytes on disk, bound {max}", kvb_bytes(&sub));
        // mtimes are coarse (a clock tick): keep the prompts' files apart in time.
        std::thread::sleep(Duration::from_millis(30));
    }
    let last = prompt(6);
    for k in 0..2 {
        assert!(block_file(dir.path(), "f16-slab", &last, k).is_file(), "the newest blocks stay");
    }
    assert!(!block_file(dir.path(), "f16-slab", &prompt(1), 0).exists(), "the oldest went first");
    assert!(e.stats().disk.dropped >= 9, "{:?}", e.stats().disk);
}

/// A deterministic sweep over real disk files (one f16, one q8: envelope versions 1 and
/// 2) through the decoder the disk path reads with: every single flipped byte and every
/// truncation is refused, and the refusal takes no block.
#[test]
fn every_flipped_byte_and_truncation_of_a_disk_file_is_refused() {
    let p = prompt(1);
    for kv in ["f16-slab", "q8-slab"] {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(answer(&engine(kv, 64, Some((dir.path(), 1 << 30))), &p));
        let env = std::fs::read(block_file(dir.path(), kv, &p, 0)).expect("file");
        let at = |o: usize| u32::from_le_bytes(env[o..o + 4].try_into().expect("4"));
        let g = tl_kv::KvGeometry { n_layers: at(16), n_kv_heads: at(20), head_dim: at(24), block_tokens: at(28) };
        let pool = || match kv {
            "f16-slab" => tl_kv::KvPool::with_prefix_cache(g, 2, true).expect("pool"),
            _ => tl_kv::KvPool::q8(g, 2, true).expect("q8 pool"),
        };
        assert_eq!(pool().import(&env).expect("the intact file imports").len(), 1, "{kv}");
        let mut p2 = pool();
        for i in 0..env.len() {
            let mut bad = env.clone();
            bad[i] ^= 1 << (i % 8);
            assert!(p2.import(&bad).is_err(), "{kv}: byte {i} flipped was accepted");
            assert!(p2.import(&env[..i]).is_err(), "{kv}: {i} bytes of {} were accepted", env.len());
            assert_eq!(p2.n_free(), 2, "{kv}: a refusal took a block");
        }
    }
}

/// A model with attention windows (more than one KV layer group): a file holds a whole
/// block-table row (every group's page), and a restarted engine answers from them with the
/// bits of a cold run.
#[test]
fn a_windowed_model_answers_from_disk_after_a_restart() {
    use tl_arch_gemma3 as _;
    let model = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../arch-gemma3/tests/fixtures/tiny-gemma3");
    let start = |disk: Option<&Path>| {
        let cfg = EngineConfig {
            max_batch_tokens: 96,
            threads: 1,
            kv: KvConfig { block_tokens: B as u32, n_blocks: Some(64), ..KvConfig::default() },
            ..EngineConfig::default()
        };
        let runner = ModelRunner::load(&model, &cfg).expect("load");
        assert!(runner.kv_layout().n_groups() > 1, "the fixture is windowed");
        let tok = Arc::new(Tokenizer::load(runner.config()).expect("tokenizer"));
        let disk_cache =
            disk.map(|d| DiskCacheConfig { dir: d.to_path_buf(), max_bytes: 1 << 30, fingerprint: "fp_test".into() });
        Engine::start(runner, tok, EngineOptions { disk_cache, ..Default::default() }).expect("start")
    };
    let p = prompt(1);
    let cold = answer(&start(None), &p);
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let e = start(Some(dir.path()));
        assert_eq!(answer(&e, &p), cold, "writing through changes nothing");
        assert!(settled(&e, |s| s.disk.written >= 4).disk.written >= 4);
    }
    let e = start(Some(dir.path()));
    let (tokens, cached) = answer(&e, &p);
    assert_eq!(tokens, cold.0, "the answer keeps every bit of a cold run's");
    assert_eq!(cached, 4 * B, "the 4 full rows came from disk");
    let s = settled(&e, |s| s.disk.read == 4);
    assert_eq!((s.disk.read, s.disk.refused), (4, 0));
}
