"""tok/s per format, tl beside llama.cpp, as a PNG: prefill and decode side by side.

    python scripts/plot_bench.py RUN OUT.png [TITLE]

RUN is what scripts/bench_compare.sh wrote: its raw `compare-<time>.jsonl` (medians over
rounds are taken here) or a markdown table with the columns `tl prefill`, `llama.cpp
prefill`, `tl decode` and `llama.cpp decode` (its `compare-<time>.md`, or a table copied
out of docs/benchmarks.md; the first column names the row). Run by
`scripts/bench_compare.sh --plot`, in the git-ignored venv it makes (matplotlib).
"""

import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")  # no display: write the file only
import matplotlib.pyplot as plt  # noqa: E402


def from_jsonl(path):
    """{row: {(tool, kind): median tok/s over rounds, ("ratio", kind): median over rounds
    of each round's tl / llama.cpp}} from the raw JSON lines, as bench_compare's table."""
    runs = {}  # (config, threads) -> {(tool, kind): {round: tok/s}}
    threads = set()
    for line in open(path):
        j = json.loads(line)
        if j.get("error") or j.get("tool") == "probe":
            continue
        if j.get("tool") == "llama.cpp":
            t = j.get("n_threads")
            got = {("llama.cpp", j["kind"]): j["median_ts"]}
        elif "prefill_tok_s" in j and j.get("batch") == 1:
            t = j.get("threads")
            tool = "tl" if j.get("activations", "exact") == "exact" else "tl q8"
            got = {(tool, "prefill"): j["prefill_tok_s"], (tool, "decode"): j["decode_tok_s"]}
        else:
            continue
        threads.add(t)
        for k, v in got.items():
            runs.setdefault((j["config"], t), {}).setdefault(k, {})[j.get("round")] = v
    rows = {}
    for (config, t), v in runs.items():
        name = config.upper() if len(threads) == 1 else f"{config.upper()} ({t} thr)"
        row = {k: statistics.median(by_round.values()) for k, by_round in v.items()}
        for kind in ("prefill", "decode"):
            tl, ll = v.get(("tl", kind), {}), v.get(("llama.cpp", kind), {})
            ratios = [tl[r] / ll[r] for r in tl if ll.get(r)]
            if ratios:
                row[("ratio", kind)] = statistics.median(ratios)
        rows[name] = row
    return rows


def from_markdown(path):
    """{row: {(tool, kind): tok/s, ("ratio", kind): the table's tl/llama}} from the first
    table with the four rate columns (the ratio: the first `tl/llama` column after
    `llama.cpp <kind>`)."""
    want = {("tl", "prefill"): "tl prefill", ("llama.cpp", "prefill"): "llama.cpp prefill",
            ("tl", "decode"): "tl decode", ("llama.cpp", "decode"): "llama.cpp decode"}
    rows, cols = {}, None
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.lstrip().startswith("|"):
            if rows:
                break  # the first such table only
            cols = None
            continue
        if cols is None:
            if all(name in cells for name in want.values()):
                cols = {k: cells.index(name) for k, name in want.items()}
                for kind in ("prefill", "decode"):
                    after = cells.index(f"llama.cpp {kind}")
                    r = next((i for i in range(after + 1, len(cells)) if "tl/llama" in cells[i]), None)
                    if r is not None:
                        cols[("ratio", kind)] = r
            continue
        if set(cells[0]) <= set("-: "):
            continue  # the separator line
        try:
            rows[cells[0].split(":")[0]] = {k: float(cells[i].strip("*")) for k, i in cols.items()}
        except ValueError:
            continue  # a row without numbers ("—": a failed run)
    return rows


def plot(rows, out, title):
    names = list(rows)
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.4 * len(names) + 4), 4.2))
    # A third bar per row when the run also measured tl's --activations q8.
    q8 = any(("tl q8", k) in r for r in rows.values() for k in ("prefill", "decode"))
    width = 0.27 if q8 else 0.38
    for ax, kind in zip(axes, ("prefill", "decode")):
        xs = range(len(names))
        tl = [rows[n].get(("tl", kind), 0) for n in names]
        ll = [rows[n].get(("llama.cpp", kind), 0) for n in names]
        ax.bar([x - width / 2 - (width / 2 if q8 else 0) for x in xs], tl, width, label="tl", color="#1f77b4")
        if q8:
            tq = [rows[n].get(("tl q8", kind), 0) for n in names]
            ax.bar([x for x in xs], tq, width, label="tl --activations q8", color="#2ca02c")
            for x, n, a in zip(xs, names, tq):
                b = rows[n].get(("llama.cpp", kind), 0)
                if a and b:
                    ax.annotate(f"{a / b:.2f}x", (x, a), ha="center", va="bottom", fontsize=7, color="#2ca02c")
        ax.bar([x + width / 2 + (width / 2 if q8 else 0) for x in xs], ll, width, label="llama.cpp", color="#ff7f0e")
        for x, n, a, b in zip(xs, names, tl, ll):
            # The ratio above the pair, tl / llama.cpp: the run's own (the median of each
            # round's back-to-back ratio) where it has one.
            r = rows[n].get(("ratio", kind)) or (a / b if a and b else None)
            if r:
                # With a q8 bar beside it, the exact ratio sits over the exact bar.
                at = (x - width, a) if q8 else (x, max(a, b))
                ax.annotate(f"{r:.2f}x", at, ha="center", va="bottom", fontsize=7 if q8 else 8)
        ax.set_xticks(list(xs))
        ax.set_xticklabels(names, rotation=20 if len(names) > 5 else 0)
        ax.set_ylabel("tok/s")
        ax.set_title(kind)
        ax.margins(y=0.15)
    axes[0].legend()
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    run, out = sys.argv[1], sys.argv[2]
    title = sys.argv[3] if len(sys.argv) > 3 else ""
    rows = from_jsonl(run) if run.endswith(".jsonl") else from_markdown(run)
    if not rows:
        sys.exit(f"plot_bench: error: no tl / llama.cpp rates found in {run}")
    plot(rows, out, title)
    print(f"plot: {out}")


if __name__ == "__main__":
    main()
