"""An independent reference of docs/spec/pcg32.md and docs/spec/sampling.md in plain Python 3.

Standard library only: math.exp, math.log and plain loops, written from the spec text,
not from the Rust code. Every sum is a left-to-right loop in the order the spec names.
"""

import math

MASK64 = (1 << 64) - 1
MULT = 6364136223846793005
GOLDEN = 0x9E3779B97F4A7C15
PURPOSE_SAMPLE = 4


class Pcg32:
    """O'Neill's PCG32, pcg32_random_r (XSH-RR), as in pcg-c-basic."""

    def __init__(self, seed, seq):
        self.state = 0
        self.inc = ((seq << 1) | 1) & MASK64
        self.next_u32()
        self.state = (self.state + seed) & MASK64
        self.next_u32()

    def next_u32(self):
        old = self.state
        self.state = (old * MULT + self.inc) & MASK64
        xorshifted = (((old >> 18) ^ old) >> 27) & 0xFFFFFFFF
        rot = old >> 59
        return ((xorshifted >> rot) | (xorshifted << ((-rot) & 31))) & 0xFFFFFFFF

    def uniform_f64(self):
        a = self.next_u32()
        b = self.next_u32()
        return (float(a >> 5) * 67108864.0 + float(b >> 6)) * (2.0 ** -53)


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def child_seed(seed, purpose):
    return mix64((seed + purpose * GOLDEN) & MASK64)


def stream(seed, purpose):
    return Pcg32(child_seed(seed, purpose), purpose)


def choice_stream(seed, choice):
    """The sampling generator of choice `choice` (0-based, below 2^32) of a request with
    `n > 1` choices: sequence id PURPOSE_SAMPLE + (choice << 32); choice 0 is
    stream(seed, PURPOSE_SAMPLE)."""
    assert 0 <= choice < (1 << 32), choice
    return Pcg32(child_seed(seed, PURPOSE_SAMPLE), (PURPOSE_SAMPLE + (choice << 32)) & MASK64)


class BadInput(Exception):
    """sampling.md's bad input."""


def check(logits, p, prompt, output):
    v = len(logits)
    if v == 0:
        raise BadInput("V = 0")
    for i, x in enumerate(logits):
        if math.isnan(x) or x == math.inf:
            raise BadInput("logit %d is %r" % (i, x))
    if all(x == -math.inf for x in logits):
        raise BadInput("every logit is -inf")
    for i in list(prompt) + list(output):
        if i >= v:
            raise BadInput("history id %d >= V" % i)
    t = p["temperature"]
    if not (math.isfinite(t) and t >= 0.0):
        raise BadInput("temperature")
    if not (0.0 < p["top_p"] <= 1.0):
        raise BadInput("top_p")
    if not (0.0 <= p["min_p"] <= 1.0):
        raise BadInput("min_p")
    r = p["repetition_penalty"]
    if not (math.isfinite(r) and r > 0.0):
        raise BadInput("repetition_penalty")


def sample(logits, p, prompt, output, rng, allowed=None, bias=None):
    """Return (id, logprob) for one row of logits (Python floats holding f32 values).

    Step 3a: `allowed` is None (no constraint) or the set of ids the constraint allows at
    this position; `bias` is None or a dict id -> logit_bias (-100 bans the id)."""
    check(logits, p, prompt, output)
    for i, b in (bias or {}).items():
        if i >= len(logits) or not (-100.0 <= b <= 100.0):
            raise BadInput("logit_bias %r: %r" % (i, b))
    v = len(logits)
    # 1. Widen (the values are already exact doubles of f32s).
    l = [float(x) for x in logits]
    # 2. Repetition penalty over the distinct ids of prompt and output.
    r = p["repetition_penalty"]
    if r != 1.0:
        for i in set(prompt) | set(output):
            if l[i] > 0.0:
                l[i] = l[i] / r
            else:
                l[i] = l[i] * r
    # 3. Presence and frequency over the output only.
    a_p, a_f = p["presence_penalty"], p["frequency_penalty"]
    if a_f != 0.0 or a_p != 0.0:
        counts = {}
        for i in output:
            counts[i] = counts.get(i, 0) + 1
        for i, c in counts.items():
            l[i] = l[i] - (a_f * float(c) + a_p)
    # Not in the spec's list, refused as the Rust sampler does: a penalty that pushes a
    # logit to +inf or NaN, or leaves every logit -inf.
    for x in l:
        if math.isnan(x) or x == math.inf:
            raise BadInput("a penalised logit is %r" % x)
    if all(x == -math.inf for x in l):
        raise BadInput("every penalised logit is -inf")
    # 3a. The constraint: disallowed ids and banned ones to -inf, other biases added.
    if allowed is not None:
        for i in range(v):
            if i not in allowed:
                l[i] = -math.inf
    for i, b in (bias or {}).items():
        if b == -100.0:
            l[i] = -math.inf
        else:
            l[i] = l[i] + b
    if all(x == -math.inf for x in l):
        raise BadInput("the constraint allows no token with a finite logit")
    # 4. Logprobs.
    big_m = -math.inf
    for x in l:
        if x > big_m:
            big_m = x
    z = 0.0
    for i in range(v):
        z += math.exp(l[i] - big_m)
    ln_z = math.log(z)

    def logprob(i):
        return (l[i] - big_m) - ln_z

    # 5. Greedy: ties to the lowest id, no draw.
    t = p["temperature"]
    if t == 0.0:
        best = 0
        for i in range(v):
            if l[i] > l[best]:
                best = i
        return best, logprob(best)
    # 6. Temperature.
    s = [x / t for x in l]
    s_max = max(s)
    if s_max == math.inf or s_max == -math.inf:
        # Not in the spec's list: l / T overflowed, and step 10 would divide NaNs.
        raise BadInput("temperature too small: the largest logit / T is not finite")
    # 7. Candidates: (s descending, id ascending); top_k.
    cand = sorted(range(v), key=lambda i: (-s[i], i))
    if p["top_k"] > 0:
        cand = cand[: min(p["top_k"], v)]
    # 8. Nucleus, inclusive of the crossing candidate.
    if p["top_p"] < 1.0:
        m = s[cand[0]]
        zp = 0.0
        for i in sorted(cand):
            zp += math.exp(s[i] - m)
        c = 0.0
        kept = []
        for i in cand:
            c += math.exp(s[i] - m) / zp
            kept.append(i)
            if c >= p["top_p"]:
                break
        cand = kept
    # 9. Min-p.
    if p["min_p"] > 0.0:
        m = s[cand[0]]
        zp = 0.0
        for i in sorted(cand):
            zp += math.exp(s[i] - m)
        qmax = math.exp(s[cand[0]] - m) / zp
        cand = [i for i in cand if math.exp(s[i] - m) / zp >= p["min_p"] * qmax]
    # 10. Draw over the kept ids in ascending order.
    k = sorted(cand)
    m = -math.inf
    for i in k:
        if s[i] > m:
            m = s[i]
    e = {i: math.exp(s[i] - m) for i in k}
    z = 0.0
    for i in k:
        z += e[i]
    u = rng.uniform_f64()
    c = 0.0
    for i in k:
        c += e[i] / z
        if u < c:
            return i, logprob(i)
    # The loop ended (rounding left c below u): the last kept id whose e(i) > 0, never a
    # masked (-inf) id or one whose e underflowed to 0.
    for i in reversed(k):
        if e[i] > 0.0:
            return i, logprob(i)
    raise AssertionError("unreachable: the largest kept s has e = 1")
