//! The sampler of docs/spec/sampling.md. Every sum is a left-to-right f64 loop in the order the spec
//! names; orderings use (s descending, id ascending) with `==` on values, so -0.0 and +0.0
//! tie and fall back to the id, as in any implementation that compares numbers.

use std::cmp::Ordering;

use tl_core::{Rng, SampleError, Sampler, SamplingParams};

use crate::pcg::Pcg32;

/// First chunk of the lazily sorted nucleus walk; each further chunk doubles.
const FIRST_CHUNK: usize = 64;

/// Step 3a of sampling.md for one position: the ids a constraint allows and the request's
/// `logit_bias`. [`Constraint::default`] constrains nothing (and skips the step).
#[derive(Clone, Copy, Debug, Default)]
pub struct Constraint<'a> {
    /// The allowed ids as a bitset: id `i` is allowed when bit `i % 32` of word `i / 32`
    /// is set (llguidance's mask layout); ids past the last word are not allowed. `None`
    /// allows every id.
    pub allowed: Option<&'a [u32]>,
    /// `(id, bias)` pairs, each id at most once: a bias of exactly -100 excludes the id, any
    /// other (in [-100, 100]) is added to its logit.
    pub bias: &'a [(u32, f64)],
}

impl Constraint<'_> {
    fn is_none(&self) -> bool {
        self.allowed.is_none() && self.bias.is_empty()
    }
}

/// The bias that excludes an id (OpenAI: "-100 should result in a ban").
pub const BAN: f64 = -100.0;

fn check_constraint(c: &Constraint, v: usize) -> Result<(), SampleError> {
    for &(id, b) in c.bias {
        if id as usize >= v {
            return Err(bad("logit_bias token id", id as f64, "below the vocabulary size"));
        }
        if !(-100.0..=100.0).contains(&b) {
            return Err(bad("logit_bias", b, "[-100, 100]"));
        }
    }
    Ok(())
}

/// The spec sampler with its buffers kept across calls (one allocation per vocabulary size).
#[derive(Default, Debug)]
pub struct SpecSampler {
    /// Penalised logits, (V,).
    l: Vec<f64>,
    /// Temperature-scaled logits, (V,).
    s: Vec<f64>,
    /// Candidate ids, in step-7 order where an order is needed, (<= V,).
    ids: Vec<u32>,
    /// Kept ids in ascending order, (<= V,).
    asc: Vec<u32>,
    /// Per-id marks for distinct history ids; all false between calls, (V,).
    seen: Vec<bool>,
    /// Per-id counts in the output; all zero between calls, (V,).
    count: Vec<u32>,
}

fn bad(field: &'static str, value: f64, range: &'static str) -> SampleError {
    SampleError::BadParam { field, value, range }
}

fn check_params(p: &SamplingParams) -> Result<(), SampleError> {
    if !(p.temperature.is_finite() && p.temperature >= 0.0) {
        return Err(bad("temperature", p.temperature, "finite and >= 0"));
    }
    if !(p.top_p > 0.0 && p.top_p <= 1.0) {
        return Err(bad("top_p", p.top_p, "(0, 1]"));
    }
    if !(p.min_p >= 0.0 && p.min_p <= 1.0) {
        return Err(bad("min_p", p.min_p, "[0, 1]"));
    }
    if !(p.repetition_penalty.is_finite() && p.repetition_penalty > 0.0) {
        return Err(bad("repetition_penalty", p.repetition_penalty, "finite and > 0"));
    }
    // Not listed by sampling.md, but a NaN or infinite penalty has no meaning either.
    if !p.presence_penalty.is_finite() {
        return Err(bad("presence_penalty", p.presence_penalty, "finite"));
    }
    if !p.frequency_penalty.is_finite() {
        return Err(bad("frequency_penalty", p.frequency_penalty, "finite"));
    }
    Ok(())
}

