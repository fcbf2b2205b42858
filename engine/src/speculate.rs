//! Speculative decoding that changes nothing: drafting (n-gram prompt lookup, a draft
//! model, or the model's own MTP head), the adaptive rule, and the settings.
//!
//! A sequence that drafts `d1..dk` feeds `[last, d1..dk]` as one chunk; the forward gives
//! row `j` of that chunk the bits a one-token step after `d1..dj` would give it (the
//! forward is chunk- and batch-invariant), so sampling rows in order with the request's
//! own sampler, and stopping at the first sampled token that is not the draft's, emits
//! exactly the tokens plain decoding would. This file holds the rules and each
//! sequence's drafting state; speculator.rs plans drafts and verifies them, and the step
//! calls it only for sequences that speculate.

use std::str::FromStr;

use crate::draft::DraftKv;
use crate::mtp::MtpState;

/// The most tokens one sequence drafts per step.
pub const MAX_DRAFT: usize = 16;

/// Default of `EngineOptions::spec_step_rows`: a sequence adds drafts to a step
/// only while the step holds fewer rows (tokens) than this. Drafted rows are nearly free
/// only while a step is bound by reading the weights, which on a CPU holds to ~5-8 rows
/// (past that each row adds its multiply-adds), so under load plain decoding is the faster
/// choice. Output is the same bits either way.
pub const SPEC_STEP_ROWS: usize = 8;

/// `serve`'s default for `EngineOptions::spec_p_min`: a draft model's draft ends at a
/// token it gives less than this probability. The real pair measured in
/// docs/benchmarks.md (Qwen2.5-Coder 0.5B drafting for the 1.5B, 2 CPU threads) drafts
/// four tokens at a cost of about 1.3 plain target steps before any is verified, so free
/// text, where the draft is often unsure, ran at 0.66x plain decoding with every token
/// drafted. llama.cpp's `--draft-p-min` rule, at its value.
pub const SPEC_P_MIN: f32 = 0.75;

/// The longest suffix the n-gram lookup tries to match (then shorter ones, down to 1).
pub const NGRAM_MAX: usize = 4;

/// How a sequence drafts tokens to verify.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Speculation {
    /// Plain decoding: one token per step.
    Off,
    /// Prompt lookup over the sequence's own prompt and output: the longest suffix of
    /// length [`NGRAM_MAX`]..1 that occurred before proposes the `k` tokens that followed
    /// its latest earlier occurrence. No match, no speculation.
    Ngram {
        /// Most tokens drafted per step, `1..=MAX_DRAFT`.
        k: usize,
    },
    /// The engine's draft model (same vocabulary), greedy, `k` tokens per step.
    Draft {
        /// Most tokens drafted per step, `1..=MAX_DRAFT`.
        k: usize,
    },
    /// The model's own multi-token-prediction head (mtp.rs), greedy, `k` tokens per step.
    Mtp {
        /// Most tokens drafted per step, `1..=MAX_DRAFT`.
        k: usize,
    },
}

impl Speculation {
    /// Tokens drafted per step (0 when off).
    pub fn k(self) -> usize {
        match self {
            Speculation::Off => 0,
            Speculation::Ngram { k } | Speculation::Draft { k } | Speculation::Mtp { k } => k,
        }
    }

    /// Refuse a `k` outside `1..=MAX_DRAFT`.
    pub fn check(self) -> Result<(), String> {
        match self {
            Speculation::Off => Ok(()),
            _ if (1..=MAX_DRAFT).contains(&self.k()) => Ok(()),
            _ => Err(format!("k = {} is outside 1..={MAX_DRAFT}", self.k())),
        }
    }
}

impl FromStr for Speculation {
    type Err = String;

