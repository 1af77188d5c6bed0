"""How close can any latency predictor come on this machine? The ceiling of saved runs of
`bench_latency_accuracy.py`, beside the profiles priced on the same timings.

Every run times the same held-out architectures at the same settings, at another hour. A
predictor fixed before a run (a calibrated profile) cannot know that run's moment: the
machine's speed, its share of a shared cache, its neighbours. The ceiling is the predictor
that knows everything else: each architecture's timing in a run is predicted by the median of
its timings in the other runs (leave one run out). Its share within +-10% is what a perfect
model of this machine's typical speed would score; a profile below it has error of its own
to remove, and the gap between the ceiling and 100% is the machine's (the same reading across
hours as the benchmark's `retest` within a run). `at_run_speed` scales the ceiling's
predictions of a run by that run's median measured / predicted: what is left when the whole
machine's change of speed is known too (architecture-specific change only).

`--device NAME ...` prices every run's timings on each profile as well (as `--rescore` does),
so the ceiling and the profiles are read on one set of measurements; `--ensemble` adds the
geometric mean of their predictions (several calibrations averaged: what is left of a
profile's error once calibration-to-calibration variance is averaged out). Each profile is
also read against each architecture's `typical` time, the median of its timings over all the
runs: the machine's moment averaged out of the yardstick, so what is left is the profile's
own error (with the bias per family and the architectures outside +-10%). `--subsets K`
reads every ensemble of K of the `--device` profiles against the typical times: how many
calibrations an averaged profile needs, and how often K of them meet the accuracy targets
(>= 95% within +-10%, tau >= 0.95, no family biased beyond +-5%).

    python benchmarks/bench_latency_ceiling.py --runs results/latency_accuracy*.json \\
        --device local

Printed and saved (`--out`, default results/latency_ceiling.json): per run and as a mean
over runs, for TTFT and decode, the share within +-5/10/20%, MAPE and Kendall's tau; per
profile, the same against the typical times, with its bias per family.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import sys
from pathlib import Path

import numpy as np

from archsearch.latency import load_device

sys.path.insert(0, str(Path(__file__).parent))
from bench_latency_accuracy import bias_by_family, cases, figures, predict

QUANTITIES = ("ttft", "decode")


def key(row: dict) -> tuple:
    return row["summary"], row["prompt"], row["context"], row["batch"]


def ceiling(timings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per run (rows of `timings`: runs x architectures), the leave-one-run-out median of the
    other runs' timings, and the same scaled by the run's median measured / predicted."""
    loo = np.array([np.median(np.delete(timings, i, axis=0), axis=0) for i in range(len(timings))])
    speed = np.median(timings / loo, axis=1, keepdims=True)
    return loo, loo * speed


def mean_of(per_run: list[dict[str, float]]) -> dict[str, float]:
    return {k: float(np.mean([r[k] for r in per_run])) for k in per_run[0]}


def against_typical(typical: np.ndarray, predicted: np.ndarray, rows: list[dict]) -> dict:
    """A profile's figures against each architecture's typical time (`rows`: one run's rows,
    for their family and name): the five figures, the bias per family (mean signed relative
    error, %) and the architectures outside +-10% (largest error first)."""
    err = predicted / typical - 1
    outside = sorted(np.flatnonzero(np.abs(err) > 0.10), key=lambda j: -abs(err[j]))
    return {
        **figures(typical, predicted),
        "bias_percent_by_family": bias_by_family(err, [r["family"] for r in rows]),
        "outside_10": [
            {
                **{k: rows[j][k] for k in ("summary", "prompt", "context", "batch")},
                "error_percent": float(100 * err[j]),
            }
            for j in outside
        ],
    }


def subsets(typical: np.ndarray, predictions: list[np.ndarray], k: int, rows: list[dict]) -> dict:
    """Every ensemble of `k` of `predictions` (geometric mean) against the typical times: the
    median and least share within +-10%, the median tau and largest family bias, and the
    share of ensembles that meet all three targets."""
    reads = []
    for chosen in itertools.combinations(predictions, k):
        got = against_typical(typical, np.exp(np.mean(np.log(chosen), axis=0)), rows)
        worst = max(abs(b) for b in got["bias_percent_by_family"].values())
        reads.append((got["within_10"], got["kendall_tau"], worst))
    within, tau, bias = np.array(reads).T
    return {
        "ensembles": len(reads),
        "within_10_median": float(np.median(within)),
        "within_10_least": float(within.min()),
        "kendall_tau_median": float(np.median(tau)),
        "largest_family_bias_percent_median": float(np.median(bias)),
        "meet_targets": float(np.mean((within >= 0.95) & (tau >= 0.95) & (bias <= 5.0))),
    }


