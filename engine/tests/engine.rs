//! The scheduler's promise, bit for bit: a seeded sequence's tokens and logprobs do not
//! depend on its neighbours, on a prefix-cache hit, or on preemption and recompute; and
//! its bookkeeping: cancellation, stop strings, the queue bound, shutdown.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tl_arch_llama as _;
use tl_core::{EngineConfig, KvConfig, ModelRunner, SamplingParams, Tokenizer};
use tl_engine::{Engine, EngineError, EngineOptions, Event, FinishReason, Request, UnboundedReceiver, Usage};

mod support;
use support::{smollm2, tiny};

fn engine(model: &Path, block_tokens: u32, n_blocks: u32, max_seqs: usize, max_queue: usize) -> Engine {
    engine_kv(model, "f16-slab", (block_tokens, n_blocks), max_seqs, max_queue)
}

/// [`engine`] over the KV backend named `kv`, blocks of `block_tokens`, `n_blocks` of them.
fn engine_kv(
    model: &Path,
    kv: &str,
    (block_tokens, n_blocks): (u32, u32),
    max_seqs: usize,
    max_queue: usize,
) -> Engine {
    let cfg = EngineConfig {
        max_batch_tokens: 96,
        max_seqs,
        prefill_chunk: 24,
        threads: 2,
        kv: KvConfig { backend: kv.into(), block_tokens, n_blocks: Some(n_blocks), ..KvConfig::default() },
        ..EngineConfig::default()
    };
    let runner = ModelRunner::load(model, &cfg).expect("load");
    let tok = Arc::new(Tokenizer::load(runner.config()).expect("tokenizer"));
    Engine::start(runner, tok, EngineOptions { max_queue, observer: None, speculate: None, ..Default::default() })
        .expect("start")
}

/// A token with its logprobs as bits.
type Tok = (u32, u64, Vec<(u32, u64)>);

/// Everything a sequence returned, with logprobs as bits.
#[derive(Debug, PartialEq, Clone)]
struct Out {
    /// (id, logprob bits, top (id, logprob bits)) per token.
    tokens: Vec<Tok>,
    text: String,
    finish: FinishReason,
    usage: Usage,
}

fn collect(mut rx: UnboundedReceiver<Event>) -> Out {
    let mut out = Out { tokens: vec![], text: String::new(), finish: FinishReason::Length, usage: Usage::default() };
    loop {
        match rx.blocking_recv().expect("engine hung up before Done") {
            Event::Token { token, text } => {
                let top = token.top.iter().map(|&(i, l)| (i, l.to_bits())).collect();
                out.tokens.push((token.id, token.logprob.to_bits(), top));
                out.text.push_str(&text);
            }
            Event::Done { finish, text, usage, .. } => {
                out.text.push_str(&text);
                out.finish = finish;
                out.usage = usage;
                return out;
            }
            Event::Error(e) => panic!("sequence failed: {e}"),
        }
    }
}

fn req(prompt: Vec<u32>, seed: u64, max_tokens: usize, temperature: f64) -> Request {
    Request {
        prompt,
        params: SamplingParams { temperature, top_k: 40, top_p: 0.95, ..SamplingParams::default() },
        seed,
        choice: 0,
        max_tokens,
        stop: vec![],
        logprobs: Some(3),
        grammar: None,
        logit_bias: vec![],
        speculate: None,
        adapter: None,
    }
}

/// 15 neighbours sharing `system`, of other lengths and parameters.
fn neighbours(system: &[u32], k: usize, max_tokens: usize) -> Vec<Request> {
    (0..15)
        .map(|i| {
            let mut p = system.to_vec();
            p.extend((0..(i * 7 % 23 + 1)).map(|j| ((i * 31 + j * 7) % k) as u32));
            let mut r = req(p, 1000 + i as u64, max_tokens / 2 + i % 5, if i % 3 == 0 { 0.0 } else { 0.8 });
            r.params.repetition_penalty = 1.0 + (i % 4) as f64 * 0.1;
            r.params.presence_penalty = (i % 2) as f64 * 0.5;
            r.choice = (i % 3) as u32;
            r
        })
        .collect()
}

