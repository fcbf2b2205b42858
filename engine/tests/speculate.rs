//! Speculative decoding changes nothing, bit for bit: with n-gram drafting on, every
//! request gives the token ids, logprob f64 bits, top logprobs, text, finish reason and
//! usage it gives with speculation off — greedy and seeded, with penalties, stop strings,
//! a grammar, `logit_bias`, alone, among concurrent requests and under preemption; a
//! property test over random prompts and parameters; SmolLM2 end to end. Every test also
//! checks the engine's acceptance counters are above zero, so none can pass with
//! speculation silently off; and the n-gram lookup and the adaptive rule on their own.

use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use tl_arch_bigram as _;
use tl_arch_llama as _;
use tl_core::{EngineConfig, KvConfig, ModelRunner, SamplingParams, Tokenizer};
use tl_engine::{
    ngram_draft, Adapt, Drafter, Engine, EngineError, EngineOptions, Event, FinishReason, Grammar, GrammarSpec,
    Request, Speculation, StepCosts, UnboundedReceiver, Usage, COOL_MAX, COOL_START,
};

mod support;
use support::{crate_fixture, smollm2, tiny};

const NGRAM: Speculation = Speculation::Ngram { k: 4 };

fn config(n_blocks: u32, max_batch_tokens: usize) -> EngineConfig {
    EngineConfig {
        max_batch_tokens,
        max_seqs: 16,
        prefill_chunk: 24,
        threads: 2,
        kv: KvConfig { block_tokens: 4, n_blocks: Some(n_blocks), ..KvConfig::default() },
        ..EngineConfig::default()
    }
}

/// An engine over `model`; `speculate` is the engine-wide default.
fn engine(model: &Path, n_blocks: u32, max_batch_tokens: usize, speculate: Option<Speculation>) -> Engine {
    with_draft(model, None, n_blocks, max_batch_tokens, speculate).expect("start")
}

/// An engine over `model` with `draft` as its draft model; drafts join steps of any size
/// (`spec_step_rows` unbounded), so the tests draft under load too.
fn with_draft(
    model: &Path,
    draft: Option<&Path>,
    n_blocks: u32,
    max_batch_tokens: usize,
    speculate: Option<Speculation>,
) -> Result<Engine, EngineError> {
    let opts = EngineOptions { max_queue: 256, speculate, spec_step_rows: usize::MAX, ..Default::default() };
    start(model, draft, config(n_blocks, max_batch_tokens), opts)
}

/// An engine over `model` (and `draft`) with `cfg` and `opts` as given.
fn start(model: &Path, draft: Option<&Path>, cfg: EngineConfig, opts: EngineOptions) -> Result<Engine, EngineError> {
    let runner = ModelRunner::load(model, &cfg).expect("load");
    let draft = draft.map(|d| ModelRunner::load(d, &cfg).expect("load draft"));
    let tok = Arc::new(Tokenizer::load(runner.config()).expect("tokenizer"));
    Engine::start_with_draft(runner, draft, tok, opts)
}

/// Everything a sequence returned, logprobs as bits; usage without `cached_tokens`
/// (which varies by design).
/// A token, its logprob bits and its top alternatives (id, logprob bits).
type Token = (u32, u64, Vec<(u32, u64)>);

#[derive(Debug, PartialEq, Clone)]
struct Out {
    tokens: Vec<Token>,
    text: String,
    finish: FinishReason,
    usage: (usize, usize),
}

fn collect(mut rx: UnboundedReceiver<Event>) -> Out {
    let mut out = Out { tokens: vec![], text: String::new(), finish: FinishReason::Length, usage: (0, 0) };
    loop {
        match rx.blocking_recv().expect("engine hung up before Done") {
            Event::Token { token, text } => {
                let top = token.top.iter().map(|&(i, l)| (i, l.to_bits())).collect();
                out.tokens.push((token.id, token.logprob.to_bits(), top));
                out.text.push_str(&text);
            }
            Event::Done { finish, text, usage: Usage { prompt_tokens, completion_tokens, .. }, .. } => {
                out.text.push_str(&text);
                out.finish = finish;
                out.usage = (prompt_tokens, completion_tokens);
                return out;
            }
            Event::Error(e) => panic!("sequence failed: {e}"),
        }
    }
}