fn check_input(logits: &[f32], prompt: &[u32], output: &[u32]) -> Result<(), SampleError> {
    let v = logits.len();
    if v == 0 {
        return Err(SampleError::EmptyLogits);
    }
    if v > u32::MAX as usize {
        return Err(SampleError::BadParam { field: "vocabulary size", value: v as f64, range: "<= u32::MAX" });
    }
    if let Some((id, &value)) = logits.iter().enumerate().find(|(_, x)| x.is_nan() || **x == f32::INFINITY) {
        return Err(SampleError::BadLogit { id: id as u32, value });
    }
    if logits.iter().all(|x| *x == f32::NEG_INFINITY) {
        return Err(SampleError::AllMasked);
    }
    for (which, hist) in [("prompt", prompt), ("output", output)] {
        if let Some(&id) = hist.iter().find(|&&id| id as usize >= v) {
            return Err(SampleError::BadHistoryId { which, id, vocab: v });
        }
    }
    Ok(())
}

/// The first largest value (`>` from -inf), so which of -0.0 and +0.0 wins is fixed.
#[inline]
fn max_of(xs: impl Iterator<Item = f64>) -> f64 {
    let mut m = f64::NEG_INFINITY;
    for x in xs {
        if x > m {
            m = x;
        }
    }
    m
}

/// (s descending, id ascending); values never NaN here.
#[inline]
fn by_score(s: &[f64]) -> impl Fn(&u32, &u32) -> Ordering + '_ {
    move |&a, &b| {
        let (x, y) = (s[a as usize], s[b as usize]);
        if x > y {
            Ordering::Less
        } else if x < y {
            Ordering::Greater
        } else {
            a.cmp(&b)
        }
    }
}

/// Step 8's walk over `ids` in step-7 order, sorting only as far as it walks. Returns how
/// many candidates are kept (through the first at which `c >= top_p`).
fn nucleus(ids: &mut [u32], s: &[f64], m: f64, z: f64, top_p: f64) -> usize {
    let cmp = by_score(s);
    let mut c = 0.0f64;
    let mut done = 0;
    let mut chunk = FIRST_CHUNK;
    while done < ids.len() {
        let rest = &mut ids[done..];
        let take = chunk.min(rest.len());
        if take < rest.len() {
            rest.select_nth_unstable_by(take - 1, &cmp);
        }
        rest[..take].sort_unstable_by(&cmp);
        for (j, &i) in rest[..take].iter().enumerate() {
            c += (s[i as usize] - m).exp() / z;
            if c >= top_p {
                return done + j + 1;
            }
        }
        done += take;
        chunk *= 2;
    }
    ids.len()
}

impl SpecSampler {
    /// A sampler with empty buffers (they grow to the vocabulary on first use).
    pub fn new() -> SpecSampler {
        SpecSampler::default()
    }

    /// Steps 1 to 3: widen and apply the penalties into `self.l`.
    fn penalise(
        &mut self,
        logits: &[f32],
        p: &SamplingParams,
        prompt: &[u32],
        output: &[u32],
    ) -> Result<(), SampleError> {
        let v = logits.len();
        self.l.clear();
        self.l.extend(logits.iter().map(|&x| x as f64));
        if self.seen.len() < v {
            self.seen.resize(v, false);
            self.count.resize(v, 0);
        }
        let r = p.repetition_penalty;
        if r != 1.0 {
            let mut overflow = false;
            for &id in prompt.iter().chain(output) {
                let i = id as usize;
                if !self.seen[i] {
                    self.seen[i] = true;
                    let x = self.l[i];
                    self.l[i] = if x > 0.0 { x / r } else { x * r };
                    overflow |= self.l[i] == f64::INFINITY;
                }
            }
            for &id in prompt.iter().chain(output) {
                self.seen[id as usize] = false;
            }
            if overflow {
                return Err(bad("repetition_penalty", r, "one that keeps penalised logits below +inf"));
            }
        }
        let (a_p, a_f) = (p.presence_penalty, p.frequency_penalty);
        if a_f != 0.0 || a_p != 0.0 {
            for &id in output {
                self.count[id as usize] += 1;
            }
            let mut overflow = false;
            for &id in output {
                let i = id as usize;
                let c = self.count[i];
                if c != 0 {
                    self.count[i] = 0; // marks the id done and leaves the buffer zeroed
                    self.l[i] -= a_f * (c as f64) + a_p;
                    overflow |= self.l[i] == f64::INFINITY || self.l[i].is_nan();
                }
            }
            if overflow {
                return Err(bad("frequency_penalty", a_f, "one that keeps penalised logits finite"));
            }
        }
        Ok(())
    }

