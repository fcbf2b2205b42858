//! The scheduler over a hybrid model (the tiny Qwen3.5: three Gated DeltaNet layers whose
//! state lives in the pool's state column, one gated attention layer; docs/spec/kv.md,
//! "Recurrent state beside the pages"): answers keep their bits alone, in a batch with
//! chunked prefills crossing block rows, after a prefix hit that resumes from a state
//! snapshot, under preemption, with speculation (the state rolled back past rejected
//! drafts), through a P/D hand-off and a disk-cache restart.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use support::{collect, sampled as req};
use tl_arch_qwen3_5 as _;
use tl_core::{EngineConfig, KvConfig, ModelRunner, Tokenizer};
use tl_engine::{DiskCacheConfig, Engine, EngineError, EngineOptions, Request, Speculation, Usage};

const B: usize = 4;

fn qwen35() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../arch-qwen3-5/tests/fixtures/tiny-qwen3_5")
}

fn engine(model: &Path, kv: &str, n_blocks: u32) -> Engine {
    engine_snapshots(model, kv, n_blocks, 0)
}

/// An engine whose hybrid state is kept every `snapshot_tokens` positions (0: every block).
fn engine_snapshots(model: &Path, kv: &str, n_blocks: u32, snapshot_tokens: usize) -> Engine {
    engine_disk(model, kv, n_blocks, snapshot_tokens, None)
}

/// [`engine_snapshots`] keeping its prefix blocks on disk under `disk` when given.
fn engine_disk(model: &Path, kv: &str, n_blocks: u32, snapshot_tokens: usize, disk: Option<&Path>) -> Engine {
    let kv = KvConfig {
        backend: kv.into(),
        block_tokens: B as u32,
        n_blocks: Some(n_blocks),
        state_snapshot_tokens: snapshot_tokens,
        ..KvConfig::default()
    };
    let cfg = EngineConfig {
        max_batch_tokens: 256,
        max_seqs: 16,
        prefill_chunk: 23, // not a multiple of B: prefill steps end mid-row and cross rows
        threads: 2,
        kv,
        ..EngineConfig::default()
    };
    let runner = ModelRunner::load(model, &cfg).expect("load");
    let tok = Arc::new(Tokenizer::load(runner.config()).expect("tokenizer"));
    let disk_cache =
        disk.map(|d| DiskCacheConfig { dir: d.to_path_buf(), max_bytes: 1 << 30, fingerprint: "fp_hybrid".into() });
    let opts = EngineOptions { max_queue: 64, speculate: None, disk_cache, ..Default::default() };
    Engine::start(runner, tok, opts).expect("start")
}

/// Eight prompts of 70 to 105 tokens (byte ids), each with `gen` tokens to generate.
fn prompts(gen: usize) -> Vec<Request> {
    (0..8)
        .map(|i| req((0..70 + 5 * i).map(|j| ((i * 37 + j * 11) % 250) as u32 + 1).collect(), 40 + i as u64, gen))
        .collect()
}

fn run_all(e: &Engine, reqs: &[Request]) -> Vec<(Vec<(u32, u64)>, Usage)> {
    let rxs: Vec<_> = reqs.iter().map(|r| e.submit(r.clone()).expect("submit")).collect();
    rxs.into_iter().map(collect).collect()
}

fn alone(kv: &str, r: &Request) -> Vec<(u32, u64)> {
    engine(&qwen35(), kv, 256).submit(r.clone()).map(collect).expect("submit").0
}

fn settle(e: &Engine) {
    std::thread::sleep(Duration::from_millis(50));
    let st = e.stats();
    assert_eq!((st.kv_blocks_in_use, st.running, st.waiting), (0, 0, 0), "pool not clean: {st:?}");
}

#[test]
fn hybrid_answers_keep_their_bits_in_a_batch_of_chunked_prefills() {
    for kv in ["f16-slab", "q8-slab"] {
        let e = engine(&qwen35(), kv, 512);
        let together = run_all(&e, &prompts(12));
        settle(&e);
        for (i, (r, t)) in prompts(12).iter().zip(&together).enumerate() {
            assert_eq!(alone(kv, r), t.0, "{kv}: request {i} changed beside its neighbours");
        }
    }
}

#[test]
fn a_prefix_hit_resumes_from_the_state_snapshot_with_the_same_bits() {
    for kv in ["f16-slab", "q8-slab"] {
        let prompt: Vec<u32> = (0..61).map(|j| (j * 13 % 250) as u32 + 1).collect();
        let target = req(prompt.clone(), 7, 16);
        let want = alone(kv, &target);
        let e = engine(&qwen35(), kv, 256);
        let mut warm = target.clone();
        warm.seed = 1;
        collect(e.submit(warm).expect("submit"));
        let (again, usage) = collect(e.submit(target.clone()).expect("submit"));
        // Whole blocks only (the state is kept at block boundaries), leaving one token.
        assert_eq!(usage.cached_tokens, (prompt.len() - 1) / B * B, "{kv}: {usage:?}");
        assert_eq!(again, want, "{kv}: the answer changed after a prefix hit");
        // A prompt that shares only part of a block reuses the whole blocks before it.
        let mut other = prompt.clone();
        other[30] += 1;
        let branch = req(other, 7, 8);
        let (got, usage) = collect(e.submit(branch.clone()).expect("submit"));
        assert_eq!(usage.cached_tokens, 28, "{kv}: {usage:?}");
        assert_eq!(got, alone(kv, &branch), "{kv}: a branch inside a block changed its answer");
        settle(&e);
    }
}

