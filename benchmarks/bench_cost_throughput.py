"""Throughput of the vectorised cost model: candidates per second for a whole table.

A table of 1,000,000 candidates is made by drawing rows from the distinct valid candidates of
the shipped spaces (attention, MLA, every linear family, MCSD, hybrids, MoE), and the analytic
part is timed: total/active params, KV-cache/state bytes, weight bytes, peak memory, prefill
FLOPs, and predicted TTFT and decode latency on a device, plus the constraint mask. The Python
side that turns ArchConfigs into table rows is timed apart. Medians of 5 runs. When the
`--kernel-device` profile (default `local`) carries a learned kernel predictor, its fp32 TTFT
and decode over the same table are timed apart (medians of 3).

    python benchmarks/bench_cost_throughput.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import fields
from pathlib import Path

import numpy as np

from archsearch.cost import Columns
from archsearch.latency import load_device, metric_values
from archsearch.metrics import METRICS, MetricSpec
from archsearch.space import assignments, build, load_space, sample


def spec(metric: str, **args) -> MetricSpec:
    return MetricSpec(metric, tuple({**METRICS[metric].args, **args}.items()))


SPECS = [
    spec("params"),
    spec("active_params"),
    spec("cache_bytes", context=4096, bits=8),
    spec("weight_bytes", precision="q4"),
    spec("memory_bytes", context=2048, precision="q4"),
    spec("prefill_flops", tokens=512),
    spec("ttft_ms", device="rpi5", precision="q4"),
    spec("decode_ms", device="rpi5", context=2048, precision="q4"),
]


def pool() -> list:
    archs = []
    for name in ("tiny", "plm_edge", "mcsd"):
        sp = load_space(name)
        archs += [c.arch for c in map(lambda a, sp=sp: build(sp, a), assignments(sp)) if c.ok]
    archs += [c.arch for c in sample(load_space("hybrid_linear_moe"), 400, seed=0).candidates]
    return archs


def kernel_pricing(arrays: dict, device: str) -> float | None:
    """Median seconds to price fp32 TTFT and decode of the table on a profile with a fitted
    kernel predictor (None when the profile has none)."""
    if load_device(device).kernels is None:
        return None
    specs = [
        spec("ttft_ms", device=device, precision="fp32"),
        spec("decode_ms", device=device, context=2048, precision="fp32"),
    ]
    times = []
    for _ in range(3):
        table = Columns(**arrays)
        t0 = time.perf_counter()
        for s in specs:
            metric_values(table, s)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument(
        "--kernel-device",
        default="local",
        help="a profile with a fitted kernel predictor (archsearch calibrate): its fp32 TTFT and "
        "decode are timed apart",
    )
    ap.add_argument(
        "--out", default=str(Path(__file__).parent / "results" / "cost_throughput.json")
    )
    args = ap.parse_args()
    archs = pool()
    t0 = time.perf_counter()
    base = Columns.from_archs(archs)
    build_rate = len(archs) / (time.perf_counter() - t0)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, base.n, args.rows)
    arrays = {f.name: getattr(base, f.name)[idx] for f in fields(Columns)}
    times = []
    for _ in range(5):
        table = Columns(**arrays)  # a fresh table: grouping its rows is part of the timing
        t0 = time.perf_counter()
        values = {s.label: metric_values(table, s) for s in SPECS}
        feasible = (values[SPECS[0].label] <= 2e9) & (values[SPECS[7].label] <= 250)
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    kernel_s = kernel_pricing(arrays, args.kernel_device)
    result = {
        "rows": args.rows,
        "distinct_candidates": len(archs),
        "metrics": [s.label for s in SPECS],
        "median_s": t,
        "candidates_per_s": args.rows / t,
        "archconfig_to_row_per_s": build_rate,
        "feasible_fraction": float(feasible.mean()),
        "kernel_device": args.kernel_device,
        "kernel_median_s": kernel_s,
    }
    print(
        f"{args.rows:,} candidates x {len(SPECS)} metrics + constraints: {t:.3f} s "
        f"(median of 5) = {args.rows / t:,.0f} candidates/s"
    )
    print(f"ArchConfig -> table row (Python): {build_rate:,.0f} candidates/s")
    if kernel_s is not None:
        print(
            f"{args.rows:,} candidates, fp32 TTFT and decode on {args.kernel_device} (learned "
            f"kernel predictor): {kernel_s:.3f} s (median of 3)"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"saved {out}")


if __name__ == "__main__":
    main()
