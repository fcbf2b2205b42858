//! One sequence, from submit to finish: its tokens and KV blocks (the scheduler's), and
//! three parts with one owner each: sampling and stops ([`Emission`], emit.rs), its
//! [`Tail`] (tail.rs: sample, verify drafts, or pool an embedding; chosen here, at
//! creation) and the P/D hand-off ([`Handoff`], lease.rs).

use llguidance::Matcher;
use tl_core::KvBackend;
use tokio::sync::mpsc::UnboundedSender;

use crate::embed::{EmbedRequest, EmbedResult, Pooler};
use crate::emit::{Emission, Emitter, Sink};
use crate::error::{kv_err, EngineError};
use crate::lease::Handoff;
use crate::request::{Event, FinishReason, Request};
use crate::speculate::Speculation;
use crate::tail::Tail;

/// One sequence, from submit to finish.
pub(crate) struct Seq {
    /// Submit order: the largest is the newest, the first to be preempted.
    pub(crate) order: u64,
    pub(crate) req: Request,
    /// Prompt then output, (n_prompt + generated,).
    pub(crate) tokens: Vec<u32>,
    pub(crate) n_prompt: usize,
    /// Leading tokens whose K/V are in `blocks`.
    pub(crate) computed: usize,
    /// Block table: position j lives in blocks[j / B], (>= computed.div_ceil(B),).
    pub(crate) blocks: Vec<u32>,
    /// Leading blocks registered in the prefix index.
    pub(crate) registered: usize,
    /// Chained block hash of each full block of `tokens`, (<= tokens.len() / B,). A pure
    /// function of the tokens, so it survives preemption.
    pub(crate) chain: Vec<u64>,
    pub(crate) cached_tokens: Option<usize>,
    /// Still counted in the bounded submit queue (not yet admitted once).
    pub(crate) counted: bool,
    pub(crate) preempted: bool,
    /// Times preempted so far.
    pub(crate) n_preempted: u32,
    /// Tokens planned for the current step.
    pub(crate) take: usize,
    /// Sampling, stops and events.
    pub(crate) out: Emission,
    /// What the step does with its rows: sample, verify drafts, or pool.
    pub(crate) tail: Tail,
    /// What P/D asked of this sequence (a prefill's lease, a decode's preload).
    pub(crate) handoff: Handoff,
}

impl Seq {
    pub(crate) fn new(
        order: u64,
        req: Request,
        spec: Speculation,
        matcher: Option<Matcher>,
        tx: UnboundedSender<Event>,
    ) -> Seq {
        let out = Emission::new(&req, matcher, Sink::Tokens(tx));
        Seq {
            order,
            tokens: req.prompt.clone(),
            n_prompt: req.prompt.len(),
            req,
            computed: 0,
            blocks: Vec::new(),
            registered: 0,
            chain: Vec::new(),
            cached_tokens: None,
            counted: true,
            preempted: false,
            n_preempted: 0,
            take: 0,
            out,
            tail: Tail::of(spec),
            handoff: Handoff::default(),
        }
    }

    /// An embedding sequence: its prompt is fed (hidden rows pooled), then it ends with
    /// one result; it never samples nor speculates.
    pub(crate) fn embedding(order: u64, e: &EmbedRequest, tx: UnboundedSender<EmbedResult>) -> Seq {
        let req = Request {
            prompt: e.prompt.clone(),
            params: tl_core::SamplingParams::default(),
            seed: 0,
            choice: 0,
            max_tokens: 1,
            stop: Vec::new(),
            logprobs: None,
            grammar: None,
            logit_bias: Vec::new(),
            speculate: Some(Speculation::Off),
            adapter: None,
        };
        let mut s = Seq::new(order, req, Speculation::Off, None, tokio::sync::mpsc::unbounded_channel().0);
        s.out = Emission::new(&s.req, None, Sink::Embedding(tx));
        s.tail = Tail::Pool(Pooler::new(e));
        s
    }

    /// P/D decode: start from `blocks`, which hold this prompt's first `computed`
    /// positions (ref 1 each, owned by the sequence from now on; pd.rs), the first
    /// `local` of them found in this pool's prefix cache.
    pub(crate) fn preload(&mut self, blocks: Vec<u32>, computed: usize, local: usize) {
        self.blocks = blocks;
        self.computed = computed;
        self.handoff.preload_local = local;
    }

    pub(crate) fn generated(&self) -> usize {
        self.tokens.len() - self.n_prompt
    }

    /// The parent hash of full block `k` (`chain` must reach `k - 1`): the block before's,
    /// or for the first the chain's root (the adapter's key; `None` for the base).
    pub(crate) fn parent(&self, k: usize) -> Option<u64> {
        k.checked_sub(1).map(|p| self.chain[p]).or_else(|| crate::request::chain_root(self.req.adapter.as_ref()))
    }

    /// Extend `chain` to the first `n` full blocks.
    pub(crate) fn chain_upto(&mut self, n: usize, b: usize) {
        while self.chain.len() < n {
            let k = self.chain.len();
            let parent = self.parent(k);
            self.chain.push(tl_core::block_hash(parent, &self.tokens[k * b..(k + 1) * b]));
        }
    }

    /// Sample the next token from `row` (emit.rs); `Some` when the sequence is done.
    pub(crate) fn sample(&mut self, em: &mut Emitter, row: &[f32]) -> Result<Option<FinishReason>, EngineError> {
        em.sample(&mut self.out, &self.req, &mut self.tokens, self.n_prompt, row)
    }

    /// Give every block back; its K/V must be recomputed (registered full blocks stay
    /// findable in the prefix cache, so the recompute usually hits them).
    pub(crate) fn release_blocks(&mut self, pool: &mut dyn KvBackend) -> Result<(), EngineError> {
        tl_core::release_all(pool, self.blocks.drain(..)).map_err(kv_err)?;
        self.computed = 0;
        self.registered = 0;
        self.tail.reset(pool)
    }
}
