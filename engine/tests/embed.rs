//! Embedding sequences through the scheduler: a text's pooled vector has the same f32 bits
//! alone, in a batch of other embeddings, beside running generations, prefilled in
//! chunks, twice in a row (no prefix-cache hit may skip the rows mean pooling needs), and
//! after preemption under a small pool; generations beside them keep their own bits.

use std::path::Path;
use std::sync::Arc;

use tl_arch_llama as _;
use tl_core::{EngineConfig, KvConfig, ModelRunner, SamplingParams, Tokenizer};
use tl_engine::{EmbedRequest, Engine, EngineError, EngineOptions, Event, Pooling, Request, Speculation};

mod support;
use support::tiny;

fn engine(model: &Path, n_blocks: u32, prefill_chunk: usize) -> Engine {
    engine_spec(model, n_blocks, prefill_chunk, None)
}

fn engine_spec(model: &Path, n_blocks: u32, prefill_chunk: usize, speculate: Option<Speculation>) -> Engine {
    let cfg = EngineConfig {
        max_batch_tokens: 64,
        max_seqs: 8,
        prefill_chunk,
        threads: 2,
        kv: KvConfig { block_tokens: 8, n_blocks: Some(n_blocks), ..KvConfig::default() },
        ..EngineConfig::default()
    };
    let runner = ModelRunner::load(model, &cfg).expect("load");
    let tok = Arc::new(Tokenizer::load(runner.config()).expect("tokenizer"));
    let opts = EngineOptions { max_queue: 64, speculate, spec_step_rows: usize::MAX, ..Default::default() };
    Engine::start(runner, tok, opts).expect("start")
}

fn text(i: usize, len: usize) -> Vec<u32> {
    (0..len).map(|j| ((i * 37 + j * 11) % 250) as u32 + 1).collect()
}

fn ereq(prompt: Vec<u32>, pooling: Pooling) -> EmbedRequest {
    EmbedRequest { prompt, pooling, normalize: true, dimensions: None }
}

fn embed(e: &Engine, reqs: Vec<EmbedRequest>) -> Vec<Vec<u32>> {
    let rxs = e.embed_all(reqs).expect("embed");
    rxs.into_iter()
        .map(|mut rx| {
            let v = rx.blocking_recv().expect("a result").expect("an embedding");
            v.vector.iter().map(|x| x.to_bits()).collect()
        })
        .collect()
}

/// A generation that cannot end early (its end token banned).
fn generation(seed: u64, max_tokens: usize) -> Request {
    Request {
        prompt: text(seed as usize, 20),
        params: SamplingParams { temperature: 0.9, ..SamplingParams::default() },
        seed,
        choice: 0,
        max_tokens,
        stop: vec![],
        logprobs: Some(2),
        grammar: None,
        logit_bias: vec![(257, -100.0)],
        speculate: None,
        adapter: None,
    }
}

/// A generation's tokens and logprob bits.
fn tokens(mut rx: tl_engine::UnboundedReceiver<Event>) -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    loop {
        match rx.blocking_recv().expect("event") {
            Event::Token { token, .. } => out.push((token.id, token.logprob.to_bits())),
            Event::Done { .. } => return out,
            Event::Error(e) => panic!("{e}"),
        }
    }
}

#[test]
fn alone_equals_batched_chunked_and_beside_generation() {
    let target = text(1, 70); // longer than a prefill chunk (24) and a block (8)
    for pooling in [Pooling::Last, Pooling::Mean, Pooling::Cls] {
        let e = engine(&tiny(), 256, 24);
        let alone = embed(&e, vec![ereq(target.clone(), pooling)]);
        assert_eq!(alone[0].len(), e.info().hidden_size);
        // Twice: a prefix-cache hit would skip rows (absorb refuses a gap), or change bits.
        assert_eq!(embed(&e, vec![ereq(target.clone(), pooling)]), alone, "{pooling:?}: twice");
        // Whole prefill in one chunk on another engine: same bits.
        let e1 = engine(&tiny(), 256, 64);
        assert_eq!(embed(&e1, vec![ereq(target.clone(), pooling)]), alone, "{pooling:?}: one chunk");
        drop(e1);
        // Beside running generations, in a batch of other embeddings.
        let gens: Vec<_> = (0..3).map(|i| e.submit(generation(i, 60)).expect("submit")).collect();
        let mut reqs: Vec<EmbedRequest> = (2..7).map(|i| ereq(text(i, 5 + 13 * i), pooling)).collect();
        reqs.insert(2, ereq(target.clone(), pooling));
        let crowd = embed(&e, reqs);
        assert_eq!(crowd[2], alone[0], "{pooling:?}: among others beside generation");
        assert_ne!(crowd[1], alone[0], "other texts give other vectors");
        let outs: Vec<_> = gens.into_iter().map(tokens).collect();
        let e2 = engine(&tiny(), 256, 24);
        for (i, o) in outs.iter().enumerate() {
            let solo = tokens(e2.submit(generation(i as u64, 60)).expect("submit"));
            assert_eq!(o, &solo, "generation {i} changed beside embeddings");
        }
        let st = e.stats();
        assert_eq!(st.kv_blocks_in_use, 0, "an embedding kept blocks: {st:?}");
    }
}

