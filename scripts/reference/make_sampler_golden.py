"""Write sampling/tests/data/sampler_golden.json from the Python reference.

    python3 scripts/reference/make_sampler_golden.py [OUT]

Standard library only; rerunning reproduces the file byte for byte. Floats are written
as bit patterns in hex ("0x..."), f32 logits as 8 hex digits and f64 logprobs and
uniforms as 16, so nothing depends on decimal printing.

Large vocabularies are stored as a recipe, not as numbers: step t of a case with
"gen": {seed, vocab, bits, frac, mask_every, mask_offset} has the logits
    g = Pcg32(seed, t); for each id i: a = g.next_u32(); v = a >> (32 - bits)
    x = (v - 2^(bits - 1)) * 2^-frac;  x = -inf when mask_every > 0 and i % mask_every == mask_offset
(an integer below 2^24 times a power of two: exact in f32). Cases with "rows" use
rows[t % len(rows)]. Each case samples `steps` tokens from one generator, with
output = output_prefix + the tokens sampled so far. The generator is stream(seed,
PURPOSE_SAMPLE), or choice_stream(seed, choice) when the case has a "choice" (choice c of
a request with n > 1 choices, docs/spec/pcg32.md).

A case may carry step 3a of docs/spec/sampling.md: "allow": {mod, keep} allows, at step
t, exactly the ids i with (i + t) % mod < keep (so the allowed set moves every step, as a
grammar's does), and "bias": [[id, value], ...] is the request's logit_bias (-100 bans).

Two seeds below were constructed (by inverting mix64 and the PCG step) so that the first
uniform_f64() of stream(seed, PURPOSE_SAMPLE) is 1 - 2^-53, the largest value it can
take: with them, step 10's loop of docs/spec/sampling.md ends without returning and its
fallback decides the token.
"""

import json
import math
import os
import struct
import sys

import tl_reference as ref

STEPS = 12


def f32_hex(x):
    return "0x%08x" % struct.unpack("<I", struct.pack("<f", x))[0]


def f64_hex(x):
    return "0x%016x" % struct.unpack("<Q", struct.pack("<d", x))[0]


def as_f32(x):
    """x, checked to be exactly an f32."""
    y = struct.unpack("<f", struct.pack("<f", x))[0]
    assert y == x or (math.isinf(x) and y == x), x
    return y


def gen_row(g, t):
    rng = ref.Pcg32(g["seed"], t)
    bits, frac = g["bits"], g["frac"]
    row = []
    for i in range(g["vocab"]):
        a = rng.next_u32()
        x = (float((a >> (32 - bits)) - (1 << (bits - 1)))) * (2.0 ** -frac)
        if g["mask_every"] > 0 and i % g["mask_every"] == g["mask_offset"]:
            x = -math.inf
        row.append(as_f32(x))
    return row


def params(**kw):
    p = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
             presence_penalty=0.0, frequency_penalty=0.0)
    p.update(kw)
    return p


def gen(seed, vocab, bits=23, frac=19, mask_every=0, mask_offset=0):
    return dict(seed=seed, vocab=vocab, bits=bits, frac=frac, mask_every=mask_every, mask_offset=mask_offset)


