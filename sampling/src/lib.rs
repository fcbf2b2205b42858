//! tl-sampling: the generator of docs/spec/pcg32.md and the sampler of
//! docs/spec/sampling.md, bit for bit.
//!
//! - [`Pcg32`], [`child_seed`], [`stream`], [`PURPOSE_SAMPLE`]: one seeded stream per purpose.
//! - [`choice_stream`]: the sampling stream of choice `c` of a request with `n > 1` choices
//!   (choice 0 is `stream(seed, PURPOSE_SAMPLE)`).
//! - [`sample`]: one token and its f64 logprob; [`SpecSampler`] is the same algorithm with
//!   buffers kept across calls, registered with tl-core as `"spec"`.
//! - [`sample_constrained`] / [`Constraint`]: step 3a, a grammar's allowed ids and `logit_bias`.
#![deny(missing_docs)]

mod pcg;
mod sample;

pub use pcg::{child_seed, choice_stream, stream, Pcg32, PURPOSE_SAMPLE};
pub use sample::{sample, sample_constrained, Constraint, SpecSampler, BAN};
pub use tl_core::{SampleError, SamplingParams};

tl_core::inventory::submit!(tl_core::SamplerRegistration { name: "spec", make: || Box::new(SpecSampler::new()) });