fn req(prompt: &[u8], seed: u64, max_tokens: usize, temperature: f64) -> Request {
    Request {
        prompt: prompt.iter().map(|&b| b as u32).collect(),
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

/// Copy-heavy byte prompts (lists and repeated phrases, so lookups hit) and a few that
/// are not (so they miss).
fn prompts() -> Vec<&'static [u8]> {
    vec![
        b"repeat this list: apple, pear, plum, apple, pear, plum, apple, pear, plum, apple, ",
        b"abcabcabcabcabcabcabcabcabc",
        b"the cat sat on the mat. the cat sat on the mat. the cat",
        b"0123456789 0123456789 0123456789 01234",
        b"Quite unlike anything else, zebras vex jumpy fog.",
        b"x",
    ]
}

/// The request variants each prompt runs with: greedy, seeded, penalties, stop strings,
/// logit_bias, a regex grammar.
fn variants(prompt: &[u8], i: usize) -> Vec<Request> {
    let mut out = Vec::new();
    out.push(req(prompt, 1, 40, 0.0));
    out.push(req(prompt, 7 + i as u64, 40, 0.9));
    let mut r = req(prompt, 3, 40, 0.7);
    r.params.repetition_penalty = 1.3;
    r.params.presence_penalty = 0.5;
    r.params.frequency_penalty = 0.4;
    out.push(r);
    let mut r = req(prompt, 4, 40, 0.0);
    r.params.frequency_penalty = 0.3;
    out.push(r);
    let mut r = req(prompt, 5, 40, 0.0);
    r.stop = vec!["pl".into(), "t s".into(), "56".into(), "ca".into()];
    out.push(r);
    let mut r = req(prompt, 6, 40, 0.8);
    r.logit_bias = vec![(b'a' as u32, 3.0), (b'e' as u32, -100.0)];
    out.push(r);
    let mut r = req(prompt, 8, 30, 0.8);
    r.grammar = Some(Grammar { spec: GrammarSpec::Regex("(ab|cd|[0-9]){1,40}".into()), field: "response_format" });
    out.push(r);
    out
}

fn run_alone(e: &Engine, reqs: &[Request]) -> Vec<Out> {
    reqs.iter().map(|r| collect(e.submit(r.clone()).expect("submit"))).collect()
}

fn run_together(e: &Engine, reqs: &[Request]) -> Vec<Out> {
    let rxs: Vec<_> = reqs.iter().map(|r| e.submit(r.clone()).expect("submit")).collect();
    rxs.into_iter().map(collect).collect()
}

fn assert_same(off: &[Out], on: &[Out], reqs: &[Request], what: &str) {
    assert_eq!(off.len(), on.len());
    for (k, ((a, b), r)) in off.iter().zip(on).zip(reqs).enumerate() {
        assert!(!a.tokens.is_empty() || a.finish == FinishReason::Stop, "{what} {k}: nothing generated");
        assert_eq!(a, b, "{what}: request {k} differs with speculation on ({:?})", r.params);
    }
}

/// The engine's acceptance counters: drafts proposed, accepted.
fn counters(e: &Engine) -> (usize, usize) {
    let s = e.stats();
    (s.draft_tokens, s.draft_accepted)
}

#[test]
fn tiny_speculation_changes_nothing_alone() {
    let reqs: Vec<Request> = prompts().iter().enumerate().flat_map(|(i, p)| variants(p, i)).collect();
    let off = run_alone(&engine(&tiny(), 512, 96, None), &reqs);
    for spec in [Speculation::Ngram { k: 1 }, NGRAM, Speculation::Ngram { k: 16 }] {
        let e = engine(&tiny(), 512, 96, Some(spec));
        let on = run_alone(&e, &reqs);
        assert_same(&off, &on, &reqs, &format!("{spec:?} alone"));
        let (proposed, accepted) = counters(&e);
        assert!(
            accepted > 0 && proposed > accepted,
            "{spec:?}: drafts must both hit and miss: {proposed} proposed, {accepted} accepted"
        );
        let st = e.stats();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(e.stats().kv_blocks_in_use, 0, "blocks leaked: {st:?}");
    }
}

/// Over a q8 cache: a verify step writes rows that a rejection later overwrites, and
/// each row is quantized on its own, so speculation still changes no bit.
#[test]
fn tiny_speculation_changes_nothing_with_a_q8_cache() {
    let reqs: Vec<Request> = prompts().iter().enumerate().flat_map(|(i, p)| variants(p, i)).collect();
    let mut cfg = config(512, 96);
    cfg.kv.backend = "q8-slab".into();
    let opts = |speculate| EngineOptions {
        max_queue: 256,
        observer: None,
        speculate,
        spec_step_rows: usize::MAX,
        ..Default::default()
    };
    let off = run_alone(&start(&tiny(), None, cfg.clone(), opts(None)).expect("start"), &reqs);
    let e = start(&tiny(), None, cfg, opts(Some(NGRAM))).expect("start");
    let on = run_alone(&e, &reqs);
    assert_same(&off, &on, &reqs, "ngram over q8-slab");
    let (proposed, accepted) = counters(&e);
    assert!(
        accepted > 0 && proposed > accepted,
        "drafts must both hit and miss: {proposed} proposed, {accepted} accepted"
    );
}

#[test]
fn tiny_speculation_changes_nothing_among_concurrent_requests_and_under_preemption() {
    let reqs: Vec<Request> = prompts().iter().enumerate().flat_map(|(i, p)| variants(p, i)).collect();
    let off = run_alone(&engine(&tiny(), 512, 96, None), &reqs);
    // Half the requests speculate (per request), half do not, all in the same steps.
    let mixed: Vec<Request> = reqs
        .iter()
        .enumerate()
        .map(|(k, r)| Request { speculate: Some(if k % 2 == 0 { NGRAM } else { Speculation::Off }), ..r.clone() })
        .collect();
    let e = engine(&tiny(), 512, 96, None);
    let on = run_together(&e, &mixed);
    assert_same(&off, &on, &reqs, "mixed concurrent");
    assert!(counters(&e).1 > 0, "no draft accepted: {:?}", counters(&e));
    // Every request speculating, a token budget that cuts drafts short, and a pool so
    // small that running sequences preempt each other.
    let e = engine(&tiny(), 40, 24, Some(Speculation::Ngram { k: 8 }));
    let on = run_together(&e, &reqs);
    assert_same(&off, &on, &reqs, "under preemption");
    let st = e.stats();
    assert!(st.preemptions > 0, "the small pool never preempted: {st:?}");
    assert!(st.draft_accepted > 0, "no draft accepted: {st:?}");
}

/// `spec_step_rows`: drafts join a step only while it holds fewer rows. With 1 no step can
/// take a draft (every step already holds its sequences' own rows); with the default a
/// request alone drafts; answers are the same either way.
#[test]
fn drafts_join_only_steps_below_spec_step_rows() {
    let reqs: Vec<Request> = prompts().iter().enumerate().flat_map(|(i, p)| variants(p, i)).collect();
    let off = run_alone(&engine(&tiny(), 512, 96, None), &reqs);
    let bounded = |rows: usize| {
        let opts = EngineOptions {
            max_queue: 256,
            observer: None,
            speculate: Some(NGRAM),
            spec_step_rows: rows,
            ..Default::default()
        };
        start(&tiny(), None, config(512, 96), opts).expect("start")
    };
    let e = bounded(1);
    assert_same(&off, &run_together(&e, &reqs), &reqs, "spec_step_rows 1, together");
    assert_same(&off, &run_alone(&e, &reqs), &reqs, "spec_step_rows 1, alone");
    assert_eq!(counters(&e).0, 0, "a step of 1 row took drafts");
    let e = bounded(0);
    assert_same(&off, &run_alone(&e, &reqs), &reqs, "default spec_step_rows, alone");
    assert!(counters(&e).1 > 0, "no draft accepted with the default: {:?}", counters(&e));
}

/// A draft model of the same vocabulary: the int4 twin of the tiny Llama (close, so most
/// drafts hit), a different tiny Llama (most miss) and the model itself (every draft is
/// the target's own greedy token, so only drafts cut by a finish can be rejected: this
/// fails if the draft K/V falls out of step with the accepted tokens).
#[test]
fn tiny_draft_model_changes_nothing() {
    let reqs: Vec<Request> = prompts().iter().enumerate().flat_map(|(i, p)| variants(p, i)).collect();
    let off = run_alone(&engine(&tiny(), 512, 96, None), &reqs);
    for (draft, k) in [("tiny-llama-int4", 4), ("tiny-llama3", 3), ("tiny-llama", 6)] {
        let spec = Speculation::Draft { k };
        let e = with_draft(&tiny(), Some(&crate_fixture("arch-llama", draft)), 512, 96, Some(spec)).expect("start");
        let on = run_alone(&e, &reqs);
        assert_same(&off, &on, &reqs, &format!("draft {draft} alone"));
        let on = run_together(&e, &reqs);
        assert_same(&off, &on, &reqs, &format!("draft {draft} together"));
        let (proposed, accepted) = counters(&e);
        assert!(accepted > 0, "draft {draft}: nothing accepted of {proposed}");
        if draft == "tiny-llama" {
            let greedy: Vec<Request> = reqs
                .iter()
                .filter(|r| {
                    r.params.temperature == 0.0
                        && r.stop.is_empty()
                        && r.grammar.is_none()
                        && r.params.frequency_penalty == 0.0
                })
                .cloned()
                .collect();
            let e = with_draft(&tiny(), Some(&crate_fixture("arch-llama", draft)), 512, 96, Some(spec)).expect("start");
            run_alone(&e, &greedy);
            let (proposed, accepted) = counters(&e);
            assert!(accepted > 0 && proposed - accepted <= greedy.len() * k, "self-draft: {accepted} of {proposed}");
        }
    }
    // Under preemption (a pool too small for all) with a tight budget.
    let e = with_draft(
        &tiny(),
        Some(&crate_fixture("arch-llama", "tiny-llama-int4")),
        40,
        24,
        Some(Speculation::Draft { k: 5 }),
    )
    .expect("start");
    let on = run_together(&e, &reqs);
    assert_same(&off, &on, &reqs, "draft under preemption");
    assert!(e.stats().preemptions > 0 && e.stats().draft_accepted > 0, "{:?}", e.stats());
    // A draft model of another vocabulary is refused at start.
    let tracer = tiny().join("../../../../arch-bigram/tests/fixtures/tracer");
    let err = with_draft(&tiny(), Some(&tracer), 64, 96, None).err();
    assert!(matches!(err, Some(EngineError::BadRequest { field: "draft", .. })), "{err:?}");
}

/// `spec_p_min`: a draft model's draft ends at the first token it gives less than that
/// probability. The answers stay those of plain decoding whatever the threshold; a high
/// one drafts fewer tokens than none (the cut happens); one outside 0..=1 is refused.
#[test]
fn a_draft_ends_where_the_draft_model_is_unsure_and_nothing_changes() {
    let reqs: Vec<Request> = prompts().iter().enumerate().flat_map(|(i, p)| variants(p, i)).collect();
    let off = run_alone(&engine(&tiny(), 512, 96, None), &reqs);
    let draft = crate_fixture("arch-llama", "tiny-llama-int4");
    let with_p_min = |p_min: f32| {
        let opts = EngineOptions {
            max_queue: 256,
            speculate: Some(Speculation::Draft { k: 4 }),
            spec_step_rows: usize::MAX,
            spec_p_min: p_min,
            ..Default::default()
        };
        start(&tiny(), Some(&draft), config(512, 96), opts)
    };
    let mut proposed = Vec::new();
    for p_min in [0.0, 0.2, 0.9] {
        let e = with_p_min(p_min).expect("start");
        assert_same(&off, &run_alone(&e, &reqs), &reqs, &format!("p_min {p_min}, alone"));
        assert_same(&off, &run_together(&e, &reqs), &reqs, &format!("p_min {p_min}, together"));
        proposed.push(counters(&e).0);
    }
    assert!(proposed[0] > 0, "nothing drafted without a threshold: {proposed:?}");
    assert!(proposed[2] < proposed[0], "a threshold of 0.9 cut no draft: {proposed:?}");
    for bad in [-0.1, 1.5, f32::NAN] {
        let err = with_p_min(bad).err();
        assert!(matches!(err, Some(EngineError::BadRequest { field: "spec_p_min", .. })), "{bad}: {err:?}");
    }
}

#[test]
fn a_request_can_turn_speculation_off_and_bad_settings_are_refused() {
    let e = engine(&tiny(), 256, 96, Some(NGRAM));
    let r = req(b"abcabcabcabcabc", 1, 20, 0.0);
    collect(e.submit(Request { speculate: Some(Speculation::Off), ..r.clone() }).expect("submit"));
    assert_eq!(counters(&e), (0, 0), "a request with speculation off drafted");
    collect(e.submit(r.clone()).expect("submit"));
    assert!(counters(&e).0 > 0, "the engine default did not draft");
    for bad in [Speculation::Ngram { k: 0 }, Speculation::Ngram { k: 17 }, Speculation::Draft { k: 4 }] {
        let err = e.submit(Request { speculate: Some(bad), ..r.clone() }).err();
        assert!(matches!(err, Some(EngineError::BadRequest { field: "speculate", .. })), "{bad:?}: {err:?}");
    }
    for (s, want) in [
        ("off", Ok(Speculation::Off)),
        ("ngram", Ok(NGRAM)),
        ("ngram:7", Ok(Speculation::Ngram { k: 7 })),
        ("draft:2", Ok(Speculation::Draft { k: 2 })),
    ] {
        assert_eq!(s.parse::<Speculation>(), want, "{s}");
    }
    for s in ["ngram:0", "ngram:17", "ngram:x", "lookup", ""] {
        assert!(s.parse::<Speculation>().is_err(), "{s:?} parsed");
    }
}

/// The lookup against a direct reading of its rule: for n = 4..1, the latest earlier
/// occurrence of the last n tokens, and up to k of the tokens that followed it.
#[test]
fn ngram_lookup_proposes_what_followed_the_longest_latest_match() {
    let d = |t: &[u32], k: usize| {
        let mut out = vec![];
        ngram_draft(t, k, &mut out);
        out
    };
    // "1 2 3" recurs: the 3-gram at 0 is followed by 4 5.
    assert_eq!(d(&[1, 2, 3, 4, 5, 9, 1, 2, 3], 2), vec![4, 5]);
    // The latest occurrence of the longest suffix wins: 7 8 occurs at 0 and 3.
    assert_eq!(d(&[7, 8, 1, 7, 8, 2, 7, 8], 4), vec![2, 7, 8]);
    // A 1-gram match when nothing longer recurs.
    assert_eq!(d(&[5, 6, 9, 5], 3), vec![6, 9, 5]);
    // The longer match beats a later shorter one: [2 3] matches at 1 (followed by 4), the
    // later lone 3 at 5 would give 6.
    assert_eq!(d(&[1, 2, 3, 4, 0, 3, 6, 2, 3], 1), vec![4]);
    // No recurrence, no draft; too short, no draft.
    assert!(d(&[1, 2, 3, 4], 4).is_empty());
    assert!(d(&[1], 4).is_empty());
    assert!(d(&[], 4).is_empty());
    // k caps the draft.
    assert_eq!(d(&[1, 2, 3, 4, 5, 6, 1], 3), vec![2, 3, 4]);
}

#[test]
fn the_adaptive_rule_pauses_after_two_misses_and_backs_off() {
    let mut a = Adapt::default();
    assert!(a.may_draft());
    a.verified(0, 4);
    assert!(a.may_draft(), "one miss does not pause");
    a.verified(1, 4); // fewer than half accepted: a miss too
    let paused = (0..COOL_START).filter(|_| !a.may_draft()).count();
    assert_eq!(paused as u32, COOL_START, "two misses pause for COOL_START steps");
    assert!(a.may_draft());
    // The next two misses pause twice as long, up to COOL_MAX.
    let mut want = COOL_START * 2;
    for _ in 0..6 {
        a.verified(0, 4);
        a.verified(0, 1);
        let mut n = 0;
        while !a.may_draft() {
            n += 1;
        }
        assert_eq!(n, want);
        want = (want * 2).min(COOL_MAX);
    }
    // Half the draft accepted resets everything; one miss between hits never pauses.
    a.verified(2, 4);
    assert_eq!(a, Adapt::default());
    for _ in 0..10 {
        a.verified(0, 4);
        a.verified(1, 1);
        assert!(a.may_draft());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, .. ProptestConfig::default() })]

    /// Random prompts (from a small alphabet, so they repeat), lengths, temperatures,
    /// penalties, seeds, k and token budgets: on equals off.
    #[test]
    fn random_requests_are_the_same_with_speculation_on(
        prompts in proptest::collection::vec(proptest::collection::vec(0u8..6, 1..40), 1..5),
        temperature in prop_oneof![Just(0.0), 0.3f64..1.5],
        rep in prop_oneof![Just(1.0), 1.0f64..1.6],
        freq in prop_oneof![Just(0.0), -0.5f64..1.0],
        seed in 0u64..1000,
        k in 1usize..=16,
        budget in 8usize..64,
        max_tokens in 1usize..48,
    ) {
        let reqs: Vec<Request> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let bytes: Vec<u8> = p.iter().map(|&b| b"abcdef"[b as usize]).collect();
                let mut r = req(&bytes, seed + i as u64, max_tokens, temperature);
                r.params.repetition_penalty = rep;
                r.params.frequency_penalty = freq;
                r
            })
            .collect();
        let off = run_together(&engine(&tiny(), 256, budget, None), &reqs);
        let on = run_together(&engine(&tiny(), 256, budget, Some(Speculation::Ngram { k })), &reqs);
        prop_assert_eq!(off, on);
    }
}

