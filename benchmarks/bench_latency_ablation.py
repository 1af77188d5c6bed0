"""Which terms of the learned latency predictor earn their place? An ablation on recorded timings.

No timing: every figure is a refit and a prediction of timings saved earlier on the AMD EPYC VM.

- The kernels: the shipped `local` profile's fitted kernels (each kernel's learned roofline and
  its boosted-tree correction). Without the trees a kernel's time is its learned roofline, whose
  coefficients are the non-negative least squares of its timings alone (`kernel_fit._fit`): the
  refit without the trees is exact.
- The model-level terms are refitted (`kernel_fit._fit_glue`, with each term switched off in
  turn) to the forty glue models the held-out run of that calibration timed before and after
  its held-out set (`drift.before` / `drift.after` of results/latency_accuracy.json: measured /
  predicted on that profile, the profile's predictions recomputed here). The two refits are two
  fits of the same hour.
- The memory probe's capacities are the shipped forward glue's divided by its capacity scale
  (the grid's first point), its stall per byte `--probe-byte-s` (a scale the fitted w absorbs;
  it matters only without model-level stalls, where each kernel gets back the stalls it met
  alone).
- Scored on the 48 held-out architectures of the eleven EPYC runs of bench_latency_accuracy.py
  (results/latency_ceiling.json's inputs): per run the share within +-10% and Kendall's tau,
  the mean over runs, then the mean over the two refits.

Backward elimination: from every term, each term is removed in turn; the term whose removal
costs least (its drop in TTFT or decode within +-10%, as a share of the spread, whichever is
larger) goes if it costs less than the spread; then again, until every term left costs more.
The spread is that of the same score between two calibrations of the same code in the same hour
(the consecutive pairs of results/latency_ceiling.json: the mean absolute difference).

    python benchmarks/bench_latency_ablation.py

Printed and saved (results/latency_ablation.json).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from archsearch.cost import kernel_fit as kf
from archsearch.cost.counts import block_modules
from archsearch.cost.devices import load_device
from archsearch.cost.kernel_latency import FP32, module_kernel, resident
from archsearch.cost.kernels import NO_GLUE, PHASES, Cache, Glue
from archsearch.cost.ops import Columns

sys.path.insert(0, str(Path(__file__).parent))
from bench_latency_accuracy import cases, figures

RESULTS = Path(__file__).parent / "results"
RUNS = [
    "latency_accuracy_epyc_2026-11-27_epyc27v.json",
    "latency_accuracy_epyc_2026-11-27_edge.json",
    "latency_accuracy_epyc_2026-11-27_decode_rows.json",
    "latency_accuracy_epyc_2026-11-27_lm_head.json",
    "latency_accuracy_epyc_2026-11-27_lm_head_again.json",
    "latency_accuracy_epyc_2026-11-27_batch8_glue.json",
    "latency_accuracy_epyc_2026-11-27_batch8_glue_again.json",
    "latency_accuracy.json",
    "latency_accuracy_epyc_2026-11-28_steady_allocator.json",
    "latency_accuracy_epyc_2026-11-28_steady_allocator_again.json",
    "latency_accuracy_epyc_2026-11-28_steady_allocator_third.json",
]
# consecutive calibrations of the same code (latency_ceiling.json's profiles)
PAIRS = (
    ("epyc27y", "epyc27z"),
    ("epyc27b8", "epyc27b9"),
    ("epyc27d1", "epyc27d2"),
    ("epyc27d2", "epyc27d3"),
)
QUANTITIES = ("ttft", "decode")
TERMS = {
    "trees": "the boosted-tree correction of each kernel",
    "dispatch": "the measured dispatch overhead per operator",
    "passes": "the extra passes of GEMMs of a few rows over their weights",
    "model": "seconds per model",
    "layer": "seconds per layer",
    "scales": "the cache capacity searched on whole models (else the probe's)",
    "miss": "seconds per layer x the share of the working set that misses the cache",
    "overlap": "the stalls a batched step's weight GEMMs hide behind their compute",
    "stalls": "the stalls of the working set (the probe's, x a fitted w)",
}
DEPENDS = {"stalls": {"miss", "overlap", "passes", "scales"}}  # meaningless without stalls


class Ablation:
    def __init__(self, probe_byte_s: float) -> None:
        self.dev = load_device("local")
        self.kernels = self.dev.kernels
        runs = [json.loads((RESULTS / f).read_text()) for f in RUNS]
        keys = [self.key(r) for r in runs[0]["rows"]]
        by_key = [{self.key(r): r for r in run["rows"]} for run in runs]
        self.timings = np.array(
            [[[rows[k][f"{q}_ms"] for q in QUANTITIES] for k in keys] for rows in by_key]
        )
        archs = {a.summary(): a for _, a, _ in cases(3)}
        self.held = [kf.WholeModel(archs[k[0]], k[1], k[2], k[3]) for k in keys]
        self.glue = kf.glue_models()
        own = json.loads((RESULTS / "latency_accuracy.json").read_text())
        predicted = np.array([m.predicted(self.dev) for m in self.glue])
        self.glue_timings = {w: np.array(own["drift"][w]) * predicted for w in ("before", "after")}
        forward = self.kernels.glue["forward"].caches[0]
        scale = kf.SHARED_SCALES[0]
        self.memory = Glue(0.0, 0.0, (Cache(probe_byte_s, forward.lo / scale, forward.hi / scale),))
        self.cache: dict[frozenset, dict] = {}

    @staticmethod
    def key(row: dict) -> tuple:
        return row["summary"], row["prompt"], row["context"], row["batch"]

    def own_stalls(self, m: kf.WholeModel) -> np.ndarray:
        """The stalls each kernel of `m` met timed alone (its resident bytes), summed: what its
        timings held before the fit left them out."""
        c = Columns.from_archs([m.arch])
        out = []
        for p in m.phases():
            total = float(self.memory.stalls(FP32 * c.d * c.V)[0])  # the LM head's GEMM
            for _, count, fn in block_modules(c):
                kernel = module_kernel(fn, c, p)
                if kernel is not None:
                    total += float(count[0] * self.memory.stalls(resident(kernel, c, p))[0])
            out.append(total)
        return np.array(out)

    def fit(self, kernels, measured, terms: set[str]):
        """`kernel_fit._fit_glue` with the terms not in `terms` switched off."""
        passes = kernels.passes if "passes" in terms else None
        bare = dataclasses.replace(kernels, glue=dict.fromkeys(PHASES, NO_GLUE), passes=passes)
        dev = dataclasses.replace(self.dev, kernels=bare)
        predicted = np.array([m.predicted(dev) for m in self.glue])
        if "stalls" not in terms:
            predicted = predicted + np.array([self.own_stalls(m) for m in self.glue])
        layers = np.array([m.arch.n_layers for m in self.glue], dtype=np.float64)
        working = np.array([m.working_sets() for m in self.glue])
        gemms = [m.step_gemms(dev) for m in self.glue]
        again = np.array([m.restreamed(passes) for m in self.glue])
        scales = kf.SHARED_SCALES if "scales" in terms else (1.0,)
        glue = {}
        for i, phase in enumerate(PHASES):
            meas, pred, nbytes = measured[:, i], predicted[:, i], working[:, i]
            overlaps = kf.OVERLAPS if phase == "step" and "overlap" in terms else (0.0,)
            best = None
            for scale in scales if "stalls" in terms else (1.0,):
                mem = kf._shared_capacity(self.memory, scale)
                miss = phase == "step" and "miss" in terms
                missing = mem.missing(nbytes) if miss else np.zeros_like(meas)
                stalls = mem.stalls(nbytes) + mem.shares(nbytes, again[:, i])
                if "stalls" not in terms:
                    stalls = np.zeros_like(meas)
                ones = np.ones_like(meas) * ("model" in terms)
                A = np.column_stack([ones, layers * ("layer" in terms), stalls, layers * missing])
                for overlap in overlaps:
                    w = 1.0
                    for _ in range(kf.REFITS if overlap else 1):
                        fixed, per_w = kf._hidden_terms(mem, nbytes, gemms, w, overlap)
                        Aw = A.copy()
                        Aw[:, 2] -= per_w
                        (a, b, w, u), _ = kf._nnls(Aw / meas[:, None], 1.0 - (pred - fixed) / meas)
                    caches = mem.scaled(float(w)) if "stalls" in terms else ()
                    g = Glue(float(a), float(b), caches, float(u), overlap)
                    hidden = (
                        np.array([g.hidden(n, *gg) for n, gg in zip(nbytes, gemms)])
                        if overlap
                        else 0.0
                    )
                    total = pred + g.overhead(layers) + g.stalls(nbytes, layers) - hidden
                    total = total + g.shares(nbytes, again[:, i])
                    residual = float(np.linalg.norm(total / meas - 1))
                    if best is None or residual < best[0]:
                        best = (residual, g)
            glue[phase] = best[1]
        return dataclasses.replace(kernels, glue=glue, passes=passes)

    def score(self, kernels, terms: set[str]) -> dict:
        dev = dataclasses.replace(self.dev, kernels=kernels)
        pred = 1e3 * np.array([m.predicted(dev) for m in self.held])
        if "stalls" not in terms:
            pred = pred + 1e3 * np.array([self.own_stalls(m) for m in self.held])
        out = {}
        for i, q in enumerate(QUANTITIES):
            per_run = [figures(t[:, i], pred[:, i]) for t in self.timings]
            out[q] = {
                k: float(np.mean([r[k] for r in per_run])) for k in ("within_10", "kendall_tau")
            }
        return out

    def evaluate(self, terms: set[str]) -> dict:
        """The mean score of the two refits (before, after) with `terms`, and each refit's."""
        frozen = frozenset(terms)
        if frozen not in self.cache:
            kernels = self.kernels
            if "trees" not in terms:
                kernels = dataclasses.replace(kernels, predictors={})
            if "dispatch" not in terms:
                kernels = dataclasses.replace(kernels, dispatch_s=0.0)
            fits = {
                w: self.score(self.fit(kernels, t, terms), terms)
                for w, t in self.glue_timings.items()
            }
            mean = {
                q: {k: float(np.mean([f[q][k] for f in fits.values()])) for k in fits["before"][q]}
                for q in QUANTITIES
            }
            self.cache[frozen] = {"mean": mean, "refits": fits}
        return self.cache[frozen]


