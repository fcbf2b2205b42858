//! `verify`: show, on the user's own machine and model, that a seeded request's answer
//! does not depend on anything but the request. The same request runs alone (the
//! reference), then under each condition the scheduler may impose; every run must give
//! the same token ids and the same logprob bits. [`replay`] reruns a saved `serve`
//! request/response pair instead. docs/serving.md ("Proving it: `verify`").

pub mod replay;

use std::path::PathBuf;
use std::sync::Arc;

use thiserror::Error;
use tl_core::{EngineConfig, KvConfig, ModelRunner, Tokenizer, Weights};
use tl_engine::{
    AdapterChoice, Engine, EngineError, EngineOptions, Event, FinishReason, Request, Speculation, TokenInfo,
    UnboundedReceiver,
};

use crate::api::{ApiError, Body};
use crate::lora::{LoraAsk, LoraSpec, Loras};

/// Why verify could not run (not a difference: those are [`Verdict`]s).
#[derive(Debug, Error)]
pub enum VerifyError {
    /// The model failed to load.
    #[error("{path}: {reason}")]
    Model {
        /// The model path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The request is not one serve would run.
    #[error("the request: {0}")]
    Request(String),
    /// The engine refused or dropped a sequence.
    #[error("{condition}: {err}")]
    Engine {
        /// The condition being run.
        condition: String,
        /// What the engine said.
        err: EngineError,
    },
    /// A replay file that cannot be used.
    #[error("{path}: {reason}")]
    Replay {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

impl From<ApiError> for VerifyError {
    fn from(e: ApiError) -> VerifyError {
        let param = e.param.as_deref().map(|p| format!("{p}: ")).unwrap_or_default();
        VerifyError::Request(format!("{param}{}", e.message))
    }
}

/// How every engine of a run is built; conditions change one knob at a time.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Model directory or .gguf file.
    pub model: PathBuf,
    /// Forward threads of the reference run (conditions try 1..=threads).
    pub threads: usize,
    /// Weight mode.
    pub weights: Weights,
    /// Activation mode (`--activations`).
    pub activations: tl_core::Activations,
    /// KV block size, the same in every run.
    pub block_tokens: u32,
    /// The registered KV backend (`--kv`), the same in every run.
    pub kv_backend: String,
    /// The reference's step budget and prefill piece.
    pub max_batch_tokens: usize,
    /// Longest prefill piece per sequence and step in the reference.
    pub prefill_chunk: usize,
}

/// Engine knobs of one run.
#[derive(Clone, Copy, Debug)]
struct Knobs {
    threads: usize,
    max_batch_tokens: usize,
    prefill_chunk: usize,
    n_blocks: u32,
}

/// What the target returned in one run: ids and logprobs (compared as bits), the text,
/// why it ended, and what the run did to it.
#[derive(Clone, Debug)]
pub struct Trace {
    /// Sampled tokens with their logprobs and top alternatives.
    pub tokens: Vec<TokenInfo>,
    /// The output text.
    pub text: String,
    /// Why it ended.
    pub finish: FinishReason,
    /// Prompt tokens served from the prefix cache.
    pub cached: usize,
    /// Times it was preempted and recomputed.
    pub preempted: u32,
}

/// How one run compares with the reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Bit-identical, and the condition happened.
    Identical,
    /// Where it first departs from the reference.
    Differs(String),
    /// Bit-identical, but the condition did not happen (why): nothing was shown either way,
    /// so it is neither a pass nor a difference.
    NotExercised(String),
}

impl Outcome {
    /// Whether it is a difference (what the exit status reports).
    pub fn differs(&self) -> bool {
        matches!(self, Outcome::Differs(_))
    }
}

/// One condition's outcome.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// What was done, e.g. `batch of 16 (15 random co-requests)`.
    pub condition: String,
    /// Identical, where it first departs, or why the condition did not happen.
    pub outcome: Outcome,
    /// What the run showed beside the verdict (cached tokens, preemptions).
    pub note: String,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let note = if self.note.is_empty() { String::new() } else { format!(" ({})", self.note) };
        match &self.outcome {
            Outcome::Identical => write!(f, "{}: identical{note}", self.condition),
            Outcome::Differs(d) => write!(f, "{}: DIFFERS at {d}{note}", self.condition),
            Outcome::NotExercised(why) if self.note.is_empty() => {
                write!(f, "{}: not exercised ({why})", self.condition)
            }
            Outcome::NotExercised(why) => write!(f, "{}: not exercised ({why}; {})", self.condition, self.note),
        }
    }
}