/// Alone, among 15 concurrent neighbours, after a prefix hit, and under a pool small
/// enough to force preemption: the same bits every time.
fn promise(model: PathBuf, prompt: Vec<u32>, system_len: usize, vocab_for_noise: usize, max_tokens: usize) {
    promise_kv(model, "f16-slab", prompt, (system_len, vocab_for_noise), max_tokens)
}

/// [`promise`] over the KV backend named `kv`.
fn promise_kv(
    model: PathBuf,
    kv: &str,
    prompt: Vec<u32>,
    (system_len, vocab_for_noise): (usize, usize),
    max_tokens: usize,
) {
    let engine = |model: &Path, b: u32, n: u32, seqs: usize, queue: usize| engine_kv(model, kv, (b, n), seqs, queue);
    let target = req(prompt.clone(), 7, max_tokens, 0.9);
    let e = engine(&model, 4, 1024, 16, 64);
    let alone = collect(e.submit(target.clone()).expect("submit"));
    assert_eq!(alone.usage.cached_tokens, 0);
    assert!(!alone.tokens.is_empty());

    // Together with 15 others: fresh engine, so no prefix hit muddles the comparison.
    let e = engine(&model, 4, 1024, 16, 64);
    let system = &prompt[..system_len];
    let mut rxs = Vec::new();
    for (i, n) in neighbours(system, vocab_for_noise, max_tokens).into_iter().enumerate() {
        rxs.push(e.submit(n).expect("submit"));
        if i == 6 {
            rxs.push(e.submit(target.clone()).expect("submit target"));
        }
    }
    let outs: Vec<Out> = rxs.into_iter().map(collect).collect();
    assert_eq!(outs[7].tokens, alone.tokens, "target differs beside 15 concurrent sequences");
    assert_eq!(outs[7].text, alone.text);

    // A second run of the same prompt starts from cached blocks.
    let again = collect(e.submit(target.clone()).expect("submit"));
    assert!(again.usage.cached_tokens > 0, "no prefix hit: {:?}", again.usage);
    assert_eq!(again.tokens, alone.tokens, "target differs after a prefix hit");
    drop(outs);

    // A pool far too small for 16 sequences: the newest get preempted and recomputed.
    let blocks = (prompt.len() + max_tokens).div_ceil(4) as u32 + 4;
    let e = engine(&model, 4, blocks * 2, 16, 64);
    let mut rxs = vec![e.submit(target.clone()).expect("submit")];
    for n in neighbours(system, vocab_for_noise, max_tokens) {
        rxs.push(e.submit(n).expect("submit"));
    }
    let mut outs: Vec<Out> = rxs.into_iter().map(collect).collect();
    rxs = vec![e.submit(target.clone()).expect("submit")];
    for n in neighbours(system, vocab_for_noise, max_tokens).into_iter().rev() {
        rxs.push(e.submit(n).expect("submit"));
    }
    rxs.push(e.submit(target.clone()).expect("submit"));
    outs.extend(rxs.into_iter().map(collect));
    let st = e.stats();
    assert!(st.preemptions > 0, "the small pool never preempted: {st:?}");
    assert_eq!(outs[0].tokens, alone.tokens, "target differs under preemption (first in)");
    assert_eq!(outs.last().map(|o| &o.tokens), Some(&alone.tokens), "target differs under preemption (last in)");
    std::thread::sleep(Duration::from_millis(50));
    let st = e.stats();
    assert_eq!((st.kv_blocks_in_use, st.running, st.waiting), (0, 0, 0), "pool not clean: {st:?}");
}