/// SmolLM2 on copy-heavy chat prompts: greedy and seeded, alone and together, the same
/// bits with speculation on, and most drafted tokens accepted.
#[test]
fn smollm2_speculation_changes_nothing() {
    let Some(model) = smollm2() else { return };
    let runner = ModelRunner::load(&model, &EngineConfig::default()).expect("load");
    let tok = Tokenizer::load(runner.config()).expect("tokenizer");
    drop(runner);
    let chat = |user: &str| {
        let text = format!("<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n");
        tok.encode(&text).expect("encode")
    };
    let users = [
        "Repeat this list exactly: red, green, blue, yellow, purple, orange, black, white.",
        "Rewrite this code with the variable renamed to total: let sum = a + b; println!(\"{}\", sum); return sum;",
        "Tell me a short story about a dragon.",
    ];
    let mut reqs = Vec::new();
    for (i, u) in users.iter().enumerate() {
        for (seed, t) in [(0, 0.0), (11 + i as u64, 0.7)] {
            let mut r = req(b"", seed, 32, t);
            r.prompt = chat(u);
            reqs.push(r);
        }
    }
    let off = run_alone(&engine(&model, 512, 256, None), &reqs);
    let e = engine(&model, 512, 256, Some(NGRAM));
    let alone = run_alone(&e, &reqs);
    assert_same(&off, &alone, &reqs, "smollm2 alone");
    let together = run_together(&e, &reqs);
    assert_same(&off, &together, &reqs, "smollm2 together");
    let (proposed, accepted) = counters(&e);
    assert!(accepted > 0 && proposed > accepted, "drafts must both hit and miss: {accepted} of {proposed}");
}