#[test]
fn sparse_snapshots_shorten_a_prefix_hit_to_the_last_snapshot_and_keep_the_bits() {
    // A snapshot every 4 blocks (16 positions) and at the end of every step (prefill
    // chunks of 23 end in rows 5, 11 and 15): of the prompt's 15 whole blocks, the last
    // one whose state was kept is row 11, so the hit covers 48 positions.
    let prompt: Vec<u32> = (0..61).map(|j| (j * 13 % 250) as u32 + 1).collect();
    let target = req(prompt.clone(), 7, 16);
    let e = engine_snapshots(&qwen35(), "f16-slab", 256, 16);
    let mut warm = target.clone();
    warm.seed = 1;
    collect(e.submit(warm).expect("submit"));
    let (again, usage) = collect(e.submit(target.clone()).expect("submit"));
    assert_eq!(usage.cached_tokens, 48, "{usage:?}");
    assert_eq!(again, alone("f16-slab", &target), "the answer changed after a hit on a sparse snapshot");
    settle(&e);
}

#[test]
fn preempted_hybrid_sequences_keep_their_bits() {
    let reqs = prompts(24);
    let want: Vec<_> = reqs.iter().map(|r| alone("f16-slab", r)).collect();
    // 64 pages of 4 positions: eight sequences of up to 129 positions cannot all fit.
    let e = engine(&qwen35(), "f16-slab", 64);
    let outs = run_all(&e, &reqs);
    let st = e.stats();
    assert!(st.preemptions > 0, "the small pool never preempted: {st:?}");
    for (i, (o, _)) in outs.iter().enumerate() {
        assert_eq!(o, &want[i], "request {i} changed under preemption");
    }
    settle(&e);
}

/// Speculation on a hybrid (docs/spec/kv.md, "Speculation"): a verify step keeps the
/// state after each position it may roll back to in spare slots, and a rejected draft's
/// positions leave nothing in the state. Prompt-lookup drafts, greedy and sampled,
/// batched with chunked prefills: every token and logprob is the bits of plain decoding,
/// with drafts both accepted and rejected, and no slot left behind.
#[test]
fn speculation_on_a_hybrid_keeps_the_bits_of_plain_decoding() {
    // Repeating prompts: prompt lookup drafts often, and the tiny model often disagrees.
    let base: Vec<Vec<u32>> =
        (0..4u32).map(|i| (0..40 + 9 * i).map(|j| 5 + (j % (7 + i)) * 11 + i).collect()).collect();
    for kv in ["f16-slab", "q8-slab"] {
        for greedy in [true, false] {
            let make = |i: usize, p: Vec<u32>| {
                let mut r = req(p, 70 + i as u64, 24);
                if greedy {
                    r.params.temperature = 0.0;
                }
                r
            };
            // Greedy: the prompt, its own greedy answer, the prompt again; the answer then
            // tends to come back, and prompt lookup drafts it (some drafts accepted).
            let reqs: Vec<Request> = base
                .iter()
                .enumerate()
                .map(|(i, p)| match greedy {
                    true => {
                        let first: Vec<u32> = alone(kv, &make(i, p.clone())).iter().map(|t| t.0).collect();
                        make(i, [&p[..], &first[..], &p[..]].concat())
                    }
                    false => make(i, p.clone()),
                })
                .collect();
            let plain: Vec<_> = reqs.iter().map(|r| alone(kv, r)).collect();
            let e = engine(&qwen35(), kv, 512);
            let spec: Vec<Request> =
                reqs.iter().map(|r| Request { speculate: Some(Speculation::Ngram { k: 4 }), ..r.clone() }).collect();
            let got = run_all(&e, &spec);
            for (i, (g, want)) in got.iter().zip(&plain).enumerate() {
                assert_eq!(&g.0, want, "{kv}, greedy {greedy}: prompt {i} differs from plain decoding");
            }
            settle(&e);
            let st = e.stats();
            assert!(st.draft_tokens > st.draft_accepted, "{kv}, greedy {greedy}: no draft rejected: {st:?}");
            if greedy {
                assert!(st.draft_accepted > 0, "{kv}: no draft accepted: {st:?}");
            }
        }
    }
}