/// The last line of a run: how many conditions were identical, differed, were not
/// exercised. Its tail `I identical, D differ, N not exercised` has the same shape in
/// every case, for scripts.
pub fn summary(verdicts: &[Verdict]) -> String {
    let count = |f: fn(&Outcome) -> bool| verdicts.iter().filter(|v| f(&v.outcome)).count();
    let same = count(|o| *o == Outcome::Identical);
    let differ = count(Outcome::differs);
    let skipped = count(|o| matches!(o, Outcome::NotExercised(_)));
    let tail = format!("{same} identical, {differ} differ, {skipped} not exercised");
    let n = verdicts.len();
    if differ > 0 {
        format!("{differ} of {n} conditions differ from the reference ({tail})")
    } else if skipped > 0 {
        format!("no condition differs from the reference, but {skipped} of {n} could not be exercised ({tail})")
    } else {
        format!("all {n} conditions identical to the reference, bit for bit ({tail})")
    }
}

/// Where `b` first departs from `a`, or `None` when every token id, logprob and top
/// logprob has the same bits and the text and finish reason are equal. Logprobs are
/// log-softmax of the (penalised) logits (sampling.md step 4), so for one token id
/// their difference is that token's logit difference less the change in the normaliser.
pub fn first_difference(a: &Trace, b: &Trace) -> Option<String> {
    let of = |t: &TokenInfo, id: u32| {
        if t.id == id {
            return Some(t.logprob);
        }
        t.top.iter().find(|p| p.0 == id).map(|p| p.1)
    };
    for (i, (x, y)) in a.tokens.iter().zip(&b.tokens).enumerate() {
        if x.id != y.id {
            let there = of(y, x.id).map_or("not among its top logprobs".into(), |l| {
                format!("{l} here, logprob difference {:e}", l - x.logprob)
            });
            return Some(format!(
                "token {i}: id {} vs id {}; id {} has logprob {} in the reference, {there}",
                x.id, y.id, x.id, x.logprob
            ));
        }
        if x.logprob.to_bits() != y.logprob.to_bits() {
            return Some(format!(
                "token {i}: id {} in both, logprob {} vs {} (difference {:e})",
                x.id,
                x.logprob,
                y.logprob,
                y.logprob - x.logprob
            ));
        }
        let bits = |t: &TokenInfo| t.top.iter().map(|p| (p.0, p.1.to_bits())).collect::<Vec<_>>();
        if bits(x) != bits(y) {
            return Some(format!(
                "token {i}: id {} in both, its top logprobs differ: {:?} vs {:?}",
                x.id, x.top, y.top
            ));
        }
    }
    let n = a.tokens.len().min(b.tokens.len());
    if a.tokens.len() != b.tokens.len() {
        let (long, which) = if a.tokens.len() > n { (a, "the reference") } else { (b, "this run") };
        return Some(format!(
            "token {n}: only {which} goes on (id {}); the other ends ({} vs {})",
            long.tokens[n].id,
            a.finish.as_str(),
            b.finish.as_str()
        ));
    }
    if a.finish != b.finish {
        return Some(format!("the end: finish {} vs {}", a.finish.as_str(), b.finish.as_str()));
    }
    if a.text != b.text {
        let k = a.text.bytes().zip(b.text.bytes()).take_while(|(x, y)| x == y).count();
        return Some(format!("text byte {k} (same tokens, different text: a stop-string or decoding fault)"));
    }
    None
}

/// xorshift64*: verify's own reproducible randomness for the co-requests.
pub struct Rng(u64);