/// With the measured-cost rule on (serve's default), draft lengths follow this machine's
/// timings, which differ run to run: the answers must not, for the draft model and n-gram
/// lookups alike, alone and together.
#[test]
fn measured_draft_lengths_change_nothing() {
    let reqs: Vec<Request> = prompts().iter().enumerate().flat_map(|(i, p)| variants(p, i)).collect();
    let off = run_alone(&engine(&tiny(), 512, 96, None), &reqs);
    let draft = crate_fixture("arch-llama", "tiny-llama-int4");
    for spec in [Speculation::Draft { k: 4 }, Speculation::Ngram { k: 6 }] {
        let opts = EngineOptions {
            max_queue: 256,
            speculate: Some(spec),
            spec_step_rows: usize::MAX,
            spec_p_min: 0.5,
            spec_costs: true,
            ..Default::default()
        };
        let e = start(&tiny(), Some(&draft), config(512, 96), opts).expect("start");
        assert_same(&off, &run_alone(&e, &reqs), &reqs, &format!("{spec:?} measured, alone"));
        assert_same(&off, &run_together(&e, &reqs), &reqs, &format!("{spec:?} measured, together"));
        // Every sequence's first draft is a probe of the full length: something is drafted.
        assert!(counters(&e).0 > 0, "{spec:?}: nothing drafted");
    }
}

