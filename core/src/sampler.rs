//! The sampler extension point: a logits row plus history and a generator into
//! `(id, logprob)`. The algorithm is docs/spec/sampling.md; tl-sampling provides it,
//! registered as `"spec"`.

use thiserror::Error;

/// A source of uniform randomness (tl-sampling's `Pcg32` implements it).
pub trait Rng {
    /// The next 32 random bits.
    fn next_u32(&mut self) -> u32;
    /// A uniform double in [0, 1), as pcg32.md defines it (two `next_u32` calls).
    fn uniform_f64(&mut self) -> f64;
}

/// Sampling parameters (sampling.md's table). `Default` is the neutral row with
/// temperature 1.0; [`SamplingParams::greedy`] has temperature 0.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 = greedy.
    pub temperature: f64,
    /// Keep the k best; 0 = off.
    pub top_k: usize,
    /// Nucleus mass in (0, 1]; 1 = off.
    pub top_p: f64,
    /// In [0, 1]; keep ids with prob >= min_p * max prob; 0 = off.
    pub min_p: f64,
    /// > 0; 1 = off (Hugging Face semantics: divide positive logits, multiply negative).
    pub repetition_penalty: f64,
    /// OpenAI presence penalty over the output; 0 = off.
    pub presence_penalty: f64,
    /// OpenAI frequency penalty over the output; 0 = off.
    pub frequency_penalty: f64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
        }
    }
}

impl SamplingParams {
    /// The neutral parameters with temperature 0: argmax, no draw.
    pub fn greedy() -> Self {
        SamplingParams { temperature: 0.0, ..Default::default() }
    }
}

/// Bad sampler input (sampling.md, "Bad input is an error").
#[derive(Debug, Error, Clone, PartialEq)]
pub enum SampleError {
    /// An empty logits row.
    #[error("sampler: empty logits row (V = 0)")]
    EmptyLogits,
    /// A NaN or +inf logit.
    #[error("sampler: logit {id} is {value} (NaN and +inf are refused)")]
    BadLogit {
        /// The id.
        id: u32,
        /// Its value.
        value: f32,
    },
    /// Every logit is -inf.
    #[error("sampler: every logit is -inf")]
    AllMasked,
    /// A constraint (step 3a: a grammar's allowed set, `logit_bias` of -100) left no id
    /// with a finite logit.
    #[error("sampler: the constraint allows no token here (every allowed id has logit -inf)")]
    NothingAllowed,
    /// A prompt or output id past the vocabulary.
    #[error("sampler: {which} history id {id} >= vocabulary size {vocab}")]
    BadHistoryId {
        /// "prompt" or "output".
        which: &'static str,
        /// The id.
        id: u32,
        /// V.
        vocab: usize,
    },
    /// A parameter out of its range.
    #[error("sampler: {field} = {value} is out of range ({range})")]
    BadParam {
        /// The field name.
        field: &'static str,
        /// Its value.
        value: f64,
        /// The allowed range, in words.
        range: &'static str,
    },
}

/// Turns a logits row into a token.
pub trait Sampler: Send {
    /// Pick `(id, logprob)` from `logits`, given the request's history and generator.
    /// Implementations may keep buffers across calls (`&mut self`).
    fn sample(
        &mut self,
        logits: &[f32],
        params: &SamplingParams,
        prompt: &[u32],
        output: &[u32],
        rng: &mut dyn Rng,
    ) -> Result<(u32, f64), SampleError>;
}

/// A sampler registration: `inventory::submit!(SamplerRegistration { name, make })`.
pub struct SamplerRegistration {
    /// The name it is selected by.
    pub name: &'static str,
    /// A fresh sampler.
    pub make: fn() -> Box<dyn Sampler>,
}

inventory::collect!(SamplerRegistration);
