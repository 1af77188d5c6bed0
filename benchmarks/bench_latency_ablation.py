"""Which terms of the learned latency predictor earn their place? Each one left out in turn, the
predictor refitted from a calibration's raw timings, scored on held-out runs.

No timing: every figure is a refit (`archsearch.latency.calibrate.refit`) of the raw timings
that `archsearch calibrate format=json` printed, priced on the held-out architectures that saved
runs of `bench_latency_accuracy.py` timed. For each calibration and each term of
`calibrate.fit.TERMS` (the boosted trees, the working-set stalls, the per-layer miss, overlap),
the predictor is refitted without it and each run scored (share within +-10%, Kendall's tau,
TTFT and decode), the mean over runs. The roofline's half-precision factors (what prices fp16
on a calibrated profile) are scored on the calibration's own held-out bf16 check, with them and
without them, against the spread of that check between the calibrations. A term stays if
leaving it out costs more than the spread of the same score between the calibrations (two
calibrations of the same hour: the variance of calibration itself, which no term can beat).

    python benchmarks/bench_latency_ablation.py --calibration A=a.json B=b.json \\
        --runs run.json --out results/latency_ablation_fresh.json

The terms the ablation on recorded timings removed left the code with it
(results/latency_ablation.json, written by this script's earlier form).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import numpy as np

from archsearch.cost.devices import parse_device
from archsearch.latency.calibrate import refit
from archsearch.latency.calibrate.fit import TERMS
from archsearch.latency.calibrate.models import timed_models
from archsearch.latency.calibrate.roofline import HALF
from archsearch.latency.profile import parse_profile

sys.path.insert(0, str(Path(__file__).parent))
from bench_latency_accuracy import cases, figures, predict

QUANTITIES = ("ttft", "decode")


def score(device, runs: list[list[dict]], archs: dict) -> dict:
    """The mean over runs of each quantity's share within +-10% and Kendall's tau."""
    out = {q: {"within_10": [], "kendall_tau": []} for q in QUANTITIES}
    for rows in runs:
        rows = copy.deepcopy(rows)
        for r in rows:
            predict(r, archs[r["summary"]], device)
        for q in QUANTITIES:
            got = figures(
                np.array([r[f"{q}_ms"] for r in rows]), np.array([r[f"{q}_pred_ms"] for r in rows])
            )
            for k in out[q]:
                out[q][k].append(got[k])
    return {q: {k: float(np.mean(v)) for k, v in figs.items()} for q, figs in out.items()}


def variant(saved: dict, without: tuple[str, ...]):
    """The calibration's profile with its predictor refitted without `without`."""
    predictor, _ = refit(saved["raw"], without)
    device = parse_profile(saved["profile"], source="calibration", default_name="calibration")
    return device.with_predictor(predictor)


def spread(values: list[float]) -> float:
    """The mean absolute difference over every pair of calibrations' figures."""
    return float(np.mean([abs(a - b) for i, a in enumerate(values) for b in values[i + 1 :]]))


def verdict(change: dict[str, float], spreads: dict[str, float]) -> dict:
    """A term's cost in spreads (the larger over the quantities of its loss over their
    spread) and whether it stays (a cost above one spread)."""
    cost = max(-change[q] / max(spreads[q], 1e-9) for q in QUANTITIES)
    return {"cost_in_spreads": cost, "decision": "keep" if cost > 1 else "remove"}