/// The measured-cost rule's choice against the arithmetic it is named for: with a verify
/// row costing 0.58 of a step and a draft model a third of one (this CPU's q8 figures for
/// Qwen2.5-Coder 1.5B drafted by 0.5B), no draft pays even at 90% acceptance; with rows
/// nearly free and free n-gram drafts, the longest does; costs not measured yet give none.
#[test]
fn the_measured_cost_rule_drafts_only_where_it_is_faster() {
    let mut c = StepCosts::default();
    assert_eq!(c.best_k(1, 4, 0.9, None), None, "nothing measured");
    c.step(1, 0.084);
    c.step(5, 0.084 * 3.3);
    c.drafted(Drafter::Model, 4, 4.0 * 0.030);
    assert_eq!(c.best_k(1, 4, 0.9, Some(Drafter::Model)), Some(0));
    assert_eq!(c.best_k(1, 4, 0.9, Some(Drafter::Head)), None, "the head's cost is not measured");
    // Even drafts that are always accepted give 5 tokens for 4.7 steps (1.05x): not the
    // 10% that makes drafting worth trying (PAYS_BY), though best_k would take 4 of them.
    assert_eq!(c.best_k(1, 4, 1.0, Some(Drafter::Model)), Some(4));
    assert_eq!(c.pays(1, 4, Some(Drafter::Model)), Some(false));
    assert_eq!(c.pays(1, 4, Some(Drafter::Head)), None);
    let mut c = StepCosts::default();
    c.step(1, 0.100);
    c.step(5, 0.110);
    assert_eq!(c.best_k(1, 4, 0.9, None), Some(4));
    assert_eq!(c.pays(1, 4, None), Some(true));
    // Rows between two measured sizes lie on the line between them (step 3: 0.105). At
    // 20% acceptance 2 drafts win: 1.24 tokens in 0.105 s against 1.2 in 0.1025 (one
    // draft), 1.2496 in 0.110 (four) and 1 in 0.100 (none).
    assert_eq!(c.best_k(1, 4, 0.2, None), Some(2));
    // A size measured again moves its mean by an eighth of the difference: step 5 at 0.27
    // gives 0.13, the line steepens and one draft (1.2 tokens in 0.1075 s) is best.
    c.step(5, 0.27);
    assert_eq!(c.best_k(1, 4, 0.2, None), Some(1));
    // A measured size replaces the line: step 3 at 0.2 puts step 2 at 0.15, and no draft pays.
    c.step(3, 0.2);
    assert_eq!(c.best_k(1, 4, 0.2, None), Some(0));
    // A drafter that costs a whole step per token never pays.
    c.drafted(Drafter::Model, 2, 0.2);
    assert_eq!(c.best_k(1, 4, 0.99, Some(Drafter::Model)), Some(0));
}