def priced(dev, by_key: list[dict], keys: list[tuple]) -> np.ndarray:
    """[runs, architectures, 2]: each run's held-out architectures priced on `dev` (ms: TTFT,
    decode), as `bench_latency_accuracy.py --rescore` prices them."""
    archs = {arch.summary(): arch for _, arch, _ in cases(3)}
    out = np.zeros((len(by_key), len(keys), 2))
    for i, rows in enumerate(by_key):
        for j, k in enumerate(keys):
            row = copy.deepcopy(rows[k])
            predict(row, archs[row["summary"]], dev)
            out[i, j] = row["ttft_pred_ms"], row["decode_pred_ms"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", nargs="+", required=True, help="saved bench_latency_accuracy runs")
    ap.add_argument("--device", nargs="*", default=[], help="profiles to price the runs on")
    ap.add_argument(
        "--ensemble",
        action="store_true",
        help="also the geometric mean of the --device profiles' predictions",
    )
    ap.add_argument(
        "--out", default=str(Path(__file__).parent / "results" / "latency_ceiling.json")
    )
    ap.add_argument(
        "--subsets",
        type=int,
        help="also every ensemble of this many --device profiles, against the typical times",
    )
    args = ap.parse_args()
    if len(args.runs) < 3:
        ap.error("--runs: at least three runs (a median of the others needs two)")
    if args.ensemble and len(args.device) < 2:
        ap.error("--ensemble: at least two --device profiles")
    if args.subsets is not None and not 1 <= args.subsets <= len(args.device):
        ap.error(f"--subsets: between 1 and the {len(args.device)} --device profiles")
    runs = [json.loads(Path(p).read_text()) for p in args.runs]
    if any(r.get("precision", "fp32") != "fp32" for r in runs):
        ap.error("--runs: fp32 runs only (the kernel predictor's precision)")
    keys = [key(r) for r in runs[0]["rows"]]
    by_key = [{key(r): r for r in run["rows"]} for run in runs]
    for path, rows in zip(args.runs, by_key):
        if set(rows) != set(keys):
            ap.error(f"--runs: {path} timed other architectures or settings than {args.runs[0]}")
    predictions = {name: priced(load_device(name), by_key, keys) for name in args.device}
    single = list(predictions.values())
    if args.ensemble:
        logs = np.log(np.array(list(predictions.values())))
        predictions[f"ensemble of {len(args.device)}"] = np.exp(logs.mean(axis=0))
    result: dict = {"runs": args.runs, "architectures": len(keys), "ceiling": {}, "devices": {}}
    for i, q in enumerate(QUANTITIES):
        timings = np.array([[rows[k][f"{q}_ms"] for k in keys] for rows in by_key])
        loo, at_speed = ceiling(timings)
        per_run = [figures(t, p) for t, p in zip(timings, loo)]
        scaled = [figures(t, p) for t, p in zip(timings, at_speed)]
        result["ceiling"][q] = {
            "mean": mean_of(per_run),
            "at_run_speed": mean_of(scaled),
            "per_run": per_run,
        }
        typical = np.median(timings, axis=0)
        rows = [by_key[0][k] for k in keys]
        if args.subsets is not None:
            each = [np.median(p[:, :, i], axis=0) for p in single]
            result.setdefault("subsets", {"k": args.subsets})[q] = subsets(
                typical, each, args.subsets, rows
            )
        for name, pred in predictions.items():
            scores = [figures(t, p[:, i]) for t, p in zip(timings, pred)]
            entry = result["devices"].setdefault(name, {})
            entry[q] = {
                "mean": mean_of(scores),
                "per_run": scores,
                "typical": against_typical(typical, np.median(pred[:, :, i], axis=0), rows),
            }
    print(f"{len(runs)} runs of {len(keys)} held-out architectures")
    for q in QUANTITIES:
        c = result["ceiling"][q]
        lines = [("ceiling (median of the other runs)", c["mean"], c["per_run"])]
        lines.append(("ceiling at the run's speed", c["at_run_speed"], None))
        lines += [(name, d[q]["mean"], d[q]["per_run"]) for name, d in result["devices"].items()]
        for label, m, per_run in lines:
            runs_10 = " ".join(f"{r['within_10']:.0%}" for r in per_run) if per_run else ""
            print(
                f"{q:6s} {label:36s} within +-5/10/20% {m['within_5']:.1%}/{m['within_10']:.1%}/"
                f"{m['within_20']:.1%}, MAPE {m['mape_percent']:.1f}%, tau {m['kendall_tau']:.3f}"
                + (f"  (+-10% per run: {runs_10})" if runs_10 else "")
            )
        for name, d in result["devices"].items():
            t = d[q]["typical"]
            bias = t["bias_percent_by_family"]
            lo, hi = min(bias, key=bias.get), max(bias, key=bias.get)
            print(
                f"{q:6s} {name + ' against typical times':36s} within +-5/10/20% "
                f"{t['within_5']:.1%}/{t['within_10']:.1%}/{t['within_20']:.1%}, MAPE "
                f"{t['mape_percent']:.1f}%, tau {t['kendall_tau']:.3f}; family bias "
                f"{bias[lo]:+.1f}% ({lo}) .. {bias[hi]:+.1f}% ({hi}); outside +-10%: "
                + (
                    ", ".join(
                        f"{o['summary']} @{o['prompt']}/{o['context']}/b{o['batch']} "
                        f"{o['error_percent']:+.0f}%"
                        for o in t["outside_10"]
                    )
                    or "none"
                )
            )
        if "subsets" in result:
            sub = result["subsets"][q]
            print(
                f"{q:6s} every ensemble of {args.subsets} ({sub['ensembles']}) against typical "
                f"times: within +-10% median {sub['within_10_median']:.1%} (least "
                f"{sub['within_10_least']:.1%}), tau median {sub['kendall_tau_median']:.3f}, "
                f"largest family bias median {sub['largest_family_bias_percent_median']:.1f}%; "
                f"all three targets met by {sub['meet_targets']:.0%}"
            )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
