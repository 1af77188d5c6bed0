"""Building a space's candidates: derived values resolved by OmegaConf for every candidate, or
kept by the values their expressions read (`space.assign.resolve_derived`).

A sweep builds every candidate of its space for the sampler's pool (EHVI), the reference point
and the feasibility check. Each build applies the assignment to the base architecture, resolves
the derived values and validates the architecture. OmegaConf builds a config and parses every
expression on each resolution and keeps no parse; a space's candidates share few distinct
values of what the expressions read (the tiny space's 528 candidates, four), so a resolution is
kept by them. Both ways build every enumerated candidate (or a seeded sample of 600) of each
shipped space, from a fresh space each round (its own memo empty), in one process; the least
of 3 rounds, the two ways alternating. Both give the same candidates (checked).

    python benchmarks/bench_space_build.py
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from archsearch.resources import shipped_names, spaces_dir
from archsearch.space import assign, build, draws, load_space

OUT = Path(__file__).parent / "results" / "space_build.json"
SAMPLE = 600  # candidates of a space too large to enumerate
ROUNDS = 3


def drawn(name: str) -> list[dict]:
    return list(draws(load_space(name), SAMPLE))


def build_all(name: str, draws: list[dict], kept: bool) -> tuple[float, list]:
    """Seconds to build `draws` in a fresh space, and what they built."""
    space = load_space(name)
    assign._resolved.clear()  # private: only a benchmark or a test forgets what was kept
    start = time.perf_counter()
    built = []
    for a in draws:
        if not kept:
            assign._resolved.clear()  # every candidate resolved by OmegaConf
        built.append(build(space, a))
    seconds = time.perf_counter() - start
    return seconds, [(c.arch, c.reason) for c in built]


def main() -> None:
    load = os.getloadavg()
    results = {}
    for name in shipped_names(spaces_dir()):
        draws = drawn(name)
        best = {"omegaconf": float("inf"), "kept": float("inf")}
        for _ in range(ROUNDS):
            fresh_s, fresh = build_all(name, draws, kept=False)
            kept_s, kept = build_all(name, draws, kept=True)
            assert fresh == kept, name
            best["omegaconf"] = min(best["omegaconf"], fresh_s)
            best["kept"] = min(best["kept"], kept_s)
        results[name] = {
            "candidates": len(draws),
            "ms_per_candidate": {k: 1e3 * v / len(draws) for k, v in best.items()},
            "speedup": best["omegaconf"] / best["kept"],
        }
        print(
            f"{name:20s} {len(draws):4d} candidates: "
            f"{results[name]['ms_per_candidate']['omegaconf']:.2f} ms -> "
            f"{results[name]['ms_per_candidate']['kept']:.2f} ms each "
            f"({results[name]['speedup']:.1f}x)"
        )
    out = {"load_average_before": load, "rounds": ROUNDS, "spaces": results}
    OUT.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