impl Rng {
    /// A stream from `seed` (any value; 0 is remapped).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The target: the request serve would run for `body` (choice 0), asking for logprobs
/// with 5 alternatives at least so a difference can be located (sampling never reads
/// them). `chat`: `messages` through the chat template; else `prompt`.
pub fn target(model: &ModelRunner, tok: &Tokenizer, body: &serde_json::Value) -> Result<Request, VerifyError> {
    let b: Body = serde_json::from_value(body.clone()).map_err(|e| VerifyError::Request(e.to_string()))?;
    if b.seed.is_none() {
        return Err(VerifyError::Request("seed: verify needs a seed (an unseeded request promises nothing)".into()));
    }
    let cfg = model.config();
    let chat = b.messages.is_some();
    let prompt = if chat {
        let template = crate::prompt::template_of(cfg).map_err(VerifyError::Request)?;
        crate::prompt::chat(tok, &template, &b)?
    } else {
        crate::prompt::completion(tok, cfg.bos_token_id, &b)?
    };
    let ctx = cfg.max_position_embeddings;
    let default_max = if chat { ctx.map_or(4096, |c| c.saturating_sub(prompt.len())) } else { 16 };
    let mut r = b.plan(prompt, chat, ctx, default_max)?.request(0);
    r.logprobs = Some(r.logprobs.unwrap_or(0).max(5));
    Ok(r)
}

/// Runs the target under each condition against its run alone.
pub struct Verifier {
    setup: Setup,
    tok: Arc<Tokenizer>,
    target: Request,
    vocab: usize,
    ctx: usize,
    rng: Rng,
    reference: Option<Trace>,
    /// What the co-requests of [`Verifier::among_adapters`] run under, in turn.
    others: Vec<Option<AdapterChoice>>,
}

fn blocks(len: usize, b: u32) -> u32 {
    len.div_ceil(b as usize) as u32
}

impl Verifier {
    /// Load the model once (for the tokenizer and the target's prompt); `body` is a
    /// serve request body; `co_seed` seeds the co-requests.
    ///
    /// `loras` (serve's `--lora`): the target runs under the adapter the body names (its
    /// `model` or `lora`, as serve resolves them), else under the first; every other
    /// condition's co-requests share the target's adapter, and [`Verifier::among_adapters`]
    /// gives them the others.
    pub fn new(
        setup: Setup,
        body: &serde_json::Value,
        co_seed: u64,
        loras: &[LoraSpec],
    ) -> Result<Verifier, VerifyError> {
        let runner = load(&setup, &Knobs { threads: 1, max_batch_tokens: 1, prefill_chunk: 1, n_blocks: 1 })?;
        let fail = |e: &dyn std::fmt::Display| VerifyError::Model { path: setup.model.clone(), reason: e.to_string() };
        let tok = Arc::new(Tokenizer::load(runner.config()).map_err(|e| fail(&e))?);
        let mut target = target(&runner, &tok, body)?;
        let others = match loras.first() {
            None => Vec::new(),
            Some(first) => {
                let reg = Loras::new(runner.adapter_loader(), loras, 0).map_err(VerifyError::Request)?;
                let named =
                    |model: Option<String>, lora: Option<serde_json::Value>| reg.resolve(&LoraAsk { model, lora });
                let asked =
                    named(body.get("model").and_then(|m| m.as_str()).map(String::from), body.get("lora").cloned())?;
                let mine = match asked {
                    Some(a) => a,
                    None => named(Some(first.name.clone()), None)?
                        .ok_or_else(|| VerifyError::Request(format!("--lora {}: not loaded", first.name)))?,
                };
                let mut others = Vec::new();
                for spec in loras {
                    let a = named(Some(spec.name.clone()), None)?;
                    if a.as_ref().is_some_and(|a| a.key() != mine.key()) {
                        others.push(a);
                    }
                }
                others.push(Some(AdapterChoice { scale: mine.scale * 0.5, ..mine.clone() }));
                others.push(None);
                target.adapter = Some(mine);
                others
            }
        };
        let vocab = runner.config().vocab_size;
        let ctx = runner.config().max_position_embeddings.unwrap_or(4096);
        Ok(Verifier { setup, tok, target, vocab, ctx, rng: Rng::new(co_seed), reference: None, others })
    }