/// A draft model with recurrent layers is refused, naming the field: its own state would
/// keep the rejected drafts.
#[test]
fn a_hybrid_draft_model_is_refused_naming_the_field() {
    let cfg = EngineConfig {
        kv: KvConfig { block_tokens: B as u32, n_blocks: Some(64), ..KvConfig::default() },
        ..EngineConfig::default()
    };
    let target = ModelRunner::load(&qwen35(), &cfg).expect("load");
    let draft = ModelRunner::load(&qwen35(), &cfg).expect("load draft");
    let tok = Arc::new(Tokenizer::load(target.config()).expect("tokenizer"));
    match Engine::start_with_draft(target, Some(draft), tok, EngineOptions::default()) {
        Err(EngineError::BadRequest { field, reason }) => {
            assert_eq!(field, "draft");
            assert!(reason.contains("recurrent"), "{reason}");
        }
        Err(other) => panic!("wrong error: {other}"),
        Ok(_) => panic!("a hybrid draft model was accepted"),
    }
}

/// P/D on a hybrid: the prefill engine's lease carries its pages, the state column's holes
/// and the slot of the last whole row before the prompt's last position (its prefill ends a
/// step at that row boundary); the decode engine imports them (envelope version 3), computes
/// the under-`B` positions after that row itself, and answers with the bits of one engine.
/// A second prompt extending the first finds rows and a state snapshot in the decode
/// engine's own prefix cache.
#[test]
fn a_hybrid_pd_handoff_gives_the_single_engine_answer() {
    for kv in ["f16-slab", "q8-slab"] {
        // Sparse snapshots (every 64 positions) and steps of 23: the row-end slot the
        // decode side needs is there because the held prefill stops at it.
        let make = || engine_snapshots(&qwen35(), kv, 512, 64);
        let (p, d, one) = (make(), make(), make());
        let base: Vec<u32> = (0..90u32).map(|i| 2 + (i * 13) % 240).collect();
        let mut local_seen = 0;
        for len in [3usize, 9, 30, 61, 90] {
            let prompt = &base[..len];
            let r = |n| req(prompt.to_vec(), 5, n);
            let want = one.submit(r(10)).map(collect).expect("submit").0;
            let id = format!("lease-{len}");
            collect(p.submit_held(r(1), id.clone(), Duration::from_secs(30)).expect("prefill"));
            let mut pre = d.hold_prefix(prompt).expect("hold");
            let need = pre.needed(len);
            assert_eq!(need, (len - 1) / B * 2, "whole rows before the last position, two entries each");
            let env = p.take_lease(&id, pre.n_blocks(), Some(need)).expect("fetch");
            if need > pre.n_blocks() {
                let v = tl_core::Envelope::read(&env).expect("envelope").header().version;
                assert_eq!(v, 3, "a hybrid lease travels as envelope version 3");
            }
            d.import_into(&mut pre, prompt, &env).expect("import");
            local_seen += pre.n_local();
            let (got, usage) = collect(d.submit_preloaded(r(10), pre).expect("decode"));
            assert_eq!(got, want, "{kv}, prompt of {len}: decode from imported KV and state differs");
            assert_eq!(usage.cached_tokens, (len - 1) / B * B, "{kv}, prompt of {len}: whole rows preloaded");
            settle(&d);
        }
        assert!(local_seen > 0, "{kv}: a longer prompt found rows and a snapshot in D's own prefix cache");
        settle(&p);
    }
}

/// The disk cache on a hybrid: a file holds a block-table row (its page and its state slot,
/// or a hole where the row kept no snapshot, envelope v3); a restarted engine's hit ends at
/// the last row whose snapshot is on disk and answers with the bits of a cold run.
#[test]
fn a_restarted_hybrid_engine_answers_from_disk_with_the_same_bits() {
    for kv in ["f16-slab", "q8-slab"] {
        let p: Vec<u32> = (0..70u32).map(|i| 3 + (i * 7) % 200).collect();
        let r = || req(p.clone(), 9, 8);
        let cold = engine(&qwen35(), kv, 256).submit(r()).map(collect).expect("cold").0;
        let dir = tempfile::tempdir().expect("tempdir");
        // Snapshots every 3 rows and at step ends (steps of 23): rows with and without one.
        let start = || engine_disk(&qwen35(), kv, 256, 3 * B, Some(dir.path()));
        {
            let e = start();
            assert_eq!(e.submit(r()).map(collect).expect("write").0, cold, "{kv}: writing through changes nothing");
            settle(&e);
            assert!(e.stats().disk.written >= 17, "{kv}: {:?}", e.stats().disk);
        }
        let e = start();
        let (got, usage) = e.submit(r()).map(collect).expect("from disk");
        assert_eq!(got, cold, "{kv}: the answer from disk keeps every bit of a cold run's");
        assert!(usage.cached_tokens >= 12 * B, "{kv}: {} positions from disk", usage.cached_tokens);
        assert_eq!(usage.cached_tokens % (3 * B), 0, "{kv}: the hit ends at a row with a snapshot");
        settle(&e);
        assert_eq!(e.stats().disk.refused, 0);
    }
}
