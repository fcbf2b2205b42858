//! Output text of one sequence: UTF-8 assembled across tokens, stop strings held back
//! until they cannot be a stop; and the top logprobs of sampling.md's step 4.

use tl_core::SamplingParams;

/// Turns token bytes into releasable text.
#[derive(Debug, Default)]
pub(crate) struct TextOut {
    /// Bytes of an unfinished UTF-8 character, (<= 3,).
    pending: Vec<u8>,
    /// Complete text not yet released: a suffix some stop string may begin with.
    held: String,
    /// A stop string appeared; nothing more is released.
    pub(crate) stopped: bool,
}

impl TextOut {
    /// Add one token's bytes; returns the text released now and whether a stop string
    /// appeared (the text before it is released, the stop string and the rest are not).
    pub(crate) fn push(&mut self, bytes: &[u8], stops: &[String]) -> (String, bool) {
        if self.stopped {
            return (String::new(), true);
        }
        self.pending.extend_from_slice(bytes);
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            // An incomplete character at the end: wait for the tokens that finish it.
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            // Bytes that can never be valid: release them lossily now.
            Err(_) => self.pending.len(),
        };
        let done: Vec<u8> = self.pending.drain(..valid).collect();
        self.held.push_str(&String::from_utf8_lossy(&done));
        if let Some(cut) = stops.iter().filter(|s| !s.is_empty()).filter_map(|s| self.held.find(s.as_str())).min() {
            self.stopped = true;
            let out = self.held[..cut].to_string();
            self.held.clear();
            self.pending.clear();
            return (out, true);
        }
        // Keep the longest suffix that is a proper prefix of some stop string.
        let len = self.held.len();
        let keep = (1..=len)
            .rev()
            .filter(|&n| self.held.is_char_boundary(len - n))
            .find(|&n| {
                let tail = &self.held[len - n..];
                stops.iter().any(|s| s.len() > n && s.starts_with(tail))
            })
            .unwrap_or(0);
        let out: String = self.held.drain(..len - keep).collect();
        (out, false)
    }

    /// Everything still held (the output ended without a stop string), lossily.
    pub(crate) fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        let mut out = std::mem::take(&mut self.held);
        out.push_str(&String::from_utf8_lossy(&self.pending));
        self.pending.clear();
        out
    }
}

/// The `k` most likely ids with their logprobs under sampling.md's steps 1 to 4 (the
/// penalised logits), best first, ties by id; computed exactly as the sampler computes a
/// logprob, so the chosen token's entry has the same bits as the sampler's.
pub fn top_logprobs(logits: &[f32], p: &SamplingParams, prompt: &[u32], output: &[u32], k: usize) -> Vec<(u32, f64)> {
    // Penalised logits, (V,).
    let mut l: Vec<f64> = logits.iter().map(|&x| x as f64).collect();
    let v = l.len();
    let valid = |id: &&u32| (**id as usize) < v;
    let r = p.repetition_penalty;
    if r != 1.0 {
        let mut seen = vec![false; v];
        for &id in prompt.iter().chain(output).filter(valid) {
            let i = id as usize;
            if !seen[i] {
                seen[i] = true;
                let x = l[i];
                l[i] = if x > 0.0 { x / r } else { x * r };
            }
        }
    }
    let (a_p, a_f) = (p.presence_penalty, p.frequency_penalty);
    if a_f != 0.0 || a_p != 0.0 {
        let mut count = vec![0u32; v];
        for &id in output.iter().filter(valid) {
            count[id as usize] += 1;
        }
        for &id in output.iter().filter(valid) {
            let i = id as usize;
            let c = count[i];
            if c != 0 {
                count[i] = 0;
                l[i] -= a_f * (c as f64) + a_p;
            }
        }
    }
    let mut m = f64::NEG_INFINITY;
    for &x in &l {
        if x > m {
            m = x;
        }
    }
    let mut z = 0.0f64;
    for &x in &l {
        z += (x - m).exp();
    }
    let ln_z = z.ln();
    let mut ids: Vec<u32> = (0..v as u32).collect();
    let k = k.min(v);
    let by = |a: &u32, b: &u32| {
        let (x, y) = (l[*a as usize], l[*b as usize]);
        y.partial_cmp(&x).unwrap_or(std::cmp::Ordering::Equal).then(a.cmp(b))
    };
    if k > 0 && k < v {
        ids.select_nth_unstable_by(k - 1, by);
    }
    ids.truncate(k);
    ids.sort_unstable_by(by);
    ids.into_iter().map(|i| (i, (l[i as usize] - m) - ln_z)).collect()
}
