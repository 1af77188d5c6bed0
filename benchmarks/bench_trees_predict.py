"""Pricing on a learned profile: the boosted trees' sum as one cumulative sum, against the loop
over trees it replaced.

A calibrated profile prices each kernel with its roofline terms plus a boosted-tree correction
(`archsearch.latency.trees.Ensemble.predict`). The trees' outputs are added in scikit-learn's
order; a loop over the trees did it with one numpy call per tree, a cumulative sum along the
trees does it with one call (bit-identical: both add in sequence). A sweep prices one candidate
at a time, where those calls are the cost. Timed side by side, interleaved, on the shipped
`local` profile: TTFT and one decode step of each held-out architecture of the accuracy
benchmark, each priced alone (median over rounds of the seconds per candidate).

    python benchmarks/bench_trees_predict.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from archsearch.latency import columns, decode_s, load_device, ttft_s
from archsearch.latency.trees import Ensemble

sys.path.insert(0, str(Path(__file__).parent))
from bench_latency_accuracy import cases

CUMULATIVE = Ensemble.predict


def looped(self: Ensemble, X: np.ndarray) -> np.ndarray:
    """The form replaced: the same tree walk, then the trees added one numpy call at a time."""
    node = self.leaves(X)
    out = np.full(node.shape[0], self.init)
    for t in range(node.shape[1]):
        out = out + self.rate * self.value[t, node[:, t]]
    return out


def price_each(archs, device) -> tuple[float, list[float]]:
    """(seconds per candidate, the predictions) pricing each candidate alone."""
    got, t0 = [], time.perf_counter()
    for arch, (prompt, context, batch) in archs:
        c = columns(arch)
        got += [ttft_s(c, device, prompt, "fp32", batch)[0]]
        got += [decode_s(c, device, context, "fp32", batch)[0]]
    return (time.perf_counter() - t0) / len(archs), got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "trees_predict.json"))
    args = ap.parse_args()
    device = load_device("local")
    archs = [(arch, setting) for _, arch, setting in cases(3)]
    forms = {"loop": looped, "cumulative": CUMULATIVE}
    seconds: dict[str, list[float]] = {name: [] for name in forms}
    predictions = {}
    for _ in range(args.rounds):  # interleaved: a slow moment of the machine touches both
        for name, form in forms.items():
            Ensemble.predict = form
            s, predictions[name] = price_each(archs, device)
            seconds[name].append(s)
    Ensemble.predict = CUMULATIVE
    same = predictions["loop"] == predictions["cumulative"]
    median = {name: statistics.median(s) for name, s in seconds.items()}
    result = {
        "candidates": len(archs),
        "rounds": args.rounds,
        "bit_identical": same,
        "ms_per_candidate": {name: 1e3 * m for name, m in median.items()},
        "ratio": median["cumulative"] / median["loop"],
    }
    for name, ms in result["ms_per_candidate"].items():
        print(f"{name}: {ms:.2f} ms per candidate (TTFT and a decode step, median)")
    print(f"ratio {result['ratio']:.2f}; predictions bit-identical: {same}")
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