    /// The target request.
    pub fn request(&self) -> &Request {
        &self.target
    }

    fn knobs(&self) -> Knobs {
        Knobs {
            threads: self.setup.threads,
            max_batch_tokens: self.setup.max_batch_tokens,
            prefill_chunk: self.setup.prefill_chunk,
            n_blocks: 0,
        }
    }

    /// Blocks enough for every request to run to `max_tokens` at once (no preemption).
    fn room(&self, reqs: &[Request]) -> u32 {
        reqs.iter().map(|r| blocks(r.prompt.len() + r.max_tokens, self.setup.block_tokens)).sum::<u32>() + 2
    }

    /// Run `reqs` (submitted in order, at once) on a fresh engine; the trace of
    /// `reqs[at]`, and the engine's preemption count.
    fn run(&self, condition: &str, knobs: Knobs, reqs: Vec<Request>, at: usize) -> Result<(Trace, usize), VerifyError> {
        let runner = load(&self.setup, &knobs)?;
        let e = Engine::start(
            runner,
            Arc::clone(&self.tok),
            EngineOptions { max_queue: 4096, observer: None, speculate: None, ..Default::default() },
        )
        .map_err(|err| VerifyError::Engine { condition: condition.into(), err })?;
        let traces = self.submit(&e, condition, reqs)?;
        let preemptions = e.stats().preemptions;
        Ok((traces.into_iter().nth(at).ok_or_else(|| VerifyError::Request("no target".into()))?, preemptions))
    }

    fn submit(&self, e: &Engine, condition: &str, reqs: Vec<Request>) -> Result<Vec<Trace>, VerifyError> {
        let err = |err| VerifyError::Engine { condition: condition.into(), err };
        let rxs = reqs.into_iter().map(|r| e.submit(r)).collect::<Result<Vec<_>, _>>().map_err(err)?;
        rxs.into_iter().map(|rx| collect(rx).map_err(err)).collect()
    }

    /// `n` random co-requests: a random share of the target's prompt (often none) then
    /// random tokens, random sampling parameters, seeds and lengths.
    fn co_requests(&mut self, n: usize) -> Vec<Request> {
        let t = self.target.clone();
        (0..n)
            .map(|_| {
                let rng = &mut self.rng;
                let share = if rng.below(2) == 0 { rng.below(t.prompt.len() + 1) } else { 0 };
                let mut prompt = t.prompt[..share].to_vec();
                let extra = 1 + rng.below(t.prompt.len().max(8));
                prompt.extend((0..extra).map(|_| rng.below(self.vocab) as u32));
                prompt.truncate(self.ctx / 2);
                let mut r = t.clone();
                r.prompt = prompt;
                r.params.temperature = [0.0, 0.7, 1.0, 1.3][rng.below(4)];
                r.params.top_k = [0, 20, 50][rng.below(3)];
                r.params.top_p = [1.0, 0.9][rng.below(2)];
                r.params.repetition_penalty = [1.0, 1.1][rng.below(2)];
                r.params.presence_penalty = [0.0, 0.5][rng.below(2)];
                r.seed = rng.next();
                r.choice = rng.below(3) as u32;
                r.max_tokens = (1 + rng.below(t.max_tokens.max(2) * 2)).min(self.ctx / 2);
                r.stop = vec![];
                r.grammar = None;
                r.logit_bias = vec![];
                r.logprobs = [None, Some(0), Some(3)][rng.below(3)];
                r
            })
            .collect()
    }

    /// The verdict on `trace`: a difference wins over `unexercised` (why the condition
    /// did not happen), since a departure is a departure whatever the run did.
    fn verdict(&self, condition: String, trace: &Trace, note: String, unexercised: Option<String>) -> Verdict {
        let outcome = match self.reference.as_ref().and_then(|r| first_difference(r, trace)) {
            Some(d) => Outcome::Differs(d),
            None => unexercised.map_or(Outcome::Identical, Outcome::NotExercised),
        };
        Verdict { condition, outcome, note }
    }

