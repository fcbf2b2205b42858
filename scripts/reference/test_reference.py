"""Checks of the Python reference against docs/spec/pcg32.md and docs/spec/sampling.md.

    python3 scripts/reference/test_reference.py

Standard library only (unittest). Also checks that make_sampler_golden.py reproduces
sampling/tests/data/sampler_golden.json byte for byte.
"""

import filecmp
import math
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import tl_reference as ref  # noqa: E402

U_MAX = 1.0 - 2.0 ** -53
SEED_U_MAX_A = 0xB4127802403D9BBF
SEED_U_MAX_B = 0xAAD17B5255E90A2E
NEUTRAL = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
               presence_penalty=0.0, frequency_penalty=0.0)


def params(**kw):
    p = dict(NEUTRAL)
    p.update(kw)
    return p


class FixedUniform:
    """A generator whose every uniform is u."""

    def __init__(self, u):
        self.u = u

    def uniform_f64(self):
        return self.u


def logprob(l, i):
    m = max(l)
    z = 0.0
    for x in l:
        z += math.exp(x - m)
    return (l[i] - m) - math.log(z)


class Pcg32Vectors(unittest.TestCase):
    def test_demo_and_streams(self):
        g = ref.Pcg32(42, 54)
        self.assertEqual([g.next_u32() for _ in range(6)],
                         [0xa15c02b7, 0x7b47f409, 0xba1d3330, 0x83d2f293, 0xbfa4784b, 0xcbed606e])
        self.assertEqual(ref.child_seed(0, 4), 0xF88BB8A8724C81EC)
        self.assertEqual(ref.stream(0, ref.PURPOSE_SAMPLE).uniform_f64(), 0.8020949661137535)

    def test_choice_streams(self):
        first = [ref.choice_stream(0, c).uniform_f64() for c in range(3)]
        self.assertEqual(first, [0.8020949661137535, 0.9068004087186612, 0.581938172211182])
        for seed in [0, 1, 42, 2 ** 64 - 1]:
            a, b = ref.choice_stream(seed, 0), ref.stream(seed, ref.PURPOSE_SAMPLE)
            self.assertEqual((a.state, a.inc), (b.state, b.inc))
            for c in [1, 2, 2 ** 32 - 1]:
                g = ref.choice_stream(seed, c)
                want = ref.Pcg32(ref.child_seed(seed, 4), 4 + (c << 32))
                self.assertEqual((g.state, g.inc), (want.state, want.inc))

    def test_engineered_seeds(self):
        for seed in (SEED_U_MAX_A, SEED_U_MAX_B):
            self.assertEqual(ref.stream(seed, ref.PURPOSE_SAMPLE).uniform_f64(), U_MAX)


class Sampling(unittest.TestCase):
    def test_worked_example(self):
        tid, lp = ref.sample([1.0, 3.0, 2.0, 3.0, -1.0], params(top_k=3, top_p=0.8), [], [],
                             ref.stream(0, ref.PURPOSE_SAMPLE))
        self.assertEqual((tid, lp), (3, -0.9248660042217248))

    def test_fallback_never_returns_a_masked_token(self):
        # Seven equal logits end step 10's loop at c = 1 - 2^-52 < u: the last kept id (7)
        # is masked; the rule returns the last id with e(i) > 0.
        row = [0.0] * 7 + [-math.inf]
        want = (6, logprob([0.0] * 7 + [-math.inf], 6))
        self.assertEqual(ref.sample(row, params(), [], [], FixedUniform(U_MAX)), want)
        self.assertEqual(ref.sample(row, params(), [], [], ref.stream(SEED_U_MAX_A, 4)), want)
        row = [0.0] * 7 + [-math.inf] * 3
        for k in [0, 8, 9, 10, 50]:
            self.assertEqual(ref.sample(row, params(top_k=k), [], [], FixedUniform(U_MAX))[0], 6)

    def test_fallback_skips_an_underflowed_tail(self):
        row = [0.0, 1.0, 2.0, -800.0]
        want = (2, logprob(row, 2))
        self.assertEqual(ref.sample(row, params(), [], [], FixedUniform(U_MAX)), want)
        self.assertEqual(ref.sample(row, params(), [], [], ref.stream(SEED_U_MAX_B, 4)), want)

    def test_tiny_temperature_is_refused(self):
        with self.assertRaises(ref.BadInput):
            ref.sample([-1.0, -2.0], params(temperature=1e-310), [], [], FixedUniform(0.5))


class Golden(unittest.TestCase):
    def test_regenerating_reproduces_the_file(self):
        golden = os.path.join(HERE, "..", "..", "sampling", "tests", "data", "sampler_golden.json")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "golden.json")
            subprocess.run([sys.executable, os.path.join(HERE, "make_sampler_golden.py"), out], check=True)
            self.assertTrue(filecmp.cmp(out, golden, shallow=False), "sampler_golden.json is stale")


if __name__ == "__main__":
    unittest.main()
