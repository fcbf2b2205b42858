//! The scheduler over Gemma 4's shared KV (the tiny Gemma 4s: six layers, the last two
//! reading the K/V of layers 3 and 2 and owning no page; sliding layers of window 8 beside
//! full layers of a larger head size, the sliding rows padded to the full ones'; the second
//! fixture with `attention_k_eq_v` and a double-wide MLP): an answer keeps its bits in a
//! batch, in any prefill chunking, after a prefix hit at a block boundary, under
//! preemption, with speculation that rejects drafts, through a P/D hand-off and after a
//! disk-cache restart, on the f16 and the q8 cache.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use support::{collect, crate_fixture, sampled as req};
use tl_arch_gemma4 as _;
use tl_core::{EngineConfig, KvConfig, ModelRunner, Tokenizer};
use tl_engine::{DiskCacheConfig, Engine, EngineOptions, Request, Speculation, Usage};

const B: usize = 4;
const KVS: [&str; 2] = ["f16-slab", "q8-slab"];

/// The fixtures: plain, with `attention_k_eq_v` and the double-wide MLP, and with the MoE block.
fn models() -> [PathBuf; 3] {
    [
        crate_fixture("arch-gemma4", "tiny-gemma4"),
        crate_fixture("arch-gemma4", "tiny-gemma4-kv"),
        crate_fixture("arch-gemma4", "tiny-gemma4-moe"),
    ]
}

/// How an engine is set up; [`Setup::new`] gives prefill steps of 23 positions (not a
/// multiple of B: steps end mid-row and cross rows) over 256 pages.
#[derive(Clone)]
struct Setup<'a> {
    model: &'a Path,
    kv: &'a str,
    n_blocks: u32,
    prefill_chunk: usize,
    disk: Option<&'a Path>,
}

impl<'a> Setup<'a> {
    fn new(model: &'a Path, kv: &'a str) -> Self {
        Setup { model, kv, n_blocks: 256, prefill_chunk: 23, disk: None }
    }

    fn start(&self) -> Engine {
        let kv = KvConfig {
            backend: self.kv.into(),
            block_tokens: B as u32,
            n_blocks: Some(self.n_blocks),
            ..KvConfig::default()
        };
        let cfg = EngineConfig {
            max_batch_tokens: 256,
            max_seqs: 16,
            prefill_chunk: self.prefill_chunk,
            threads: 2,
            kv,
            ..EngineConfig::default()
        };
        let runner = ModelRunner::load(self.model, &cfg).expect("load");
        assert!(runner.kv_layout().owning_layers() < runner.kv_layout().n_layers(), "the fixture shares KV");
        let tok = Arc::new(Tokenizer::load(runner.config()).expect("tokenizer"));
        let disk_cache = self.disk.map(|d| DiskCacheConfig {
            dir: d.to_path_buf(),
            max_bytes: 1 << 30,
            fingerprint: "fp_gemma4".into(),
        });
        let opts = EngineOptions { max_queue: 64, speculate: None, disk_cache, ..Default::default() };
        Engine::start(runner, tok, opts).expect("start")
    }