    /// `off`, `ngram`, `ngram:K`, `draft`, `draft:K`, `mtp`, `mtp:K` (the draft model
    /// itself is a server setting; the MTP head is the model's own). K defaults to 4.
    fn from_str(s: &str) -> Result<Speculation, String> {
        let (kind, k) = match s.split_once(':') {
            Some((kind, k)) => {
                let k = k.parse::<usize>().map_err(|_| format!("speculate {s:?}: K must be a number"))?;
                (kind, k)
            }
            None => (s, 4),
        };
        let spec = match kind {
            "off" => Speculation::Off,
            "ngram" => Speculation::Ngram { k },
            "draft" => Speculation::Draft { k },
            "mtp" => Speculation::Mtp { k },
            _ => return Err(format!("speculate {s:?}: expected off, ngram[:K], draft[:K] or mtp[:K]")),
        };
        spec.check().map_err(|e| format!("speculate {s:?}: {e}"))?;
        Ok(spec)
    }
}

/// Append to `out` up to `k` tokens proposed by prompt lookup over `tokens` (prompt then
/// output): for n from [`NGRAM_MAX`] down to 1, the latest earlier occurrence of the last
/// n tokens proposes the tokens that followed it. Nothing when no suffix recurs.
pub fn ngram_draft(tokens: &[u32], k: usize, out: &mut Vec<u32>) {
    let len = tokens.len();
    for n in (1..=NGRAM_MAX.min(len.saturating_sub(1))).rev() {
        let suffix = &tokens[len - n..];
        // Latest start j < len - n with tokens[j..j + n] == suffix; what follows is
        // tokens[j + n..], at least one token since j + n < len.
        let found = (0..len - n).rev().find(|&j| &tokens[j..j + n] == suffix);
        if let Some(j) = found {
            let from = j + n;
            out.extend_from_slice(&tokens[from..(from + k).min(len)]);
            return;
        }
    }
}

/// The adaptive rule, per sequence: a verify step *misses* when it accepts fewer than half
/// of its drafted tokens (a k+1-row step that yields one or two tokens costs more than it
/// saves). Two misses in a row pause drafting for `cool` plain steps; `cool` starts at 4
/// and doubles with every pause up to 64; a step that accepts at least half resets both.
/// So text where lookups keep missing soon runs at plain speed, and a copy-heavy stretch
/// is found again within at most 64 tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Adapt {
    misses: u32,
    pause: u32,
    cool: u32,
}

/// The first pause, in plain steps.
pub const COOL_START: u32 = 4;
/// The longest pause, in plain steps.
pub const COOL_MAX: u32 = 64;

impl Default for Adapt {
    fn default() -> Self {
        Adapt { misses: 0, pause: 0, cool: COOL_START }
    }
}

impl Adapt {
    /// Whether this step may draft; a paused sequence counts one plain step down.
    pub fn may_draft(&mut self) -> bool {
        if self.pause > 0 {
            self.pause -= 1;
            return false;
        }
        true
    }

    /// The measured costs say plain decoding is faster for now: pause as after two misses
    /// (the pause doubles each time, up to [`COOL_MAX`]).
    pub fn rest(&mut self) {
        self.misses = 0;
        self.pause = self.cool;
        self.cool = (self.cool * 2).min(COOL_MAX);
    }

    /// After a verify step that drafted `drafted` tokens and accepted `accepted` of them.
    pub fn verified(&mut self, accepted: usize, drafted: usize) {
        if accepted * 2 >= drafted.max(1) {
            *self = Adapt::default();
            return;
        }
        self.misses += 1;
        if self.misses >= 2 {
            self.misses = 0;
            self.pause = self.cool;
            self.cool = (self.cool * 2).min(COOL_MAX);
        }
    }
}

/// The most rows a step is measured for ([`StepCosts`]): beyond, drafts do not join.
const COST_ROWS: usize = 64;
/// How fast the measured means follow a change (the weight of the newest figure).
const COST_EMA: f64 = 0.125;

/// What drafting costs on this machine, as measured by the engine's own steps, so each
/// draft's length can be chosen to maximise tokens per second ([`StepCosts::best_k`]):
/// a running mean of the forward time of steps of `r` decode rows (no prompt rows), and
/// of one drafted position's share of a draft model's (or MTP head's) pass. On a CPU
/// both differ by an order of magnitude between machines and activation modes (one
/// verified row costs 0.1 of a step on some, 0.6 on others), which is why they are
/// measured rather than assumed. Only speed depends on them: the tokens are those of
/// plain decoding whatever is drafted.
#[derive(Clone, Debug)]
pub struct StepCosts {
    step: Vec<Option<f64>>,
    per_draft: [Option<f64>; 2],
}