NEG_INF = -math.inf
# Seeds whose first uniform of stream(seed, PURPOSE_SAMPLE) is 1 - 2^-53 (checked in main()).
SEED_U_MAX_A = 0xB4127802403D9BBF
SEED_U_MAX_B = 0xAAD17B5255E90A2E
# name, logits (("rows", [...]) or ("gen", recipe)), params, prompt, output prefix, seed
CASES = [
    ("hand_example", ("rows", [[1.0, 3.0, 2.0, 3.0, -1.0]]), params(top_k=3, top_p=0.8), [], [], 0),
    ("greedy_v1000", ("gen", gen(11, 1000)), params(temperature=0.0), [], [], 1),
    ("greedy_ties_with_repetition", ("gen", gen(12, 64, bits=3, frac=0)),
     params(temperature=0.0, repetition_penalty=1.5), [5, 9, 5], [1], 2),
    ("masked_logits_v5", ("rows", [[NEG_INF, 0.5, NEG_INF, -0.25, 0.5]]), params(temperature=0.7), [], [], 3),
    ("masked_every_third_v50", ("gen", gen(13, 50, mask_every=3, mask_offset=1)), params(temperature=0.7), [], [], 4),
    ("top_k_alone", ("gen", gen(14, 500)), params(top_k=10), [], [], 5),
    ("top_k_ties_on_the_boundary", ("gen", gen(15, 40, bits=2, frac=0)), params(top_k=5, temperature=1.5), [], [], 6),
    ("top_k_above_vocab_with_masks", ("rows", [[0.0, NEG_INF, -0.0, 1.0, NEG_INF]]), params(top_k=9), [], [], 7),
    ("top_p_alone", ("gen", gen(16, 2000)), params(top_p=0.9, temperature=0.8), [], [], 8),
    ("top_p_tiny_high_temperature", ("gen", gen(17, 300)), params(top_p=0.01, temperature=5.0), [], [], 9),
    ("min_p_alone", ("gen", gen(18, 300)), params(min_p=0.05, temperature=1.3), [], [], 10),
    ("filters_combined_with_ties", ("gen", gen(19, 5000, bits=6, frac=2)),
     params(top_k=50, top_p=0.95, min_p=0.02, temperature=0.9), [], [], 11),
    ("top_k_300_then_top_p_with_ties", ("gen", gen(28, 3000, bits=7, frac=3)),
     params(top_k=300, top_p=0.97, temperature=1.2), [], [], 17),
    ("top_k_and_min_p", ("gen", gen(29, 1000, bits=9, frac=6)), params(top_k=100, min_p=0.2), [], [], 18),
    ("repetition_penalty_prompt_and_output", ("gen", gen(20, 40, bits=8, frac=5)),
     params(repetition_penalty=1.3), [0, 1, 2, 3, 3, 17, 39], [4, 4, 20], 12),
    ("presence_and_frequency", ("gen", gen(21, 40, bits=8, frac=5)),
     params(presence_penalty=0.5, frequency_penalty=0.3), [5, 6, 7, 8], [9, 9, 9, 10], 13),
    ("negative_presence_penalty", ("gen", gen(22, 30, bits=8, frac=5)),
     params(presence_penalty=-0.4, frequency_penalty=0.1, temperature=0.6), [1], [2, 3], 14),
    ("all_penalties_and_filters", ("gen", gen(23, 200, bits=10, frac=7)),
     params(repetition_penalty=1.2, presence_penalty=0.4, frequency_penalty=0.2, top_k=20, top_p=0.9, min_p=0.05),
     [7, 8, 9, 100], [7, 150, 150], 15),
    ("greedy_all_penalties", ("gen", gen(24, 100, bits=5, frac=2)),
     params(temperature=0.0, repetition_penalty=2.0, presence_penalty=0.3, frequency_penalty=0.6), [3], [], 16),
    ("v49152_no_filters", ("gen", gen(25, 49152)), params(), [], [], 42),
    ("v49152_everything", ("gen", gen(26, 49152, bits=12, frac=8, mask_every=97, mask_offset=5)),
     params(temperature=0.7, top_k=40, top_p=0.95, min_p=0.01, repetition_penalty=1.1, presence_penalty=0.2,
            frequency_penalty=0.1), [1, 2, 3, 500, 49151], [42], 2 ** 64 - 1),
    ("v49152_top_p_only", ("gen", gen(27, 49152, bits=16, frac=12)), params(top_p=0.8, temperature=1.1), [], [],
     0x123456789ABCDEF0),
    # Step 10's fallback: seven equal logits sum to c = 1 - 2^-52 < u = 1 - 2^-53, so the
    # loop ends; the last kept id (7) is masked, the fallback returns 6.
    ("fallback_skips_masked_tail", ("rows", [[0.0] * 7 + [NEG_INF]]), params(), [], [], SEED_U_MAX_A),
    # [0, 1, 2] sums to c = 1 - 2^-53 = u; id 3's e = exp(-802) underflows to 0: returns 2.
    ("fallback_skips_underflowed_tail", ("rows", [[0.0, 1.0, 2.0, -800.0]]), params(), [], [], SEED_U_MAX_B),
    # Choices c of one request (n > 1): choice_stream(seed, c).
    ("hand_example_choice_1", ("rows", [[1.0, 3.0, 2.0, 3.0, -1.0]]), params(top_k=3, top_p=0.8), [], [], 0, 1),
    ("hand_example_choice_2", ("rows", [[1.0, 3.0, 2.0, 3.0, -1.0]]), params(top_k=3, top_p=0.8), [], [], 0, 2),
    ("choice_0_equals_stream", ("gen", gen(30, 300)), params(temperature=0.9, top_p=0.95), [], [], 77, 0),
    ("choice_5_filters_and_penalties", ("gen", gen(30, 300)),
     params(temperature=0.9, top_p=0.95, min_p=0.01, presence_penalty=0.3), [1, 2], [3], 77, 5),
    ("choice_max_seed_max", ("gen", gen(31, 1000)), params(top_k=20), [], [], 2 ** 64 - 1, 2 ** 32 - 1),
    # Step 3a: a moving allowed set (a grammar's mask), logit_bias, and both with filters.
    ("constraint_greedy", ("gen", gen(32, 300)), params(temperature=0.0), [], [], 19, None,
     dict(mod=7, keep=2)),
    ("constraint_sampled", ("gen", gen(33, 500)), params(temperature=0.8), [], [], 20, None,
     dict(mod=5, keep=1)),
    ("constraint_single_allowed_id", ("gen", gen(34, 64)), params(temperature=1.0, top_p=0.9), [], [], 21, None,
     dict(mod=64, keep=1)),
    ("logit_bias_add_and_ban", ("gen", gen(35, 40, bits=8, frac=5)), params(temperature=0.9), [], [], 22, None,
     None, [[0, 100.0], [1, -100.0], [2, 2.5], [3, -0.375], [39, 7.0]]),
    ("logit_bias_greedy_ban_the_best", ("rows", [[1.0, 3.0, 2.0, 3.0, -1.0]]), params(temperature=0.0), [], [], 23,
     None, None, [[1, -100.0], [3, -100.0]]),
    ("constraint_bias_penalties_filters", ("gen", gen(36, 1000, bits=10, frac=7)),
     params(temperature=0.7, top_k=30, top_p=0.9, min_p=0.02, repetition_penalty=1.2, presence_penalty=0.3,
            frequency_penalty=0.1), [5, 6, 7], [8], 24, None, dict(mod=3, keep=2), [[5, 1.5], [6, -100.0], [11, -2.0]]),
    ("constraint_v49152_masked_rows", ("gen", gen(37, 49152, bits=12, frac=8, mask_every=13, mask_offset=2)),
     params(temperature=1.1, top_p=0.95), [], [], 25, 3, dict(mod=11, keep=3), [[100, 4.0]]),
]