def half_check(saved: dict) -> dict:
    """The half precision's held-out check (the calibration's bf16 timings of held-out models)
    priced by the roofline with the factors the calibration fitted, and with them left out
    (compute and vector efficiency 1, no overhead per operator): share within +-10% per
    quantity."""
    header = {k: v for k, v in saved["profile"].items() if k != "predictor"}
    plain = copy.deepcopy(header)
    plain["efficiency"][HALF].update(compute=1.0, vector=1.0, op_overhead_s=0.0)
    rows = saved["raw"]["half"]["check"]
    out = {}
    models = timed_models(rows)
    measured = np.array([r["measured_s"] for r in rows])
    for name, profile in (("fitted", header), ("left_out", plain)):
        device = parse_device(profile, source="calibration", default_name="c", learned=True)
        err = np.array([m.predicted(device, HALF) for m in models]) / measured - 1
        out[name] = {q: float(np.mean(np.abs(err[:, i]) <= 0.1)) for i, q in enumerate(QUANTITIES)}
    return out


def half_row(halves: dict[str, dict]) -> dict:
    """The half-precision factors' row of the table: their change and its cost in spreads of
    the fitted check between the calibrations."""
    spreads = {q: spread([h["fitted"][q] for h in halves.values()]) for q in QUANTITIES}
    change = {
        q: float(np.mean([h["left_out"][q] - h["fitted"][q] for h in halves.values()]))
        for q in QUANTITIES
    }
    return {
        "spread": spreads,
        **{q: {"within_10_change": change[q]} for q in QUANTITIES},
        **verdict(change, spreads),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calibration", nargs="+", required=True, help="NAME=RAW.json, two or more")
    ap.add_argument("--runs", nargs="+", required=True, help="saved bench_latency_accuracy runs")
    ap.add_argument(
        "--out", default=str(Path(__file__).parent / "results" / "latency_ablation_fresh.json")
    )
    args = ap.parse_args()
    if len(args.calibration) < 2:
        ap.error("--calibration: at least two (their spread is the yardstick)")
    archs = {a.summary(): a for _, a, _ in cases(3)}
    runs = [json.loads(Path(p).read_text())["rows"] for p in args.runs]
    scores: dict[str, dict] = {}
    halves: dict[str, dict] = {}
    for spec in args.calibration:
        name, path = spec.split("=", 1)
        saved = json.loads(Path(path).read_text())
        halves[name] = half_check(saved)
        scores[name] = {
            t: score(variant(saved, (t,) if t else ()), runs, archs) for t in ("", *TERMS)
        }
        print(
            f"{name}: every term "
            + ", ".join(f"{q} {scores[name][''][q]['within_10']:.3f}" for q in QUANTITIES),
            flush=True,
        )
    names = list(scores)
    spreads = {
        q: {k: spread([scores[n][""][q][k] for n in names]) for k in ("within_10", "kendall_tau")}
        for q in QUANTITIES
    }
    table = {}
    for term in TERMS:
        change = {
            q: {
                f"{k}_change": float(
                    np.mean([scores[n][term][q][k] - scores[n][""][q][k] for n in names])
                )
                for k in ("within_10", "kendall_tau")
            }
            for q in QUANTITIES
        }
        table[term] = {
            **change,
            **verdict(
                {q: change[q]["within_10_change"] for q in QUANTITIES},
                {q: spreads[q]["within_10"] for q in QUANTITIES},
            ),
        }
        print(
            f"without {term:8s} "
            + ", ".join(f"{q} {change[q]['within_10_change']:+.3f}" for q in QUANTITIES)
            + f" ({table[term]['cost_in_spreads']:.2f} spreads)"
        )
    table["half factors"] = half_row(halves)
    print(
        "without the half precision's fitted factors (its bf16 check): "
        + ", ".join(f"{q} {table['half factors'][q]['within_10_change']:+.3f}" for q in QUANTITIES)
        + f" ({table['half factors']['cost_in_spreads']:.2f} spreads of the fitted check)"
    )
    result = {
        "calibrations": args.calibration,
        "runs": args.runs,
        "spread": spreads,
        "scores": scores,
        "half": halves,
        "table": table,
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(
        "spread "
        + ", ".join(f"{q} {spreads[q]['within_10']:.3f}" for q in QUANTITIES)
        + f"; saved {args.out}"
    )


if __name__ == "__main__":
    main()