impl Default for StepCosts {
    fn default() -> Self {
        StepCosts { step: vec![None; COST_ROWS], per_draft: [None; 2] }
    }
}

fn mix(old: Option<f64>, x: f64) -> Option<f64> {
    Some(old.map_or(x, |o| o + COST_EMA * (x - o)))
}

/// How much faster than plain decoding drafts that are always accepted must be for
/// drafting to be tried at all ([`StepCosts::pays`]).
pub const PAYS_BY: f64 = 1.1;

/// Which drafter a drafting cost belongs to (n-gram lookups cost nothing measurable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drafter {
    /// The engine's draft model.
    Model,
    /// The model's own MTP head.
    Head,
}

impl StepCosts {
    /// A forward of `rows` decode rows took `secs`.
    pub fn step(&mut self, rows: usize, secs: f64) {
        if let Some(slot) = rows.checked_sub(1).and_then(|i| self.step.get_mut(i)) {
            *slot = mix(*slot, secs);
        }
    }

    /// `which` drafted `positions` positions in `secs` (sequential forwards: the batch's
    /// longest draft).
    pub fn drafted(&mut self, which: Drafter, positions: usize, secs: f64) {
        if positions > 0 {
            let slot = &mut self.per_draft[which as usize];
            *slot = mix(*slot, secs / positions as f64);
        }
    }

    /// A step of `rows` decode rows: measured, else the straight line between the nearest
    /// measured sizes below and above; `None` when there is no size above to draw it to.
    fn time(&self, rows: usize) -> Option<f64> {
        let at = |r: usize| self.step.get(r.checked_sub(1)?).copied().flatten();
        if let Some(t) = at(rows) {
            return Some(t);
        }
        let lo = (1..rows).rev().find_map(|r| at(r).map(|t| (r, t)))?;
        let hi = (rows + 1..=COST_ROWS).find_map(|r| at(r).map(|t| (r, t)))?;
        Some(lo.1 + (hi.1 - lo.1) * (rows - lo.0) as f64 / (hi.0 - lo.0) as f64)
    }

    /// Whether drafting can pay at all: drafts that are always accepted, at their best
    /// length, beat plain decoding by [`PAYS_BY`] (a smaller gain is not worth the misses
    /// a real acceptance brings). `None` when a cost it needs is not measured yet.
    pub fn pays(&self, base: usize, kmax: usize, which: Option<Drafter>) -> Option<bool> {
        let (_, rate, plain) = self.best(base, kmax, 1.0, which)?;
        Some(rate >= PAYS_BY * plain)
    }

    /// The draft length, 0..=`kmax`, that gives the most tokens per second on top of a
    /// step of `base` rows when each drafted token is accepted with probability
    /// `accept` (so `k` drafts yield `1 + a + ... + a^k` tokens on average) and drafting
    /// costs `which`'s measured time per position (`None`: an n-gram lookup, free). 0
    /// means plain decoding is faster. `None` when a cost it needs is not measured yet
    /// (the caller drafts `kmax`, which measures it).
    pub fn best_k(&self, base: usize, kmax: usize, accept: f64, which: Option<Drafter>) -> Option<usize> {
        self.best(base, kmax, accept, which).map(|(k, _, _)| k)
    }

    /// [`StepCosts::best_k`]'s length with its tokens per second, and plain decoding's.
    fn best(&self, base: usize, kmax: usize, accept: f64, which: Option<Drafter>) -> Option<(usize, f64, f64)> {
        let plain = 1.0 / self.time(base)?;
        let per = match which {
            Some(w) => self.per_draft[w as usize]?,
            None => 0.0,
        };
        let (mut best, mut best_rate) = (0, plain);
        let (mut tokens, mut p) = (1.0, 1.0);
        for k in 1..=kmax {
            p *= accept;
            tokens += p;
            let rate = tokens / (k as f64 * per + self.time(base + k)?);
            if rate > best_rate {
                (best, best_rate) = (k, rate);
            }
        }
        Some((best, best_rate, plain))
    }
}