def spread(ceiling: dict) -> dict:
    """The mean absolute difference of each score between consecutive calibrations (`PAIRS`)."""
    out = {}
    for q in QUANTITIES:
        out[q] = {
            k: float(
                np.mean(
                    [
                        abs(
                            ceiling["devices"][a][q]["mean"][k]
                            - ceiling["devices"][b][q]["mean"][k]
                        )
                        for a, b in PAIRS
                    ]
                )
            )
            for k in ("within_10", "kendall_tau")
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--probe-byte-s", type=float, default=3.0e-11)
    ap.add_argument("--out", default=str(RESULTS / "latency_ablation.json"))
    args = ap.parse_args()
    ceiling = json.loads((RESULTS / "latency_ceiling.json").read_text())
    limit = spread(ceiling)
    ablation = Ablation(args.probe_byte_s)
    state = set(TERMS)
    rounds = []
    while True:
        base = ablation.evaluate(state)
        removals = {}
        for term in sorted(state):
            without = ablation.evaluate(state - {term} - DEPENDS.get(term, set()))
            drop = {
                q: {k: base["mean"][q][k] - without["mean"][q][k] for k in base["mean"][q]}
                for q in QUANTITIES
            }
            cost = max(drop[q]["within_10"] / limit[q]["within_10"] for q in QUANTITIES)
            removals[term] = {"drop": drop, "cost": cost, "without": without}
        rounds.append({"terms": sorted(state), "score": base, "removals": removals})
        print(
            f"with {', '.join(sorted(state))}: "
            + ", ".join(
                f"{q} within +-10% {base['mean'][q]['within_10']:.3f} tau "
                f"{base['mean'][q]['kendall_tau']:.3f}"
                for q in QUANTITIES
            )
        )
        for term, r in sorted(removals.items(), key=lambda kv: kv[1]["cost"]):
            print(
                f"  without {term:9s} TTFT {-r['drop']['ttft']['within_10']:+.3f} "
                f"decode {-r['drop']['decode']['within_10']:+.3f} (cost {r['cost']:.2f} spreads)"
            )
        term, cheapest = min(removals.items(), key=lambda kv: kv[1]["cost"])
        if cheapest["cost"] >= 1.0:
            break
        state -= {term} | DEPENDS.get(term, set())
    full = ablation.evaluate(set(TERMS))
    table = {}  # each term at the round it was decided: removed there, or kept at the last
    for i, r in enumerate(rounds):
        last = i == len(rounds) - 1
        for term, removal in r["removals"].items():
            if term in table or not (last or term not in rounds[i + 1]["terms"]):
                continue
            table[term] = {
                "decision": "kept" if last else "removed",
                "round": i + 1,
                **{
                    q: {f"{k}_change": -v for k, v in removal["drop"][q].items()}
                    for q in QUANTITIES
                },
                "cost_in_spreads": removal["cost"],
            }
    result = {
        "table": table,
        "terms": TERMS,
        "spread": {"pairs": PAIRS, **limit},
        "kept": sorted(state),
        "removed": sorted(set(TERMS) - state),
        "today": full["mean"],
        "kept_score": rounds[-1]["score"]["mean"],
        "ceiling": {q: ceiling["ceiling"][q]["mean"] for q in QUANTITIES},
        "rounds": rounds,
        "probe_byte_s": args.probe_byte_s,
        "runs": RUNS,
    }
    print(
        f"kept {', '.join(sorted(state))}; removed {', '.join(result['removed'])}; spread "
        + ", ".join(f"{q} {limit[q]['within_10']:.3f}" for q in QUANTITIES)
    )
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
