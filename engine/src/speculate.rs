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
            kv: None,
            mtp: None,
            spares: Vec::new(),
        })
    }
}