    /// Tokens the reference generated (0 before it ran).
    fn generated(&self) -> usize {
        self.reference.as_ref().map_or(0, |r| r.tokens.len())
    }

    /// The reference: the target alone on a fresh engine.
    pub fn reference(&mut self) -> Result<&Trace, VerifyError> {
        let mut k = self.knobs();
        k.n_blocks = self.room(std::slice::from_ref(&self.target));
        let (t, _) = self.run("alone", k, vec![self.target.clone()], 0)?;
        Ok(self.reference.insert(t))
    }

    /// In a batch of `size`: `size - 1` random co-requests, the target at a random place.
    pub fn batch(&mut self, size: usize) -> Result<Verdict, VerifyError> {
        let mut reqs = self.co_requests(size.saturating_sub(1));
        let at = self.rng.below(reqs.len() + 1);
        reqs.insert(at, self.target.clone());
        let mut k = self.knobs();
        k.n_blocks = self.room(&reqs);
        let name = format!("batch of {size} ({} random co-requests, target {})", size - 1, at + 1);
        let (t, _) = self.run(&name, k, reqs, at)?;
        Ok(self.verdict(name, &t, String::new(), None))
    }

    /// With a step budget (and prefill piece) of `tokens`, beside 3 co-requests, so
    /// prompts are cut into pieces of that size and share steps with decode rows. A piece
    /// no shorter than the target's prompt does not cut it: not exercised.
    pub fn chunking(&mut self, tokens: usize) -> Result<Verdict, VerifyError> {
        let mut reqs = self.co_requests(3);
        reqs.insert(1, self.target.clone());
        let mut k = self.knobs();
        (k.max_batch_tokens, k.prefill_chunk, k.n_blocks) = (tokens.max(1), tokens.max(1), self.room(&reqs));
        let name = format!("prefill chunks of {tokens} (max_batch_tokens {tokens}, 3 co-requests)");
        let (t, _) = self.run(&name, k, reqs, 1)?;
        let len = self.target.prompt.len();
        let whole = (tokens >= len).then(|| format!("the {len}-token prompt fits in one chunk of {tokens}"));
        Ok(self.verdict(name, &t, String::new(), whole))
    }

    /// Alone with `threads` forward threads.
    pub fn threads(&mut self, threads: usize) -> Result<Verdict, VerifyError> {
        let mut k = self.knobs();
        (k.threads, k.n_blocks) = (threads.max(1), self.room(std::slice::from_ref(&self.target)));
        let name = format!("{threads} thread{}", if threads == 1 { "" } else { "s" });
        let (t, _) = self.run(&name, k, vec![self.target.clone()], 0)?;
        Ok(self.verdict(name, &t, String::new(), None))
    }

    /// After a prefix-cache hit: `half == false`, the same request served just before;
    /// `half == true`, a request sharing the first half of the prompt served before (a hit
    /// that ends inside a block: whole blocks, then the rest copied below block
    /// granularity). Not exercised when no prompt token came from the cache.
    pub fn prefix_hit(&mut self, half: bool) -> Result<Verdict, VerifyError> {
        let b = self.setup.block_tokens as usize;
        let len = self.target.prompt.len();
        let share = len / 2;
        let mut warm = self.target.clone();
        if half {
            // Only full blocks are registered, so the warm request's prompt runs past the
            // shared tokens to the end of their block: the block is registered when its
            // prefill ends, however soon it stops (ending before its block filled is
            // what left a short prompt's hit unexercised).
            warm.prompt.truncate(share);
            let end = (share + 1).next_multiple_of(b).min(self.ctx.saturating_sub(1)).max(share + 1);
            warm.prompt.extend((share..end).map(|_| self.rng.below(self.vocab) as u32));
            // Exactly `share` tokens shared: the next one departs from the target's.
            if warm.prompt[share] == self.target.prompt[share] {
                warm.prompt[share] = (warm.prompt[share] + 1) % self.vocab as u32;
            }
            warm.seed = self.rng.next();
            warm.max_tokens = 1;
        }
        let mut k = self.knobs();
        k.n_blocks = self.room(&[warm.clone(), self.target.clone()]);
        let name = if half {
            "prefix-cache hit (a request sharing the first half of the prompt ran before)"
        } else {
            "prefix-cache hit (the same request ran before)"
        };
        let runner = load(&self.setup, &k)?;
        let e = Engine::start(
            runner,
            Arc::clone(&self.tok),
            EngineOptions { max_queue: 16, observer: None, speculate: None, ..Default::default() },
        )
        .map_err(|err| VerifyError::Engine { condition: name.into(), err })?;
        self.submit(&e, name, vec![warm])?;
        let t = self.submit(&e, name, vec![self.target.clone()])?.remove(0);
        let note = format!("{} of {len} prompt tokens from the cache", t.cached);
        let why = (t.cached == 0).then(|| self.uncached_why(half, share));
        Ok(self.verdict(name.into(), &t, note, why))
    }

