"""Does the +- a calibrated profile states hold? The 90th percentile of its held-out errors
against its upper 90%-confidence bound (`latency.calibrate.fit.p90_bound`), over saved runs.

A calibration's `validation` is estimated from 49-52 held-out predictions (twelve held-out
models and the glue models, each left out of the model-level fit); each latency then carries
that figure (decode's by the working set of its step). This prices every saved run of
`bench_latency_accuracy.py` (`--runs`: its held-out architectures timed at another hour, not
seen by any calibration) on every calibration (`--calibration NAME=RAW.json`: the profile
NAME in the device folder, and the JSON `archsearch calibrate ... format=json` printed, whose
`raw` part keeps the held-out predictions it pooled), with the validation rebuilt twice from
them (`latency.calibrate.refit`): the `p90` alone (as profiles stated before bounds) and with
its `bound`. Per pair, the share of held-out architectures inside their own +- (a 90th
percentile promises 90%; the bound, at least 90% nine times in ten) and the mean +-. No
timing: a second or two per pair.

    ARCHSEARCH_DEVICE_DIR=DIR python benchmarks/bench_error_bound.py \\
        --calibration epyc27x=x.json epyc27y=y.json --runs x_bench.json y_bench.json

Printed and saved (`--out`, default results/error_bound.json).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from archsearch.cost.devices import DeviceProfile, parse_device
from archsearch.latency import load_device
from archsearch.latency.calibrate import refit

sys.path.insert(0, str(Path(__file__).parent))
from bench_latency_accuracy import cases, predict

RULES = ("p90", "bound")


def with_validation(dev: DeviceProfile, validation: dict, rule: str) -> DeviceProfile:
    """`dev` with its fp32 checks replaced by `validation` (`calibrate.fit.pooled_check`), their
    bounds dropped for `rule` p90."""
    entries = copy.deepcopy(validation)
    if rule == "p90":
        for entry in entries.values():
            entry.pop("bound")
            entry.get("by_working_set", {}).pop("bound", None)
    base = {"name": dev.name, "peak_flops": dev.peak_flops, "memory_bandwidth": 1.0}
    raw = {**base, "memory_capacity": 1.0, "validation": entries}
    fp32 = parse_device(raw, source=dev.name, default_name=dev.name).validation
    checks = {q: (fp32[q][0], *dev.validation[q][1:]) for q in fp32}
    return dataclasses.replace(dev, validation=checks)


def coverage(dev: DeviceProfile, rows: list[dict], archs: dict) -> dict[str, dict[str, float]]:
    rows = copy.deepcopy(rows)
    for r in rows:
        predict(r, archs[r["summary"]], dev)
    out = {}
    for q in ("ttft", "decode"):
        err = np.array([abs(r[f"{q}_pred_ms"] / r[f"{q}_ms"] - 1) for r in rows])
        stated = np.array([r[f"{q}_error"] for r in rows])
        out[q] = {"inside": float(np.mean(err <= stated)), "stated": float(np.mean(stated))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calibration", nargs="+", required=True, help="NAME=RAW.json")
    ap.add_argument("--runs", nargs="+", required=True, help="saved bench_latency_accuracy runs")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "error_bound.json"))
    args = ap.parse_args()
    archs = {a.summary(): a for _, a, _ in cases(3)}
    runs = {Path(p).name: json.loads(Path(p).read_text())["rows"] for p in args.runs}
    pairs = []
    for spec in args.calibration:
        name, raw_path = spec.split("=", 1)
        dev = load_device(name)
        raw = json.loads(Path(raw_path).read_text())["raw"]
        validation = {q: checks[0] for q, checks in refit(raw)[1].items()}
        for rule in RULES:
            stated = with_validation(dev, validation, rule)
            for run, rows in runs.items():
                pairs.append(
                    {"calibration": name, "rule": rule, "run": run, **coverage(stated, rows, archs)}
                )
            fig = [p for p in pairs if p["calibration"] == name and p["rule"] == rule]
            line = f"{name:10s} {rule:6s}"
            for q in ("ttft", "decode"):
                inside = [p[q]["inside"] for p in fig]
                line += (
                    f" | {q} inside {np.mean(inside):.0%} (runs "
                    + " ".join(f"{x:.0%}" for x in inside)
                    + f"), mean +-{np.mean([p[q]['stated'] for p in fig]):.1%}"
                )
            print(line, flush=True)
    summary = {}
    for rule in RULES:
        fig = [p for p in pairs if p["rule"] == rule]
        summary[rule] = {
            q: {
                "inside_mean": float(np.mean([p[q]["inside"] for p in fig])),
                "inside_min": float(np.min([p[q]["inside"] for p in fig])),
                "stated_mean": float(np.mean([p[q]["stated"] for p in fig])),
            }
            for q in ("ttft", "decode")
        }
        s = summary[rule]
        print(
            f"{rule:6s} over {len(fig)} pairs: "
            + ", ".join(
                f"{q} inside {s[q]['inside_mean']:.1%} (lowest {s[q]['inside_min']:.0%}), mean "
                f"+-{s[q]['stated_mean']:.1%}"
                for q in ("ttft", "decode")
            )
        )
    Path(args.out).write_text(json.dumps({"summary": summary, "pairs": pairs}, indent=1))
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
