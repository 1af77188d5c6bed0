"""Pricing a sweep's pool: every candidate priced on its own one-row table, or all of them over
one table (`sweep.pricing.price_all`).

Before its first trial, a sweep prices the `ehvi` sampler's pool (every candidate of a space,
or a seeded sample of 528) and the hypervolume reference point's probes (256). Each priced
candidate carries the space's cost metrics and the default latencies (TTFT, decode, end to end)
on the sweep's device, and its constraints judged. The cost model's formulas are vectorised over
the rows of a table, so pricing the pool over one table evaluates each metric once per group of
rows that use the same modules, instead of once per candidate. Both ways price the same built
architectures of each shipped space on `rpi5` (its table cache cleared each round); the least
of 5 rounds, the two ways alternating; every number the same (checked).

    python benchmarks/bench_pool_pricing.py
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from archsearch.cost.evaluate import columns
from archsearch.resources import shipped_names, spaces_dir
from archsearch.space import build, draws, load_space
from archsearch.sweep.ehvi import POOL
from archsearch.sweep.pricing import price, price_all

OUT = Path(__file__).parent / "results" / "pool_pricing.json"
ROUNDS = 5
DEVICE = "rpi5"


def pool(space) -> list:
    """The built architectures of the space's pool (invalid candidates left out)."""
    return [c.arch for c in (build(space, a) for a in draws(space, POOL)) if c.ok]


def one_by_one(space, archs: list) -> list:
    return [price(space, [], DEVICE, a) for a in archs]


def together(space, archs: list) -> list:
    return price_all(space, [], DEVICE, archs)


def timed(way, space, archs: list) -> tuple[float, list]:
    columns.cache_clear()  # no row kept from an earlier round
    start = time.perf_counter()
    out = way(space, archs)
    return time.perf_counter() - start, out


def numbers(priced) -> list:
    return [(p.costs, p.device_costs, p.violations, p.reasons) for p in priced]


def main() -> None:
    load = os.getloadavg()
    results = {}
    for name in shipped_names(spaces_dir()):
        space = load_space(name)
        archs = pool(space)
        price_all(space, [], DEVICE, archs[:2])  # imports and profiles loaded before timing
        best = {"one_by_one": float("inf"), "together": float("inf")}
        for _ in range(ROUNDS):
            alone_s, alone = timed(one_by_one, space, archs)
            together_s, joint = timed(together, space, archs)
            assert numbers(alone) == numbers(joint), name
            best["one_by_one"] = min(best["one_by_one"], alone_s)
            best["together"] = min(best["together"], together_s)
        results[name] = {
            "candidates": len(archs),
            "ms": {k: 1e3 * v for k, v in best.items()},
            "speedup": best["one_by_one"] / best["together"],
        }
        print(
            f"{name:20s} {len(archs):4d} candidates: {results[name]['ms']['one_by_one']:.0f} ms "
            f"one by one, {results[name]['ms']['together']:.0f} ms together "
            f"({results[name]['speedup']:.1f}x)"
        )
    out = {"load_average_before": load, "rounds": ROUNDS, "device": DEVICE, "spaces": results}
    OUT.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