    /// Why the target took no prompt token from the cache after the warm request.
    fn uncached_why(&self, half: bool, share: usize) -> String {
        let (b, len, n) = (self.setup.block_tokens as usize, self.target.prompt.len(), self.generated());
        if len == 1 {
            return "a one-token prompt: its only token is always computed, for the logits to sample from".into();
        }
        // The same request registers only the blocks its prompt and output filled.
        if !half && len + n <= b {
            return format!(
                "the request's {len} prompt and {n} generated tokens fill no whole KV block of {b}, so it left \
                 nothing in the cache"
            );
        }
        if half && share < b && std::env::var("TL_PREFIX_REUSE").is_ok_and(|v| v == "blocks") {
            return format!(
                "the {share} shared tokens fill no whole KV block of {b}, and TL_PREFIX_REUSE=blocks lends whole \
                 blocks only"
            );
        }
        "no prompt token came from the cache".into()
    }

    /// With speculative decoding: the target drafts by n-gram prompt lookup (`k` tokens
    /// per step, verified row by row) beside 3 co-requests that decode plainly, so drafted
    /// and plain rows share steps. Not exercised when no token was drafted.
    pub fn speculation(&mut self, k: usize) -> Result<Verdict, VerifyError> {
        let mut reqs = self.co_requests(3);
        for r in &mut reqs {
            r.speculate = Some(Speculation::Off);
        }
        let mut target = self.target.clone();
        target.speculate = Some(Speculation::Ngram { k });
        reqs.insert(1, target);
        let mut kn = self.knobs();
        // Drafted positions take blocks for a step before the rejected ones go back.
        kn.n_blocks = self.room(&reqs) + reqs.len() as u32 * blocks(k, self.setup.block_tokens);
        let name = format!("speculative decoding (n-gram, up to {k} drafted tokens a step, 3 plain co-requests)");
        let runner = load(&self.setup, &kn)?;
        let e = Engine::start(
            runner,
            Arc::clone(&self.tok),
            EngineOptions { max_queue: 16, observer: None, speculate: None, ..Default::default() },
        )
        .map_err(|err| VerifyError::Engine { condition: name.clone(), err })?;
        let t = self.submit(&e, &name, reqs)?.remove(1);
        let st = e.stats();
        let note = format!("{} tokens drafted, {} accepted", st.draft_tokens, st.draft_accepted);
        // Drafting happens in decode steps, and a step drafts at most what the request
        // may still emit after the step's own token.
        let (n, max) = (self.generated(), self.target.max_tokens);
        let why = (st.draft_tokens == 0).then(|| {
            if n <= 1 {
                let s = if n == 1 { "" } else { "s" };
                format!("the request generated {n} token{s}, from its prefill alone: no decode step to draft in")
            } else if max <= 2 {
                format!("max_tokens {max}: a step drafts only tokens that may follow its own, and none may")
            } else {
                "no token was drafted: the latest tokens never occurred earlier in the prompt and output".into()
            }
        });
        Ok(self.verdict(name, &t, note, why))
    }

