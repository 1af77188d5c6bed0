"""Is it the predictor or the timing plan? This code's predictor fitted to the timings the code
before the latency room took, side by side with the code before's own predictor on them.

No timing: refits (`archsearch.latency.calibrate.refit`) of raw timings that calibrations
printed (`archsearch calibrate format=json`), scored on a held-out run of
`bench_latency_accuracy.py` (`bench_latency_ablation.score`: share within +-10%, Kendall's tau).

1. **Same timings.** The code before's calibration (`--before`: its kernel timings on this
   code's grid, its memory probe, its glue and held-out whole models) refitted by this code,
   beside the code before's predictor on that calibration (`--before-scored`: the held-out run
   rescored by the code before), and the terms of `fit.TERMS` left out in turn.
2. **Which shapes are timed.** The code before's kernel timings drawn down to as many per
   kernel as this code's plan times (`--this`: a calibration by this code, whose memory probe
   and whole models they join), `--draws` times each: independently at random, and stratified
   as the plan draws them (`calibrate.sample.least_taken`: each the shape, of `CANDIDATES`
   random ones, whose knob values the kernel's drawn shapes hold least often); the mean, spread
   and range of each. And this code's own timings of several calibrations (`--pool`) pooled.

    python benchmarks/bench_latency_same_timings.py --before today.json --this new_a.json \\
        --before-scored run_today.json --pool new_a.json new_b.json new_c.json new_d.json \\
        --runs run_new_a.json --save-profile /tmp/same_timings.yaml

With `--save-profile` the refitted profile is written, to be read on every saved run
(`bench_latency_ceiling.py --device`).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from archsearch.latency.calibrate import timing
from archsearch.latency.calibrate.fit import TERMS
from archsearch.latency.calibrate.sample import CANDIDATES, least_taken
from archsearch.latency.profile import predictor_dict, write_profile

sys.path.insert(0, str(Path(__file__).parent))
from bench_latency_ablation import QUANTITIES, score, variant
from bench_latency_accuracy import cases

WHOLE = ("arch", "prompt", "context", "batch", "measured_s")


def on_this_grid(kernel: str, rows: list[dict]) -> list[dict]:
    """The timed shapes of a kernel that lie on this code's grid (the code before's grids hold
    them all; a shape off it could not be refitted)."""
    grid = timing.GRIDS[kernel]
    return [r for r in rows if all(k in r and r[k] in grid[k] for k in grid)]


def before_as_raw(before: dict, this: dict) -> dict:
    """The code before's calibration in this code's raw form; its roofline block (what prices
    a kernel without a fit, and fp16) from `this`, since the code before kept no such block."""
    old = before["raw"]["kernels"]
    raw = copy.deepcopy(this["raw"])
    raw["kernels"] = {k: on_this_grid(k, rows) for k, rows in old["kernels"].items()}
    raw["memory"] = {k: [m[k] for m in old["memory"]] for k in ("bytes", "seconds")}
    raw["glue"] = [{k: g[k] for k in WHOLE} for g in old["glue"]]
    raw["held_out"] = [{k: g[k] for k in WHOLE} for g in old["validation"]]
    return raw


def stratified(kernel: str, rows: list[dict], n: int, rng: random.Random) -> list[dict]:
    """`n` of a kernel's timed `rows` drawn as the plan draws shapes: each the least taken
    (`calibrate.sample.least_taken`) of `CANDIDATES` rows at random among those left."""
    grid = timing.GRIDS[kernel]
    shapes = [timing.Shape(kernel, tuple((k, grid[k].index(r[k])) for k in grid)) for r in rows]
    left, taken, out = list(range(len(rows))), Counter(), []
    rng.shuffle(left)
    while left and len(out) < n:
        pool = left[:CANDIDATES]
        pick = pool[[shapes[i] for i in pool].index(least_taken([shapes[i] for i in pool], taken))]
        left.remove(pick)
        out.append(rows[pick])
        taken.update(shapes[pick].index)
    return out


def designs(this: dict, raw: dict, runs: list, archs: dict, draws: int) -> dict:
    """Per design (`independent`, `stratified`), each draw's figures and their mean, standard
    deviation, least and most: of each kernel, as many of `raw`'s timings as `this` timed."""
    counts = timed_counts(this)
    out = {}
    for design in ("independent", "stratified"):
        scores = []
        for draw in range(draws):
            rng, drawn = random.Random(draw), copy.deepcopy(this["raw"])
            for k, rows in raw["kernels"].items():
                n = min(counts.get(k, 0), len(rows))
                drawn["kernels"][k] = (
                    stratified(k, rows, n, rng) if design == "stratified" else rng.sample(rows, n)
                )
            scores.append(figures(this, drawn, runs, archs))
        out[design] = {"draws": scores}
        for q in QUANTITIES:
            v = np.array([s[q]["within_10"] for s in scores])
            out[design][q] = {
                "mean": float(v.mean()),
                "sd": float(v.std(ddof=1)) if len(v) > 1 else 0.0,
                "min": float(v.min()),
                "max": float(v.max()),
            }
        print(
            f"  {design:12s} {draws} draws: "
            + "  ".join(
                f"{q} {out[design][q]['mean']:.3f} +- {out[design][q]['sd']:.3f} "
                f"({out[design][q]['min']:.3f}-{out[design][q]['max']:.3f})"
                for q in QUANTITIES
            ),
            flush=True,
        )
    return out