#[test]
fn preempted_embeddings_keep_their_bits() {
    let target = text(9, 60);
    let alone = embed(&engine(&tiny(), 256, 24), vec![ereq(target.clone(), Pooling::Mean)]);
    // A pool too small for everything at once: the newest sequences are preempted.
    let e = engine(&tiny(), 24, 24);
    let gens: Vec<_> = (0..4).map(|i| e.submit(generation(10 + i, 40)).expect("submit")).collect();
    let reqs: Vec<EmbedRequest> = (0..4).map(|_| ereq(target.clone(), Pooling::Mean)).collect();
    let got = embed(&e, reqs);
    for g in gens {
        tokens(g);
    }
    let st = e.stats();
    assert!(st.preemptions > 0, "the small pool never preempted: {st:?}");
    for v in &got {
        assert_eq!(v, &alone[0], "an embedding differs under preemption");
    }
}

#[test]
fn bad_embedding_requests_are_refused() {
    let e = engine(&tiny(), 64, 24);
    let d = e.info().hidden_size;
    let bad = |r: EmbedRequest| match e.embed_all(vec![r]) {
        Err(EngineError::BadRequest { field, .. }) => field,
        other => panic!("accepted: {:?}", other.map(|v| v.len())),
    };
    assert_eq!(bad(ereq(vec![], Pooling::Last)), "input");
    assert_eq!(bad(ereq(vec![1, 100_000], Pooling::Last)), "input");
    assert_eq!(bad(ereq(vec![1; 10_000], Pooling::Last)), "input");
    assert_eq!(bad(EmbedRequest { dimensions: Some(0), ..ereq(vec![1], Pooling::Last) }), "dimensions");
    assert_eq!(bad(EmbedRequest { dimensions: Some(d + 1), ..ereq(vec![1], Pooling::Last) }), "dimensions");
    // dimensions keeps the first values and normalises them again.
    let full = e.embed_all(vec![EmbedRequest { normalize: false, ..ereq(text(3, 9), Pooling::Last) }]).expect("ok");
    let cut = e.embed_all(vec![EmbedRequest { dimensions: Some(8), ..ereq(text(3, 9), Pooling::Last) }]).expect("ok");
    let full = full.into_iter().next().expect("rx").blocking_recv().expect("r").expect("e").vector;
    let cut = cut.into_iter().next().expect("rx").blocking_recv().expect("r").expect("e").vector;
    assert_eq!(cut.len(), 8);
    let n = full[..8].iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    for (c, f) in cut.iter().zip(&full) {
        assert!((f64::from(*c) - f64::from(*f) / n).abs() < 1e-6);
    }
}

/// Steps that verify drafts (logits for several rows of a sequence) and pool embeddings at
/// once: both keep their bits.
#[test]
fn embeddings_beside_speculative_decoding() {
    let target = text(4, 50);
    let alone = embed(&engine(&tiny(), 256, 24), vec![ereq(target.clone(), Pooling::Last)]);
    let e = engine_spec(&tiny(), 256, 24, Some(Speculation::Ngram { k: 4 }));
    // A prompt that repeats itself, so the n-gram lookup drafts.
    let looping = |seed| {
        let mut r = generation(seed, 40);
        r.prompt = [text(5, 8), text(5, 8), text(5, 8)].concat();
        r.params.temperature = 0.0;
        r
    };
    let gens: Vec<_> = (0..2).map(|i| e.submit(looping(i)).expect("submit")).collect();
    let mut got = Vec::new();
    for _ in 0..6 {
        got.extend(embed(&e, vec![ereq(target.clone(), Pooling::Last)]));
    }
    let outs: Vec<_> = gens.into_iter().map(tokens).collect();
    assert!(e.stats().draft_tokens > 0, "nothing was drafted: {:?}", e.stats());
    for v in &got {
        assert_eq!(v, &alone[0], "an embedding differs beside drafting");
    }
    let plain = engine(&tiny(), 256, 24);
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o, &tokens(plain.submit(looping(i as u64)).expect("submit")), "generation {i}");
    }
}