    /// In a step with other adapters: 4 co-requests, each under another `--lora` adapter,
    /// the target's at half its scale, or the base model (in turn), submitted with the
    /// target so their rows share its steps. `None` without `--lora`.
    pub fn among_adapters(&mut self) -> Result<Option<Verdict>, VerifyError> {
        if self.others.is_empty() {
            return Ok(None);
        }
        let mut reqs = self.co_requests(4);
        for (r, a) in reqs.iter_mut().zip(self.others.iter().cycle()) {
            r.adapter = a.clone();
        }
        let what: Vec<String> = reqs
            .iter()
            .map(|r| r.adapter.as_ref().map_or("none".into(), |a| format!("{}@{}", a.adapter.name(), a.scale)))
            .collect();
        reqs.insert(2, self.target.clone());
        let mut k = self.knobs();
        k.n_blocks = self.room(&reqs);
        let mine = self.target.adapter.as_ref().map_or("none".into(), |a| format!("{}@{}", a.adapter.name(), a.scale));
        let name =
            format!("in a step with other adapters (target under {mine}; co-requests under {})", what.join(", "));
        let (t, _) = self.run(&name, k, reqs, 2)?;
        Ok(Some(self.verdict(name, &t, String::new(), None)))
    }

    /// Under preemption: a pool barely larger than the target needs, six co-requests of
    /// one full block of prompt each growing by three blocks submitted first, the target
    /// last (the newest, so the first one preempted). Not exercised when nothing was
    /// preempted (co-requests that stop early may leave the pool room enough).
    pub fn preemption(&mut self) -> Result<Verdict, VerifyError> {
        let b = self.setup.block_tokens as usize;
        let grow = (3 * b).min(self.ctx.saturating_sub(b)).max(1);
        let mut reqs = self.co_requests(6);
        for r in &mut reqs {
            r.prompt = (0..b).map(|_| self.rng.below(self.vocab) as u32).collect();
            r.max_tokens = grow;
        }
        let need = blocks(self.target.prompt.len() + self.target.max_tokens, self.setup.block_tokens);
        let mut k = self.knobs();
        k.n_blocks = need.max(blocks(b + grow, self.setup.block_tokens)) + 2;
        reqs.push(self.target.clone());
        let name = format!("preemption ({} KV blocks, 6 co-requests, target last)", k.n_blocks);
        let at = reqs.len() - 1;
        let (t, preemptions) = self.run(&name, k, reqs, at)?;
        let note = format!("{preemptions} preemptions, the target's own {}", t.preempted);
        let why = (preemptions == 0).then(|| format!("the pool of {} blocks never ran short", k.n_blocks));
        Ok(self.verdict(name, &t, note, why))
    }
}

fn load(setup: &Setup, k: &Knobs) -> Result<ModelRunner, VerifyError> {
    let cfg = EngineConfig {
        max_batch_tokens: k.max_batch_tokens,
        max_seqs: 64,
        prefill_chunk: k.prefill_chunk,
        threads: k.threads,
        weights: setup.weights,
        activations: setup.activations,
        kv: KvConfig {
            backend: setup.kv_backend.clone(),
            block_tokens: setup.block_tokens,
            n_blocks: Some(k.n_blocks.max(1)),
            ..KvConfig::default()
        },
        ..EngineConfig::default()
    };
    ModelRunner::load(&setup.model, &cfg)
        .map_err(|e| VerifyError::Model { path: setup.model.clone(), reason: e.to_string() })
}

fn collect(mut rx: UnboundedReceiver<Event>) -> Result<Trace, EngineError> {
    let mut t = Trace { tokens: vec![], text: String::new(), finish: FinishReason::Length, cached: 0, preempted: 0 };
    loop {
        match rx.blocking_recv() {
            Some(Event::Token { token, text }) => {
                t.tokens.push(token);
                t.text.push_str(&text);
            }
            Some(Event::Done { finish, text, usage, timings }) => {
                t.text.push_str(&text);
                (t.finish, t.cached, t.preempted) = (finish, usage.cached_tokens, timings.preempted);
                return Ok(t);
            }
            Some(Event::Error(e)) => return Err(e),
            None => return Err(EngineError::Internal("the engine hung up before the end".into())),
        }
    }
}
