"""The memory probe's fit: capacities refined off the grid, against the grid search it replaced.

`calibrate.fit.fit_memory` fits the probe's timings (a matrix-vector product over weights of
1/8-256 MiB) with a cache that misses nothing below `lo` bytes and everything beyond `hi`. The
form replaced searched `lo`, `hi` on a log grid (32% apart, then 9.7% apart around the best),
so a capacity between its points was placed by a neighbour and the stall per byte bent to make
up for it. The fit now refines the grid's best few pairs (Powell's method on log `lo`,
log `hi`). Two comparisons, side by side in one run:

1. Synthetic probes: times made from a known cache (`lo` in 4-24 MiB, `hi` / `lo` in 1.2-4) and
   stall per byte, at the full plan's sizes, clean and with lognormal noise; per form the error
   of the fitted times against the noiseless ones (worst and mean of each draw's worst over the
   sizes where the cache holds all or none, the mean over every size), of the stall per byte,
   and the milliseconds per fit.
2. Real calibrations (`archsearch calibrate format=json`, given as NAME=PATH): each refitted
   (`calibrate.refit`) with each form; the probe's fit (its RMS relative residual, `lo`, `hi`)
   and the calibration's own fp32 held-out check (share within +-10%, MAPE).

    python benchmarks/bench_memory_fit.py --calibration A=a.json B=b.json [--draws 500]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from archsearch.latency.calibrate import fit, refit
from archsearch.latency.calibrate.plan import PLANS
from archsearch.latency.predict import Memory

MIB = 2**20
REFINED = fit.fit_memory
NOISE_LEVELS = (0.0, 0.03, 0.1)  # lognormal sigma of the synthetic timings


def grid_only(sizes, seconds) -> Memory | None:
    """The form replaced: every pair of a 32% grid, then of a 9.7% grid around the best."""
    sizes, seconds = np.asarray(sizes, dtype=float), np.asarray(seconds, dtype=float)
    base = np.column_stack([np.ones_like(sizes), sizes]) / seconds[:, None]

    def residual(span) -> tuple[float, np.ndarray]:
        return fit.span_fit(sizes, seconds, *span)

    if fit.nnls(base, np.ones_like(sizes))[1] <= fit.NOISE * math.sqrt(len(sizes)):
        return None
    best = (sizes.min(), sizes.max())
    for step, around in ((1.32, np.inf), (1.097, 1.32**2)):
        points = 1 + math.ceil(math.log(sizes.max() / sizes.min()) / math.log(step))
        pairs = itertools.combinations(np.geomspace(sizes.min(), sizes.max(), points), 2)
        near = [s for s in pairs if all(b / around <= a <= b * around for a, b in zip(s, best))]
        best = min(near, key=lambda span: residual(span)[0])
    stall_s = float(residual(best)[1][2])
    return Memory(stall_s, float(best[0]), float(best[1])) if stall_s > 0 else None


FORMS = {"grid": grid_only, "refined": REFINED}


def synthetic(draws: int, noise: float, seed: int = 0) -> dict:
    """Each form's recovery of known caches from the same `draws` probes."""
    sizes = np.array(PLANS["full"].memory_sizes, dtype=np.float64)
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(draws):
        lo, ratio, byte_s = rng.uniform(4, 24), rng.uniform(1.2, 4), rng.uniform(1e-11, 1e-10)
        true = Memory(byte_s, lo * MIB, lo * ratio * MIB)
        clean = 2e-6 + 1.2e-11 * sizes + true.byte_stalls(sizes)
        cases.append((true, clean, clean * np.exp(rng.normal(0.0, noise, len(sizes)))))
    out = {}
    for name, form in FORMS.items():
        outside, overall, stall, t0 = [], [], [], time.perf_counter()
        for true, clean, timed in cases:
            got = form(sizes, timed)
            err = np.abs((2e-6 + 1.2e-11 * sizes + got.byte_stalls(sizes)) / clean - 1)
            outside.append(err[(sizes <= true.lo) | (sizes >= true.hi)].max())
            overall.append(err.mean())
            stall.append(abs(got.stall_s / true.stall_s - 1))
        out[name] = {
            "outside_worst": float(np.max(outside)),
            "outside_mean": float(np.mean(outside)),
            "every_size_mean": float(np.mean(overall)),
            "stall_worst": float(np.max(stall)),
            "stall_mean": float(np.mean(stall)),
            "ms_per_fit": 1e3 * (time.perf_counter() - t0) / draws,
        }
    return out


def probe_residual(probe: Memory, sizes, seconds) -> float:
    """The RMS relative residual of the probe's times under `probe`'s capacities."""
    sizes, seconds = np.asarray(sizes, dtype=float), np.asarray(seconds, dtype=float)
    return fit.span_fit(sizes, seconds, probe.lo, probe.hi)[0] / math.sqrt(len(sizes))


def calibration(raw: dict) -> dict:
    """Each form's probe fit and the refitted predictor's fp32 held-out check."""
    out = {}
    memory = raw["memory"]
    for name, form in FORMS.items():
        fit.fit_memory = form
        try:
            probe = form(memory["bytes"], memory["seconds"])
            _, validation = refit(raw)
        finally:
            fit.fit_memory = REFINED
        checks = {q: validation[q][0] for q in ("ttft", "decode")}
        out[name] = {
            "lo_mib": probe.lo / MIB,
            "hi_mib": probe.hi / MIB,
            "stall_s_per_byte": probe.stall_s,
            "probe_rms": probe_residual(probe, memory["bytes"], memory["seconds"]),
            **{f"{q}_within_10": c["within_10"] for q, c in checks.items()},
            **{f"{q}_mape": c["mape"] for q, c in checks.items()},
            "held_out": checks["decode"]["n"],
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calibration", nargs="*", default=[], help="NAME=PATH of calibrate's JSON")
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "memory_fit.json"))
    args = ap.parse_args()
    result: dict = {"draws": args.draws, "synthetic": {}, "calibrations": {}}
    for noise in NOISE_LEVELS:
        got = result["synthetic"][f"noise_{round(100 * noise)}pct"] = synthetic(args.draws, noise)
        for name, f in got.items():
            print(
                f"noise {noise:.0%}, {name}: outside the span worst {f['outside_worst']:.2%} "
                f"mean {f['outside_mean']:.2%}; stall per byte worst {f['stall_worst']:.2%}; "
                f"{f['ms_per_fit']:.0f} ms per fit"
            )
    for spec in args.calibration:
        label, path = spec.split("=", 1)
        raw = json.JSONDecoder().raw_decode(Path(path).read_text())[0]["raw"]
        got = result["calibrations"][label] = calibration(raw)
        for name, c in got.items():
            print(
                f"{label}, {name}: lo {c['lo_mib']:.2f} MiB hi {c['hi_mib']:.2f} MiB, probe RMS "
                f"{c['probe_rms']:.2%}; held-out within +-10% TTFT {c['ttft_within_10']:.1%} "
                f"decode {c['decode_within_10']:.1%} (n {c['held_out']})"
            )
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
