"""Do pooled calibrations predict better than one? Every recorded calibration alone, and pooled
in pairs and triples (`archsearch calibrate pool=`), scored on held-out runs.

No timing: each calibration's raw timings (`archsearch calibrate format=json`) are joined by
`archsearch.latency.calibrate.pool.join` (the union of the kernel shapes, the least time of a
shape, whole model or probe size timed in both), refitted (`calibrate.refit`) and priced on the
held-out architectures that saved runs of `bench_latency_accuracy.py` timed: per run the share
within +-10% of TTFT and decode, the mean over runs. A pool of calibrations whose samplers drew
mostly the same shapes is read apart from one whose shapes differ (`overlap`: the share of the
smaller calibration's shapes the other timed too). `--both geometric_mean` pools what both
calibrations timed at the geometric mean of the two times rather than the least.

    python benchmarks/bench_latency_pooled.py --calibration A=a.json B=b.json C=c.json \\
        --runs results/latency_accuracy*.json --sizes 2 3 --every 1 8
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np

from archsearch.latency.calibrate.pool import join

sys.path.insert(0, str(Path(__file__).parent))
from bench_latency_ablation import QUANTITIES, score, variant
from bench_latency_accuracy import cases

BOTH = {"least": min, "geometric_mean": lambda a, b: math.sqrt(a * b)}


def shapes(raw: dict) -> set[tuple]:
    return {
        (kernel, tuple(sorted((k, v) for k, v in e.items() if k != "seconds")))
        for kernel, entries in raw["kernels"].items()
        for e in entries
    }


def overlap(raws: list[dict]) -> float:
    """The least, over pairs, of the share of the smaller one's shapes the other timed too."""
    sets = [shapes(r) for r in raws]
    return min(len(a & b) / min(len(a), len(b)) for a, b in itertools.combinations(sets, 2))


def summary(rows: list[dict], alone: dict[str, dict]) -> dict:
    """Per quantity the mean, least and most share within +-10%; for pools, its gain over the
    mean of its calibrations alone (mean, standard error, share of pools that gain) and over
    the best of them."""
    out: dict = {"n": len(rows)}
    for q in QUANTITIES:
        got = np.array([r[q] for r in rows])
        out[q] = {"mean": float(got.mean()), "min": float(got.min()), "max": float(got.max())}
        if len(rows[0]["pooled"]) > 1:
            mean = got - [np.mean([alone[n][q] for n in r["pooled"]]) for r in rows]
            best = got - [max(alone[n][q] for n in r["pooled"]) for r in rows]
            out[q]["gain_over_mean"] = float(mean.mean())
            out[q]["gain_over_mean_se"] = float(mean.std() / np.sqrt(len(rows)))
            out[q]["share_that_gain"] = float(np.mean(mean > 0))
            out[q]["gain_over_best"] = float(best.mean())
    return out


def summaries(rows: dict[int, list[dict]]) -> dict:
    """`summary` per pool size, of every pool and of those whose shapes overlap above and
    below one half."""
    alone = {r["pooled"][0]: r for r in rows[1]}
    out = {}
    for size, got in rows.items():
        groups = {"all": got}
        if size > 1:
            groups["overlap above one half"] = [r for r in got if r["overlap"] > 0.5]
            groups["overlap below one half"] = [r for r in got if r["overlap"] <= 0.5]
        out[size] = {g: summary(v, alone) for g, v in groups.items() if v}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calibration", nargs="+", required=True, help="NAME=RAW.json, two or more")
    ap.add_argument("--runs", nargs="+", required=True, help="saved bench_latency_accuracy runs")
    ap.add_argument("--sizes", nargs="+", type=int, default=[2, 3], help="calibrations pooled")
    ap.add_argument("--every", nargs="+", type=int, default=[1, 8], help="per size: every N-th")
    ap.add_argument(
        "--both",
        choices=sorted(BOTH),
        default="least",
        help="what a pool keeps of a time both calibrations took",
    )
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "latency_pooled.json"))
    args = ap.parse_args()
    archs = {a.summary(): a for _, a, _ in cases(3)}
    runs = [json.loads(Path(p).read_text())["rows"] for p in args.runs]
    saved = {}
    for spec in args.calibration:
        name, path = spec.split("=", 1)
        saved[name] = json.loads(Path(path).read_text())

    def scored(names: tuple[str, ...]) -> dict:
        pool = functools.partial(join, both=BOTH[args.both])
        raw = functools.reduce(pool, [saved[n]["raw"] for n in names])
        s = score(variant({"raw": raw, "profile": saved[names[0]]["profile"]}, ()), runs, archs)
        row = {"pooled": list(names), **{q: s[q]["within_10"] for q in QUANTITIES}}
        if len(names) > 1:
            row["overlap"] = overlap([saved[n]["raw"] for n in names])
        print(" + ".join(names), *(f"{q} {row[q]:.3f}" for q in QUANTITIES), flush=True)
        return row

    rows = {1: [scored((n,)) for n in saved]}
    for size, every in zip(args.sizes, args.every):
        if size <= len(saved):
            rows[size] = [scored(c) for c in list(itertools.combinations(saved, size))[::every]]
    result = {"calibrations": args.calibration, "runs": args.runs, "both": args.both}
    result["rows"] = rows
    result["summary"] = summaries(rows)
    for size, groups in result["summary"].items():
        for g, v in groups.items():
            print(
                f"{size} pooled, {g} ({v['n']}): "
                + ", ".join(
                    f"{q} {v[q]['mean']:.3f} ({v[q]['min']:.3f}-{v[q]['max']:.3f})"
                    + (f", {v[q]['gain_over_mean']:+.3f} over alone" if size > 1 else "")
                    for q in QUANTITIES
                )
            )
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