def timed_counts(calibration: dict) -> dict[str, int]:
    """Kernel -> timings a calibration took of it."""
    return {k: len(v) for k, v in calibration["raw"]["kernels"].items()}


def figures(this: dict, raw: dict, runs: list, archs: dict, without=()) -> dict:
    """`raw` refitted (without `without`) on `this` calibration's profile, scored on `runs`."""
    return score(variant({"profile": this["profile"], "raw": raw}, without), runs, archs)


def line(name: str, s: dict) -> str:
    return f"{name:58s} " + "  ".join(
        f"{q} {s[q]['within_10']:.3f} (tau {s[q]['kendall_tau']:.3f})" for q in QUANTITIES
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="a calibration by the code before (json)")
    ap.add_argument("--before-scored", required=True, help="the run rescored by the code before")
    ap.add_argument("--this", required=True, help="a calibration by this code (json)")
    ap.add_argument("--pool", nargs="*", default=[], help="calibrations by this code to pool")
    ap.add_argument("--runs", nargs="+", required=True, help="saved bench_latency_accuracy runs")
    ap.add_argument("--draws", type=int, default=12, help="draws of each design")
    ap.add_argument("--save-profile", help="write the refitted profile here (YAML and its data)")
    ap.add_argument(
        "--out", default=str(Path(__file__).parent / "results" / "latency_same_timings.json")
    )
    args = ap.parse_args()
    load = lambda p: json.loads(Path(p).read_text())  # noqa: E731
    archs = {a.summary(): a for _, a, _ in cases(3)}
    runs = [load(p)["rows"] for p in args.runs]
    before, this = load(args.before), load(args.this)
    raw = before_as_raw(before, this)
    scored = load(args.before_scored)["summary"]
    out: dict = {"inputs": vars(args), "same_timings": {}, "how_much_is_timed": {}}
    same = out["same_timings"]
    same["code_before"] = {
        q: {k: scored[q][k] for k in ("within_10", "kendall_tau")} for q in QUANTITIES
    }
    device = variant({"profile": this["profile"], "raw": raw}, ())
    same["this_code"] = score(device, runs, archs)
    if args.save_profile:  # to be read on more runs (bench_latency_ceiling.py --device)
        predictor = predictor_dict(device.predictor)
        write_profile({**this["profile"], "predictor": predictor}, Path(args.save_profile))
    for term in TERMS:
        same[f"this_code_without_{term}"] = figures(this, raw, runs, archs, (term,))
    timed = out["how_much_is_timed"]
    timed["this_calibration"] = figures(this, this["raw"], runs, archs)
    print("which shapes are timed")
    out["designs"] = designs(this, raw, runs, archs, args.draws)
    if args.pool:
        pooled = copy.deepcopy(this["raw"])
        cals = [load(p)["raw"]["kernels"] for p in args.pool]
        pooled["kernels"] = {k: [r for c in cals for r in c[k]] for k in pooled["kernels"]}
        timed[f"this_code_{len(cals)}_calibrations_pooled"] = figures(this, pooled, runs, archs)
    out["kernel_timings"] = {
        "code_before": sum(len(v) for v in raw["kernels"].values()),
        "this_plan": sum(timed_counts(this).values()),
    }
    for part in ("same_timings", "how_much_is_timed"):
        print(part)
        for name, s in out[part].items():
            print("  " + line(name, s))
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