/// A sequence's drafted tokens' acceptance, as a running estimate of the chance that the
/// next drafted token is accepted (recent verify steps weigh most), and whether its next
/// draft is a probe (drafted in full to measure again after a pause).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Acceptance {
    hits: f64,
    tries: f64,
    pub(crate) probe: bool,
    /// Drafts no more: the measured costs say a draft model does not pay for this
    /// sequence. A draft model cannot pause cheaply: when drafting resumes it first feeds
    /// every token of the pause through its own forward (on a CPU about a fifth of a
    /// target step per paused token), so it stops for good instead.
    pub(crate) retired: bool,
    /// Verify steps seen (a draft model's unsure first token counts as one).
    verifies: u32,
}

impl Default for Acceptance {
    fn default() -> Self {
        Acceptance { hits: 0.0, tries: 0.0, probe: true, retired: false, verifies: 0 }
    }
}

impl Acceptance {
    /// A verify step accepted `accepted` of `drafted` tokens (a rejection is a try too).
    pub(crate) fn verified(&mut self, accepted: usize, drafted: usize) {
        let tries = accepted + usize::from(accepted < drafted);
        self.hits = 0.75 * self.hits + accepted as f64;
        self.tries = 0.75 * self.tries + tries as f64;
        self.probe = false;
        self.verifies = self.verifies.saturating_add(1);
    }

    /// The estimate, with half a hit and half a miss of prior weight.
    pub(crate) fn rate(&self) -> f64 {
        (self.hits + 0.5) / (self.tries + 1.0)
    }

    /// Enough verify steps were seen to trust [`Acceptance::rate`] with stopping a draft
    /// model for good (counted in steps: drafts of one token would never add up to many
    /// recent tries).
    pub(crate) fn settled(&self) -> bool {
        self.verifies >= 4
    }
}

/// A speculating sequence's drafting state (a sequence that does not speculate has none):
/// owned by speculator.rs, which alone reads and writes it.
pub(crate) struct Drafting {
    /// How this sequence drafts (the request's setting, else the engine's; never `Off`).
    pub(crate) spec: Speculation,
    /// Tokens drafted for the current step, fed after its `take` tokens, (<= MAX_DRAFT,).
    pub(crate) draft: Vec<u32>,
    /// The current step's chunk when it drafts: `take` tokens then `draft`.
    pub(crate) feed: Vec<u32>,
    /// Blocks held before the current step's drafts took more (those go back after).
    pub(crate) spec_blocks: usize,
    pub(crate) adapt: Adapt,
    /// How often its drafts are accepted (for the measured-cost rule).
    pub(crate) accept: Acceptance,
    /// Its K/V in the draft model's pool (draft-model speculation only).
    pub(crate) kv: Option<DraftKv>,
    /// Its MTP head's K/V and the target's hidden rows it has yet to use (MTP only).
    pub(crate) mtp: Option<MtpState>,
    /// A hybrid model's verify step: state slots receiving the state after the step's
    /// last non-draft token and each draft but the last (kv.md, "Speculation"); the one
    /// of the accepted length becomes the row's slot, the others go back.
    pub(crate) spares: Vec<u32>,
}

impl Drafting {
    /// The state of a sequence that speculates with `spec`; `None` for `Off`, so the step
    /// never calls speculation for it.
    pub(crate) fn of(spec: Speculation) -> Option<Drafting> {
        (spec != Speculation::Off).then(|| Drafting {
            spec,
            draft: Vec::new(),
            feed: Vec::new(),
            spec_blocks: 0,
            adapt: Adapt::default(),
            accept: Acceptance::default(),
            kv: None,
            mtp: None,
            spares: Vec::new(),
        })
    }
}
