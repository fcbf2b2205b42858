//! What a sequence does with the rows its step computes, chosen once when the sequence is
//! created: sample its next token, verify the tokens it drafted, or pool its hidden rows.
//! The step dispatches on it (step.rs) instead of asking each sequence what it is.

use tl_core::KvBackend;

use crate::embed::Pooler;
use crate::error::{kv_err, EngineError};
use crate::speculate::{Drafting, Speculation};

/// A sequence's tail.
pub(crate) enum Tail {
    /// Sample one token from the row of its last fed token (emit.rs).
    Sample,
    /// Speculate: draft before the step, then sample the drafted rows in order while they
    /// agree (speculator.rs); a step without a draft samples as [`Tail::Sample`] does.
    Verify(Box<Drafting>),
    /// An embedding: pool the hidden row of every prompt position (embed.rs), then finish
    /// with the vector; it never samples.
    Pool(Pooler),
}

impl Tail {
    /// The tail of a generation that speculates with `spec` (`Off`: plain sampling).
    pub(crate) fn of(spec: Speculation) -> Tail {
        match Drafting::of(spec) {
            Some(d) => Tail::Verify(Box::new(d)),
            None => Tail::Sample,
        }
    }

    /// The drafting state of a speculating sequence.
    pub(crate) fn drafting(&self) -> Option<&Drafting> {
        match self {
            Tail::Verify(d) => Some(d),
            _ => None,
        }
    }

    /// [`Tail::drafting`], to change.
    pub(crate) fn drafting_mut(&mut self) -> Option<&mut Drafting> {
        match self {
            Tail::Verify(d) => Some(d),
            _ => None,
        }
    }

    /// The tokens drafted for the current step (none unless it speculates and drafted).
    pub(crate) fn draft(&self) -> &[u32] {
        self.drafting().map_or(&[], |d| &d.draft)
    }

    /// An embedding's pooling.
    pub(crate) fn pooler(&self) -> Option<&Pooler> {
        match self {
            Tail::Pool(p) => Some(p),
            _ => None,
        }
    }

    /// An embedding's pooling, taken out at its finish (the tail is then plain).
    pub(crate) fn take_pooler(&mut self) -> Option<Pooler> {
        match std::mem::replace(self, Tail::Sample) {
            Tail::Pool(p) => Some(p),
            other => {
                *self = other;
                None
            }
        }
    }

    /// The forward must return this sequence's hidden rows (an embedding pools them, an
    /// MTP head drafts from them). Such a sequence takes no prefix-cache hits: it needs
    /// the row of every position.
    pub(crate) fn needs_hidden(&self) -> bool {
        match self {
            Tail::Pool(_) => true,
            Tail::Verify(d) => matches!(d.spec, Speculation::Mtp { .. }),
            Tail::Sample => false,
        }
    }

    /// The sequence's KV was released (`pool` is the target's) and its prompt is fed
    /// again from position 0: forget what the rows gave so far.
    pub(crate) fn reset(&mut self, pool: &mut dyn KvBackend) -> Result<(), EngineError> {
        match self {
            Tail::Pool(p) => p.reset(), // its rows are fed again from position 0
            Tail::Verify(d) => {
                d.kv = None; // its draft-pool blocks go back with it
                d.mtp = None; // the recompute gives the head its rows again
                tl_core::release_all(pool, d.spares.drain(..)).map_err(kv_err)?;
            }
            Tail::Sample => {}
        }
        Ok(())
    }
}