    /// Step 3a: disallowed and banned ids to -inf, the other biases added.
    fn constrain(&mut self, c: &Constraint) {
        if let Some(words) = c.allowed {
            for (i, x) in self.l.iter_mut().enumerate() {
                let allowed = words.get(i / 32).is_some_and(|w| (w >> (i % 32)) & 1 == 1);
                if !allowed {
                    *x = f64::NEG_INFINITY;
                }
            }
        }
        for &(id, b) in c.bias {
            let x = &mut self.l[id as usize];
            *x = if b == BAN { f64::NEG_INFINITY } else { *x + b };
        }
    }

    /// [`sample`] with this sampler's buffers and any [`Rng`].
    pub fn sample_with(
        &mut self,
        logits: &[f32],
        p: &SamplingParams,
        prompt: &[u32],
        output: &[u32],
        rng: &mut dyn Rng,
    ) -> Result<(u32, f64), SampleError> {
        self.sample_constrained(logits, p, prompt, output, &Constraint::default(), rng)
    }

    /// [`sample_constrained`] with this sampler's buffers and any [`Rng`].
    pub fn sample_constrained(
        &mut self,
        logits: &[f32],
        p: &SamplingParams,
        prompt: &[u32],
        output: &[u32],
        constraint: &Constraint,
        rng: &mut dyn Rng,
    ) -> Result<(u32, f64), SampleError> {
        check_params(p)?;
        check_input(logits, prompt, output)?;
        check_constraint(constraint, logits.len())?;
        self.penalise(logits, p, prompt, output)?;
        if !constraint.is_none() {
            self.constrain(constraint);
        }
        let v = logits.len();
        let l = &self.l;

        // Step 4: logprobs from the penalised, constrained logits, ascending-id sum.
        let big_m = max_of(l.iter().copied());
        if big_m == f64::NEG_INFINITY {
            return Err(if constraint.is_none() { SampleError::AllMasked } else { SampleError::NothingAllowed });
        }
        let mut z = 0.0f64;
        for &x in l {
            z += (x - big_m).exp();
        }
        let ln_z = z.ln();
        let logprob = |id: usize| (l[id] - big_m) - ln_z;

        // Step 5: greedy, ties to the lowest id, no draw.
        if p.temperature == 0.0 {
            let mut best = 0;
            for (i, &x) in l.iter().enumerate() {
                if x > l[best] {
                    best = i;
                }
            }
            return Ok((best as u32, logprob(best)));
        }

        // Step 6.
        let t = p.temperature;
        self.s.clear();
        self.s.extend(l.iter().map(|&x| x / t));
        let s = &self.s;
        let s_max = max_of(s.iter().copied());
        if s_max == f64::INFINITY {
            return Err(bad("temperature", t, "large enough to keep logit / T finite"));
        }
        // Every s is -inf although some logit is finite (T so small that l / T overflows):
        // step 10's m would be -inf and every e(i) NaN, leaving no id it may return.
        if s_max == f64::NEG_INFINITY {
            return Err(bad("temperature", t, "large enough to keep the largest logit / T finite"));
        }

        // Steps 7 to 9 produce the kept set K in `self.asc`, ascending.
        let top_k = if p.top_k > 0 && p.top_k < v { p.top_k } else { 0 };
        let asc = &mut self.asc;
        asc.clear();
        if top_k == 0 && p.top_p >= 1.0 && p.min_p <= 0.0 {
            asc.extend(0..v as u32);
        } else {
            let ids = &mut self.ids;
            ids.clear();
            ids.extend(0..v as u32);
            let cmp = by_score(s);
            if top_k > 0 {
                // The top-k SET is exact under the total order; its internal order comes later.
                ids.select_nth_unstable_by(top_k - 1, &cmp);
                ids.truncate(top_k);
            }
            // Candidates in ascending id order, for the sums of steps 8 and 9.
            asc.extend_from_slice(ids);
            if top_k > 0 {
                asc.sort_unstable();
            }
            if p.top_p < 1.0 {
                let m = max_of(asc.iter().map(|&i| s[i as usize]));
                let mut zp = 0.0f64;
                for &i in asc.iter() {
                    zp += (s[i as usize] - m).exp();
                }
                let kept = nucleus(ids, s, m, zp, p.top_p);
                ids.truncate(kept);
                asc.clear();
                asc.extend_from_slice(ids);
                asc.sort_unstable();
            }
            if p.min_p > 0.0 {
                let m = max_of(asc.iter().map(|&i| s[i as usize]));
                let mut zp = 0.0f64;
                for &i in asc.iter() {
                    zp += (s[i as usize] - m).exp();
                }
                // The first candidate in step-7 order holds the maximum m: its q is exp(0) / Z',
                // and exp(0) is exactly 1.
                let qmax = 1.0 / zp;
                let floor = p.min_p * qmax;
                asc.retain(|&i| (s[i as usize] - m).exp() / zp >= floor);
            }
        }

        // Step 10: one uniform, CDF walked in ascending id order.
        let m = max_of(asc.iter().map(|&i| s[i as usize]));
        let mut zk = 0.0f64;
        for &i in asc.iter() {
            zk += (s[i as usize] - m).exp();
        }
        let u = rng.uniform_f64();
        let mut c = 0.0f64;
        for &i in asc.iter() {
            c += (s[i as usize] - m).exp() / zk;
            if u < c {
                return Ok((i, logprob(i as usize)));
            }
        }
        // Rounding left c below u: the last kept id whose e(i) > 0, so never a masked (-inf)
        // id nor one whose e underflowed to 0. The first step-7 candidate has s = m and
        // e = 1, and it is always kept, so one exists (the fallbacks below are unreachable).
        let positive = asc.iter().rev().copied().find(|&i| (s[i as usize] - m).exp() > 0.0);
        let last = positive.or_else(|| asc.first().copied()).unwrap_or(0) as usize;
        Ok((last as u32, logprob(last)))
    }
}

