//! tl-sampling: the generator of ../shared/spec/pcg32.md and the sampler of
//! ../shared/spec/sampling.md, bit for bit.
//!
//! - [`Pcg32`], [`child_seed`], [`stream`], [`PURPOSE_SAMPLE`]: one seeded stream per purpose.
//! - [`sample`]: one token and its f64 logprob; [`SpecSampler`] is the same algorithm with
//!   buffers kept across calls, registered with tl-core as `"spec"`.
#![deny(missing_docs)]

mod pcg;
mod sample;

pub use pcg::{child_seed, stream, Pcg32, PURPOSE_SAMPLE};
pub use sample::{sample, SpecSampler};
pub use tl_core::{SampleError, SamplingParams};

tl_core::inventory::submit!(tl_core::SamplerRegistration { name: "spec", make: || Box::new(SpecSampler::new()) });