#[test]
fn tiny_answers_do_not_depend_on_traffic() {
    let system = b"You are a careful assistant. Answer briefly. ".to_vec();
    let mut prompt: Vec<u32> = system.iter().map(|&b| b as u32).collect();
    prompt.extend(b"What is a KV cache?".iter().map(|&b| b as u32));
    promise(tiny(), prompt, system.len(), 256, 40);
}

/// The same promise over the q8 cache: prefix hits, neighbours and preemption with
/// recompute keep every bit.
#[test]
fn tiny_answers_do_not_depend_on_traffic_with_a_q8_cache() {
    let system = b"You are a careful assistant. Answer briefly. ".to_vec();
    let mut prompt: Vec<u32> = system.iter().map(|&b| b as u32).collect();
    prompt.extend(b"What is a KV cache?".iter().map(|&b| b as u32));
    promise_kv(tiny(), "q8-slab", prompt, (system.len(), 256), 40);
}

#[test]
fn smollm2_answers_do_not_depend_on_traffic() {
    let Some(model) = smollm2() else { return };
    let g = tl_core::Gguf::open(&model).expect("gguf");
    let tok = Tokenizer::from_gguf(&g).expect("tokenizer");
    let system = tok.encode("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n").expect("encode");
    let mut prompt = system.clone();
    prompt.extend(tok.encode("<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n").expect("encode"));
    promise(model, prompt, system.len(), 2000, 8);
}

#[test]
fn cancelled_sequences_free_their_blocks() {
    let e = engine(&tiny(), 4, 256, 8, 64);
    let keep = e.submit(req(vec![65; 30], 1, 30, 1.0)).expect("submit");
    let mut gone = e.submit(req(vec![66; 50], 2, 200, 1.0)).expect("submit");
    // Wait for its first token, so it holds blocks, then leave.
    assert!(matches!(gone.blocking_recv(), Some(Event::Token { .. })));
    drop(gone);
    collect(keep);
    std::thread::sleep(Duration::from_millis(100));
    let st = e.stats();
    assert_eq!((st.kv_blocks_in_use, st.running, st.cancelled), (0, 0, 1), "{st:?}");
    assert_eq!(st.kv_blocks_free + st.kv_blocks_cached, st.kv_blocks_total);
}

#[test]
fn stop_strings_eos_and_length() {
    let e = engine(&tiny(), 4, 256, 8, 64);
    let base = collect(e.submit(req(b"Hello".iter().map(|&b| b as u32).collect(), 3, 40, 0.0)).expect("submit"));
    assert_eq!(base.finish, FinishReason::Length);
    assert_eq!(base.usage.completion_tokens, 40);
    // A stop string from the middle of the greedy output cuts the text right before it.
    let chars: Vec<char> = base.text.chars().collect();
    let stop: String = chars[10..13].iter().collect();
    let cut = base.text.find(&stop).expect("stop in text");
    let mut r = req(b"Hello".iter().map(|&b| b as u32).collect(), 3, 40, 0.0);
    r.stop = vec!["never appears \u{1F600}".into(), stop.clone()];
    let stopped = collect(e.submit(r).expect("submit"));
    assert_eq!(stopped.finish, FinishReason::Stop);
    assert_eq!(stopped.text, base.text[..cut], "text must end before the stop string {stop:?}");
    assert_eq!(stopped.tokens[..], base.tokens[..stopped.tokens.len()]);
}

#[test]
fn queue_bound_and_bad_requests_are_refused() {
    let e = engine(&tiny(), 4, 256, 1, 2);
    let a = e.submit(req(vec![65; 10], 1, 100, 1.0)).expect("first");
    let b = e.submit(req(vec![65; 10], 1, 100, 1.0)).expect("second");
    // The engine thread may have admitted one already; fill until the bound answers.
    let mut held = vec![a, b];
    let err = loop {
        match e.submit(req(vec![65; 10], 1, 100, 1.0)) {
            Ok(rx) => held.push(rx),
            Err(err) => break err,
        }
        assert!(held.len() < 10, "the queue bound never refused");
    };
    assert_eq!(err, EngineError::QueueFull { max_queue: 2 });
    let err = e.submit(req(vec![65; 200], 1, 100, 1.0)).expect_err("past the context");
    assert!(matches!(err, EngineError::BadRequest { field: "max_tokens", .. }), "{err}");
    let err = e.submit(req(vec![999], 1, 1, 1.0)).expect_err("past the vocabulary");
    assert!(matches!(err, EngineError::BadRequest { field: "prompt", .. }), "{err}");
    drop(held);
}

