"""How long the front and its hypervolume history take on large studies (2 and 3 objectives).

`hypervolume_history` keeps the front so far and recomputes the hypervolume only when a trial
joined it, at every trial (`max_points=n`) or, by default, at 200 trials spread over the study;
the baseline recomputes the hypervolume of every prefix of the trials (what a plain
implementation does). They run side by side on the same random points (uniform in the unit
cube, and near a curved trade-off surface, where a large share of the trials is on the front,
as multi-objective TPE produces); the figure is the median of `--repeats` runs (the baseline
runs once), and the histories must agree wherever both have a value.

    python benchmarks/bench_analysis_front.py [--sizes 500 1000] [--repeats 3]

Prints a table and saves benchmarks/results/analysis_front.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from archsearch.analysis.front import (
    Axis,
    hypervolume,
    hypervolume_history,
    non_dominated,
    reference_point,
)
from archsearch.study import TrialRecord

RESULTS = Path(__file__).resolve().parent / "results"


def baseline_history(values: np.ndarray, axes: list[Axis], ref: np.ndarray) -> list[float]:
    return [hypervolume(values[: k + 1], axes, ref) for k in range(len(values))]


def points(kind: str, n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "uniform":
        return rng.random((n, d))
    # near the surface sum(x^2) = 1: most points are mutually non-dominated
    x = np.abs(rng.normal(size=(n, d)))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x + 0.02 * rng.random((n, d))


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[500, 1000])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=str(RESULTS / "analysis_front.json"))
    args = p.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for kind in ("uniform", "tradeoff"):
        for d in (2, 3):
            for n in args.sizes:
                v = points(kind, n, d, rng)
                axes = [Axis(f"m{i}") for i in range(d)]
                recs = [
                    TrialRecord(i, "COMPLETE", "trained", "", list(v[i]), {"arch_hash": str(i)}, {})
                    for i in range(n)
                ]
                ref = reference_point(v, axes)
                labels = [a.label for a in axes]
                t_front, mask = timed(lambda v=v, axes=axes: non_dominated(v, axes), args.repeats)
                t_every, every = timed(
                    lambda recs=recs, axes=axes, labels=labels, ref=ref, n=n: hypervolume_history(
                        recs, axes, labels, ref, max_points=n
                    ),
                    args.repeats,
                )
                t_default, default = timed(
                    lambda recs=recs, axes=axes, labels=labels, ref=ref: hypervolume_history(
                        recs, axes, labels, ref
                    ),
                    args.repeats,
                )
                t_base, base = timed(
                    lambda v=v, axes=axes, ref=ref: baseline_history(v, axes, ref), 1
                )
                assert np.allclose([h for _, h in every], base), "the histories disagree"
                assert np.allclose([h for _, h in default], [base[k] for k, _ in default])
                rows.append(
                    {
                        "points": kind,
                        "objectives": d,
                        "trials": n,
                        "front": int(mask.sum()),
                        "non_dominated_s": t_front,
                        "history_every_trial_s": t_every,
                        "history_200_points_s": t_default,
                        "baseline_history_s": t_base,
                        "speedup_every_trial": t_base / t_every,
                        "speedup_200_points": t_base / t_default,
                    }
                )
                r = rows[-1]
                print(
                    f"{kind:>8} d={d} n={n:>5} front {r['front']:>4}: front {t_front:6.3f} s; "
                    f"history: every trial {t_every:7.3f} s, 200 points {t_default:6.3f} s, "
                    f"baseline {t_base:7.3f} s ({r['speedup_every_trial']:.1f}x, "
                    f"{r['speedup_200_points']:.1f}x)"
                )
    result = {
        "benchmark": "Pareto front and hypervolume history",
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "rows": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"saved {out}")


if __name__ == "__main__":
    main()