    /// `r`'s answer from a fresh engine of this setup, alone.
    fn alone(&self, r: &Request) -> Vec<(u32, u64)> {
        self.start().submit(r.clone()).map(collect).expect("submit").0
    }
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

fn settle(e: &Engine) {
    std::thread::sleep(Duration::from_millis(50));
    let st = e.stats();
    assert_eq!((st.kv_blocks_in_use, st.running, st.waiting), (0, 0, 0), "pool not clean: {st:?}");
}

#[test]
fn gemma4_answers_keep_their_bits_in_a_batch() {
    for model in &models() {
        for kv in KVS {
            let s = Setup::new(model, kv);
            let e = s.start();
            let together = run_all(&e, &prompts(12));
            settle(&e);
            for (i, (r, t)) in prompts(12).iter().zip(&together).enumerate() {
                assert_eq!(s.alone(r), t.0, "{model:?} {kv}: request {i} changed beside its neighbours");
            }
        }
    }
}

#[test]
fn gemma4_prefill_in_any_chunking_gives_the_bits_of_one_prefill() {
    for model in &models() {
        for kv in KVS {
            // 256 positions a step: every prompt is one prefill step.
            let one = Setup { prefill_chunk: 256, ..Setup::new(model, kv) };
            for r in prompts(8).iter().step_by(3) {
                let want = one.alone(r);
                for chunk in [1, 5, 8, 23] {
                    let got = Setup { prefill_chunk: chunk, ..one.clone() }.alone(r);
                    assert_eq!(got, want, "{model:?} {kv}: prefill in steps of {chunk} differs from one prefill");
                }
            }
        }
    }
}

/// A 40-position prompt (10 whole rows) warms the cache; a 61-position prompt extending
/// it starts from those rows exactly (a hit ending at a block boundary, well past the
/// window, with the shared layers reading their sources' cached rows) and answers with the
/// bits of a cold run; so does a prompt that leaves the first one's rows mid-block (it
/// reuses the 30 positions before its first new token, the last of them mid-row).
#[test]
fn a_gemma4_prefix_hit_at_a_block_boundary_keeps_the_bits() {
    for model in &models() {
        for kv in KVS {
            let s = Setup::new(model, kv);
            let prompt: Vec<u32> = (0..61).map(|j| (j * 13 % 250) as u32 + 1).collect();
            let target = req(prompt.clone(), 7, 16);
            let cold = s.alone(&target);
            let e = s.start();
            let (_, usage) = collect(e.submit(req(prompt[..40].to_vec(), 1, 4)).expect("warm"));
            assert_eq!(usage.cached_tokens, 0);
            let (got, usage) = collect(e.submit(target.clone()).expect("submit"));
            assert_eq!(usage.cached_tokens, 40, "{model:?} {kv}: {usage:?}");
            assert_eq!(got, cold, "{model:?} {kv}: the answer changed after a hit at a block boundary");
            let mut other = prompt.clone();
            other[30] += 1;
            let branch = req(other, 7, 8);
            let (got, usage) = collect(e.submit(branch.clone()).expect("submit"));
            assert_eq!(usage.cached_tokens, 30, "{model:?} {kv}: {usage:?}");
            assert_eq!(got, s.alone(&branch), "{model:?} {kv}: a branch inside a block changed its answer");
            settle(&e);
        }
    }
}

#[test]
fn preempted_gemma4_sequences_keep_their_bits() {
    for model in &models() {
        let reqs = prompts(24);
        let s = Setup::new(model, "f16-slab");
        let want: Vec<_> = reqs.iter().map(|r| s.alone(r)).collect();
        // 64 pages: a sequence of up to 129 positions holds 33 pages of the full group
        // and a few of each sliding group, so eight cannot all fit.
        let e = Setup { n_blocks: 64, ..s }.start();
        let outs = run_all(&e, &reqs);
        let st = e.stats();
        assert!(st.preemptions > 0, "{model:?}: the small pool never preempted: {st:?}");
        for (i, (o, _)) in outs.iter().enumerate() {
            assert_eq!(o, &want[i], "{model:?}: request {i} changed under preemption");
        }
        settle(&e);
    }
}

/// Prompt-lookup drafts, greedy and sampled, batched with chunked prefills: every token
/// and logprob is the bits of plain decoding, with drafts both accepted and rejected (a
/// rejected draft's K/V, written by the owning layers and read by the shared ones, is
/// overwritten before anything reads it).
#[test]
fn speculation_on_gemma4_keeps_the_bits_of_plain_decoding() {
    // Repeating prompts: prompt lookup drafts often, and the tiny model often disagrees.
    let base: Vec<Vec<u32>> =
        (0..4u32).map(|i| (0..40 + 9 * i).map(|j| 5 + (j % (7 + i)) * 11 + i).collect()).collect();
    for model in &models() {
        for kv in KVS {
            let s = Setup::new(model, kv);
            for greedy in [true, false] {
                let make = |i: usize, p: Vec<u32>| {
                    let mut r = req(p, 70 + i as u64, 24);
                    if greedy {
                        r.params.temperature = 0.0;
                    }
                    r
                };
                // Greedy: the prompt, its own greedy answer, the prompt again; the answer
                // then tends to come back, and prompt lookup drafts it.
                let reqs: Vec<Request> = base
                    .iter()
                    .enumerate()
                    .map(|(i, p)| match greedy {
                        true => {
                            let first: Vec<u32> = s.alone(&make(i, p.clone())).iter().map(|t| t.0).collect();
                            make(i, [&p[..], &first[..], &p[..]].concat())
                        }
                        false => make(i, p.clone()),
                    })
                    .collect();
                let plain: Vec<_> = reqs.iter().map(|r| s.alone(r)).collect();
                let e = s.start();
                let spec: Vec<Request> = reqs
                    .iter()
                    .map(|r| Request { speculate: Some(Speculation::Ngram { k: 4 }), ..r.clone() })
                    .collect();
                let got = run_all(&e, &spec);
                for (i, (g, want)) in got.iter().zip(&plain).enumerate() {
                    assert_eq!(&g.0, want, "{model:?} {kv}, greedy {greedy}: prompt {i} differs from plain decoding");
                }
                settle(&e);
                let st = e.stats();
                assert!(st.draft_tokens > st.draft_accepted, "{model:?} {kv}, greedy {greedy}: none rejected: {st:?}");
                if greedy {
                    assert!(st.draft_accepted > 0, "{model:?} {kv}: no draft accepted: {st:?}");
                }
            }
        }
    }
}

/// P/D: the prefill engine's lease carries the owning layers' pages of every group; the
/// decode engine imports them, checking each page's group hash, and answers with the bits
/// of one engine. A longer prompt finds the shorter one's rows in the decode engine's own
/// cache.
#[test]
fn a_gemma4_pd_handoff_gives_the_single_engine_answer() {
    for model in &models() {
        for kv in KVS {
            let s = Setup::new(model, kv);
            let (p, d, one) = (s.start(), s.start(), s.start());
            let base: Vec<u32> = (0..90u32).map(|i| 2 + (i * 13) % 240).collect();
            let mut local_seen = 0;
            for len in [3usize, 9, 30, 61, 90] {
                let prompt = &base[..len];
                let r = |n| req(prompt.to_vec(), 5, n);
                let want = one.submit(r(10)).map(collect).expect("submit").0;
                let id = format!("lease-{len}");
                collect(p.submit_held(r(1), id.clone(), Duration::from_secs(30)).expect("prefill"));
                let lease = p.lease(&id).expect("lease");
                // Four groups own pages (three sliding layers, one full); the shared layers none.
                assert_eq!(lease.blocks.len(), len.div_ceil(B) * 4, "{model:?} {kv}: a lease holds the owners' pages");
                let mut pre = d.hold_prefix(prompt).expect("hold");
                let need = pre.needed(len);
                let env = p.take_lease(&id, pre.n_blocks(), Some(need)).expect("fetch");
                d.import_into(&mut pre, prompt, &env).expect("import");
                assert_eq!(pre.n_blocks(), need);
                local_seen += pre.n_local();
                let (got, usage) = collect(d.submit_preloaded(r(10), pre).expect("decode"));
                assert_eq!(got, want, "{model:?} {kv}, prompt of {len}: decode from imported KV differs");
                assert_eq!(usage.cached_tokens, len - 1, "{model:?} {kv}, prompt of {len}");
                settle(&d);
            }
            assert!(local_seen > 0, "{model:?} {kv}: a longer prompt found rows in D's own prefix cache");
            settle(&p);
        }
    }
}

/// The disk cache: a file holds a block-table row (every group's page of the owning
/// layers); a restarted engine answers from them with the bits of a cold run.
#[test]
fn a_restarted_gemma4_engine_answers_from_disk_with_the_same_bits() {
    for model in &models() {
        for kv in KVS {
            let p: Vec<u32> = (0..70u32).map(|i| 3 + (i * 7) % 200).collect();
            let r = || req(p.clone(), 9, 8);
            let s = Setup::new(model, kv);
            let cold = s.alone(&r());
            let dir = tempfile::tempdir().expect("tempdir");
            let s = Setup { disk: Some(dir.path()), ..s };
            {
                let e = s.start();
                assert_eq!(e.submit(r()).map(collect).expect("write").0, cold, "{kv}: writing through changes nothing");
                settle(&e);
                assert!(e.stats().disk.written >= 17, "{model:?} {kv}: {:?}", e.stats().disk);
            }
            let e = s.start();
            let (got, usage) = e.submit(r()).map(collect).expect("from disk");
            assert_eq!(got, cold, "{model:?} {kv}: the answer from disk keeps every bit of a cold run's");
            assert_eq!(usage.cached_tokens, 17 * B, "{model:?} {kv}: the 17 whole rows came from disk");
            settle(&e);
            assert_eq!(e.stats().disk.refused, 0);
        }
    }
}