#[test]
fn shutdown_finishes_running_then_refuses() {
    let e = engine(&tiny(), 4, 256, 8, 64);
    let mut running = e.submit(req(vec![65; 10], 1, 20, 1.0)).expect("submit");
    assert!(matches!(running.blocking_recv(), Some(Event::Token { .. })));
    // Accepted just before the signal: it may still be waiting, and is served all the same.
    let queued = e.submit(req(vec![66; 10], 2, 12, 1.0)).expect("submit");
    e.shutdown(Duration::from_secs(30));
    assert_eq!(e.submit(req(vec![65; 10], 1, 5, 1.0)).expect_err("refused"), EngineError::ShuttingDown);
    let out = collect(running);
    assert_eq!(out.usage.completion_tokens, 20);
    let queued = collect(queued); // panics on an error event: it must be served, not dropped
    assert!(queued.usage.completion_tokens >= 1, "{:?}", queued.usage);
    e.join();
    assert!(e.stats().stopped);
}

/// The prefix cache below block granularity: a prompt whose tail shares a few tokens with
/// a registered block (not a whole block) borrows those slots' K/V, and its answer keeps
/// its bits. Blocks of 16: a 45-token prompt has two full blocks and 13 tokens in its
/// third; the first run's third block fills with output and registers.
#[test]
fn partial_block_prefix_hits_change_nothing() {
    partial_block_prefix_hits("f16-slab");
}

/// On the q8 cache the partial-block copy moves codes and scales (never requantizes).
#[test]
fn partial_block_prefix_hits_change_nothing_with_a_q8_cache() {
    partial_block_prefix_hits("q8-slab");
}

fn partial_block_prefix_hits(kv: &str) {
    let engine = |model: &Path, b: u32, n: u32, seqs: usize, queue: usize| engine_kv(model, kv, (b, n), seqs, queue);
    let prompt: Vec<u32> = b"You are a careful assistant. What is a KV cache".iter().map(|&b| b as u32).collect();
    assert_eq!(prompt.len(), 47);
    let target = req(prompt.clone(), 7, 24, 0.9);
    // A prompt sharing the first 40 tokens: two full blocks and 8 tokens of the third.
    let mut other = prompt[..40].to_vec();
    other.extend(b" and why".iter().map(|&b| b as u32));
    let other = req(other, 9, 24, 0.9);
    let alone = |r: &Request| collect(engine(&tiny(), 16, 64, 4, 16).submit(r.clone()).expect("submit"));
    let (target_alone, other_alone) = (alone(&target), alone(&other));

    let e = engine(&tiny(), 16, 64, 4, 16);
    let mut warm = target.clone();
    warm.seed = 1;
    collect(e.submit(warm).expect("submit")); // registers blocks 0..2 (47 + 24 tokens)
    let again = collect(e.submit(target.clone()).expect("submit"));
    // Every prompt token but the last (its logits are the ones to sample from).
    assert_eq!(again.usage.cached_tokens, 46, "{:?}", again.usage);
    assert_eq!(again.tokens, target_alone.tokens, "the answer changed after a partial-block hit");
    let shared = collect(e.submit(other.clone()).expect("submit"));
    assert_eq!(shared.usage.cached_tokens, 40, "{:?}", shared.usage);
    assert_eq!(shared.tokens, other_alone.tokens, "the answer changed after a partial-block hit");
}
