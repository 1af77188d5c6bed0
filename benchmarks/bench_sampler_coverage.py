"""The calibration's stratified draws: does the random half of a kernel's shapes time every value
of every knob? Each value's count weighed by its knob's number of values (`least_taken` now),
against the plain sum of counts it replaced.

No timing: a kernel's sampler (`calibrate.sample.Sampler`, the full plan's budget, a constant
clock) takes its random passes at each of `--seeds` seeds, with each form of `least_taken`; per
kernel the share of seeds whose random half leaves a knob's value out, or draws one more than
twice its fair share (+1), and the largest count over its fair share.

    python benchmarks/bench_sampler_coverage.py [--seeds 300] [--kernels moe ffn ...]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

from archsearch.latency.calibrate import sample, timing
from archsearch.latency.calibrate.plan import PLANS

WEIGHED = sample.least_taken
KERNELS = ("moe", "ffn", "gemm", "mla.forward", "gqa.step", "gla.forward")


def summed(candidates, taken):
    """The form replaced: the plain sum of the counts of a shape's knob values."""
    return min(candidates, key=lambda shape: sum(taken[v] for v in shape.index))


FORMS = {"summed": summed, "weighed": WEIGHED}


def random_half(kernel: str, seed: int) -> list[timing.Shape]:
    """The shapes of `kernel`'s random passes at `seed` (the full plan's budget)."""
    samples = sample.budget(kernel, PLANS["full"].samples)
    sampler = sample.Sampler(kernel, lambda shape: 1e-4, samples, random.Random(seed), None)
    for _ in range(sampler.initial):
        sampler.step()
    return sampler.shapes


def coverage(shapes: list[timing.Shape], kernel: str) -> tuple[bool, float]:
    """(every value drawn and none past twice its fair share + 1, the largest count / fair)."""
    ok, most = True, 0.0
    for knob, values in timing.GRIDS[kernel].items():
        counts = np.bincount([dict(s.index)[knob] for s in shapes], minlength=len(values))
        fair = len(shapes) / len(values)
        ok &= bool(counts.min() >= 1 and counts.max() <= 2 * fair + 1)
        most = max(most, counts.max() / fair)
    return ok, float(most)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=300)
    ap.add_argument("--kernels", nargs="*", default=list(KERNELS))
    ap.add_argument(
        "--out", default=str(Path(__file__).parent / "results" / "sampler_coverage.json")
    )
    args = ap.parse_args()
    result: dict = {"seeds": args.seeds, "samples": PLANS["full"].samples, "kernels": {}}
    for kernel in args.kernels:
        row = result["kernels"][kernel] = {}
        for name, form in FORMS.items():
            sample.least_taken = form
            t0 = time.perf_counter()
            try:
                got = [coverage(random_half(kernel, seed), kernel) for seed in range(args.seeds)]
            finally:
                sample.least_taken = WEIGHED
            row[name] = {
                "missed_share": sum(not ok for ok, _ in got) / args.seeds,
                "most_over_fair": max(most for _, most in got),
                "seconds": time.perf_counter() - t0,
            }
            print(
                f"{kernel}, {name}: {row[name]['missed_share']:.2%} of {args.seeds} seeds leave "
                f"a value out or over-draw one; largest count {row[name]['most_over_fair']:.2f}x "
                "its fair share",
                flush=True,
            )
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