impl SpecSampler {
    /// The `k` most likely ids of the last call's row with their step-4 logprobs (after
    /// step 3a), best first, ties by id; the same arithmetic as the sampled logprob, so
    /// the chosen token's entry has its bits. Empty before any call.
    pub fn top_logprobs(&self, k: usize) -> Vec<(u32, f64)> {
        let l = &self.l;
        let big_m = max_of(l.iter().copied());
        let mut z = 0.0f64;
        for &x in l {
            z += (x - big_m).exp();
        }
        let ln_z = z.ln();
        let v = l.len();
        let k = k.min(v);
        let mut ids: Vec<u32> = (0..v as u32).collect();
        let cmp = by_score(l);
        if k > 0 && k < v {
            ids.select_nth_unstable_by(k - 1, &cmp);
        }
        ids.truncate(k);
        ids.sort_unstable_by(&cmp);
        ids.into_iter().map(|i| (i, (l[i as usize] - big_m) - ln_z)).collect()
    }
}

impl Sampler for SpecSampler {
    fn sample(
        &mut self,
        logits: &[f32],
        params: &SamplingParams,
        prompt: &[u32],
        output: &[u32],
        rng: &mut dyn Rng,
    ) -> Result<(u32, f64), SampleError> {
        self.sample_with(logits, params, prompt, output, rng)
    }
}

/// Sample one token from `logits` as sampling.md specifies: `(id, logprob)`, where the
/// logprob is the log-softmax of the penalised logits (temperature never changes it).
/// Greedy (`temperature == 0`) takes no draw; otherwise exactly one `uniform_f64`.
pub fn sample(
    logits: &[f32],
    p: &SamplingParams,
    prompt: &[u32],
    output: &[u32],
    rng: &mut Pcg32,
) -> Result<(u32, f64), SampleError> {
    SpecSampler::new().sample_with(logits, p, prompt, output, rng)
}

/// [`sample`] with step 3a: the ids `constraint` does not allow (and those banned by a
/// `logit_bias` of -100) get logit -inf, the other biases are added, and the rest of the
/// algorithm is unchanged (still exactly one uniform per sampled token). A constraint that
/// leaves nothing is [`SampleError::NothingAllowed`].
pub fn sample_constrained(
    logits: &[f32],
    p: &SamplingParams,
    prompt: &[u32],
    output: &[u32],
    constraint: &Constraint,
    rng: &mut Pcg32,
) -> Result<(u32, f64), SampleError> {
    SpecSampler::new().sample_constrained(logits, p, prompt, output, constraint, rng)
}