def allowed_at(allow, v, t):
    if allow is None:
        return None
    return {i for i in range(v) if (i + t) % allow["mod"] < allow["keep"]}


def run_case(name, logits, p, prompt, prefix, seed, choice=None, allow=None, bias=None):
    kind, val = logits
    rng = ref.stream(seed, ref.PURPOSE_SAMPLE) if choice is None else ref.choice_stream(seed, choice)
    output = list(prefix)
    tokens = []
    for t in range(STEPS):
        if kind == "rows":
            row = [as_f32(x) for x in val[t % len(val)]]
        else:
            row = gen_row(val, t)
        tid, lp = ref.sample(row, p, prompt, output, rng, allowed_at(allow, len(row), t),
                             {i: b for i, b in bias} if bias else None)
        tokens.append({"id": tid, "logprob": f64_hex(lp), "logprob_repr": repr(lp)})
        output.append(tid)
    case = {"name": name, "params": p, "prompt": prompt, "output_prefix": prefix, "seed": seed, "tokens": tokens}
    if choice is not None:
        case["choice"] = choice
    if allow is not None:
        case["allow"] = allow
    if bias is not None:
        case["bias"] = bias
    if kind == "rows":
        case["rows"] = [[f32_hex(as_f32(x)) for x in r] for r in val]
    else:
        case["gen"] = val
    return case


def generator_vectors():
    g = ref.Pcg32(42, 54)
    demo = ["0x%08x" % g.next_u32() for _ in range(6)]
    g = ref.Pcg32(42, 54)
    uniforms = [f64_hex(g.uniform_f64()) for _ in range(4)]
    streams = []
    for seed, purpose in [(0, 4), (1, 4), (42, 4), (0, 0), (7, 1), (2 ** 64 - 1, 4), (0x0123456789ABCDEF, 99)]:
        s = ref.stream(seed, purpose)
        outs = ["0x%08x" % s.next_u32() for _ in range(4)]
        us = [f64_hex(s.uniform_f64()) for _ in range(3)]
        streams.append({"seed": seed, "purpose": purpose, "child_seed": "0x%016x" % ref.child_seed(seed, purpose),
                        "next_u32": outs, "then_uniform_f64": us})
    choices = []
    for seed in [0, 1, 42, 2 ** 64 - 1]:
        for choice in [0, 1, 2, 3, 7, 2 ** 31 - 1, 2 ** 32 - 1]:
            s = ref.choice_stream(seed, choice)
            outs = ["0x%08x" % s.next_u32() for _ in range(4)]
            us = [f64_hex(s.uniform_f64()) for _ in range(3)]
            choices.append({"seed": seed, "choice": choice, "next_u32": outs, "then_uniform_f64": us})
    return {"demo_42_54_next_u32": demo, "demo_42_54_uniform_f64": uniforms, "streams": streams,
            "choices": choices}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "..", "sampling", "tests", "data", "sampler_golden.json")
    out = sys.argv[1] if len(sys.argv) > 1 else default
    for seed in (SEED_U_MAX_A, SEED_U_MAX_B):
        assert ref.stream(seed, ref.PURPOSE_SAMPLE).uniform_f64() == 1.0 - 2.0 ** -53, hex(seed)
    doc = {
        "about": "Golden data from scripts/reference/make_sampler_golden.py (Python stdlib reference of "
                 "spec/pcg32.md and spec/sampling.md). Floats are hex bit patterns.",
        "steps": STEPS,
        "pcg32": generator_vectors(),
        "cases": [run_case(*c) for c in CASES],
    }
    with open(out, "w", newline="\n") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
