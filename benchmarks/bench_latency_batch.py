"""How well does a calibrated profile price a decode step on several sequences? By batch, for
every recorded calibration: its own glue models (the whole models its memory terms are fitted
to: in sample) and the held-out architectures of saved runs (out of sample).

No timing: each calibration's raw timings (`archsearch calibrate format=json`) are refitted
(`calibrate.refit`) and priced. Per batch: the median of predicted / measured and the share
within +-10%, for the decode step and, beside it, TTFT; the mean over calibrations, and the
least and most of their medians (a bias every calibration shares is the predictor's, not an
hour's).

Each calibration is read twice, with the weights' passes on B rows (`predict.Passes`, from
its passes probe) and with one pass (`without=("passes",)`: the predictor before the probe),
side by side; `--passes-from RAW.json` lends a calibration's probe to the recorded ones timed
before it (the same machine's BLAS).

With `--time-rows [RUNTIME ...]` it also times, on this machine, a linear layer of weights that
do not fit the cache (cycled through copies of 160 MiB in all) at 1-16 rows, one thread, in each
runtime named (torch, onnxruntime, executorch; none named: torch): how a decode step's weight
GEMMs scale with the batch when their weights come from memory (the kernels are timed from the
cache), as seconds per call and a ratio to one row. Without `--calibration` it times only that.

    python benchmarks/bench_latency_batch.py --calibration A=a.json B=b.json \\
        --runs results/latency_accuracy*.json --passes-from c.json
    python benchmarks/bench_latency_batch.py --time-rows torch onnxruntime executorch \\
        --out results/latency_batch_rows.json
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import numpy as np

from archsearch.latency.calibrate.models import timed_models

sys.path.insert(0, str(Path(__file__).parent))
from bench_latency_ablation import QUANTITIES, variant
from bench_latency_accuracy import cases, predict


def figures(ratios: list[float]) -> dict:
    r = np.asarray(ratios, dtype=np.float64)
    return {"median": float(np.median(r)), "within_10": float(np.mean(np.abs(r - 1) <= 0.10))}


def by_batch(ratios: dict[int, dict[str, list[float]]]) -> dict[int, dict]:
    """Per batch and quantity, the `figures` of its ratios and their count."""
    return {b: {q: figures(r) | {"n": len(r)} for q, r in qs.items()} for b, qs in ratios.items()}


def keyed(per: dict[str, dict]) -> dict[str, dict]:
    """Per calibration, where and batch (a string: a JSON key), as saved."""
    return {k: {w: {str(b): v for b, v in x.items()} for w, x in c.items()} for k, c in per.items()}


def in_sample(saved: dict, device) -> dict[int, dict]:
    """Per batch, predicted / measured of the calibration's glue models (phase by quantity)."""
    out: dict[int, dict] = {}
    entries = saved["raw"]["glue"]
    for e, model in zip(entries, timed_models(entries)):
        ratio = np.asarray(model.predicted(device)) / np.asarray(e["measured_s"])
        for q, r in zip(QUANTITIES, ratio):
            out.setdefault(e["batch"], {}).setdefault(q, []).append(float(r))
    return by_batch(out)


def held_out(device, runs: list[list[dict]], archs: dict) -> dict[int, dict]:
    """Per batch, predicted / measured of the held-out runs' architectures (every run)."""
    out: dict[int, dict] = {}
    for rows in runs:
        for r in copy.deepcopy(rows):
            predict(r, archs[r["summary"]], device)
            for q in QUANTITIES:
                ratio = r[f"{q}_pred_ms"] / r[f"{q}_ms"]
                out.setdefault(r["batch"], {}).setdefault(q, []).append(ratio)
    return by_batch(out)


def time_rows(
    runtime: str = "torch",
    shapes=((4096, 4096), (1024, 2752), (512, 1408)),
    rows=(1, 2, 3, 4, 6, 8, 16),
) -> dict:
    """Per (in, out) weight shape: the least of five passes of seconds per call at each row
    count, one thread, every call on another copy of the weights (copies of 160 MiB in all),
    each copy run in `runtime` (`archsearch.runtimes.prepare`)."""
    import time

    import torch

    from archsearch.runtimes import prepare

    torch.set_num_threads(1)
    out = {}
    for k, n in shapes:
        copies = [
            torch.nn.Linear(k, n, bias=False) for _ in range(max(2, 160 * 2**20 // (4 * k * n)))
        ]
        seconds = {}
        for m in rows:
            x = torch.randn(m, k)
            calls = [prepare(runtime, layer, (x,), threads=1) for layer in copies]
            for call in calls:
                call()
            best = float("inf")
            for _ in range(5):
                t = time.perf_counter()
                for call in calls:
                    call()
                best = min(best, (time.perf_counter() - t) / len(calls))
            seconds[str(m)] = best
        out[f"{k}x{n}"] = {
            "mib": 4 * k * n / 2**20,
            "copies": len(copies),
            "seconds": seconds,
            "over_one_row": {m: t / seconds["1"] for m, t in seconds.items()},
        }
        ratios = out[f"{k}x{n}"]["over_one_row"].items()
        print(f"{runtime} {k}x{n}: x one row " + ", ".join(f"{m}: {r:.2f}" for m, r in ratios))
    return out


def over_calibrations(per: dict[str, dict], where: str) -> dict:
    """Per batch and quantity: the mean over calibrations of each figure, and the range of
    their medians."""
    batches = sorted({b for c in per.values() for b in c[where]})
    out = {}
    for b in batches:
        got = [c[where][b] for c in per.values() if b in c[where]]
        out[str(b)] = {
            q: {
                "median": float(np.mean([g[q]["median"] for g in got])),
                "within_10": float(np.mean([g[q]["within_10"] for g in got])),
                "least_median": float(min(g[q]["median"] for g in got)),
                "most_median": float(max(g[q]["median"] for g in got)),
                "n": got[0][q]["n"],
            }
            for q in QUANTITIES
        }
    return out


def better(per: dict[str, dict], one_pass: dict[str, dict]) -> dict:
    """Per batch, held out: how many calibrations read decode within +-10% more often with
    their passes than with one pass, how many less, and the mean change (points)."""
    out = {}
    for b in sorted({b for c in per.values() for b in c["held_out"]}):
        change = [
            per[k]["held_out"][b]["decode"]["within_10"]
            - one_pass[k]["held_out"][b]["decode"]["within_10"]
            for k in per
            if b in per[k]["held_out"]
        ]
        out[str(b)] = {
            "better": sum(c > 1e-9 for c in change),
            "worse": sum(c < -1e-9 for c in change),
            "mean_change": float(np.mean(change)),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calibration", nargs="+", help="NAME=RAW.json")
    ap.add_argument("--runs", nargs="+", help="saved bench_latency_accuracy runs")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results/latency_batch.json"))
    ap.add_argument(
        "--passes-from", help="RAW.json whose passes probe calibrations without one use"
    )
    ap.add_argument(
        "--time-rows",
        nargs="*",
        metavar="RUNTIME",
        help="time a linear layer at 1-16 rows in these runtimes (none named: torch)",
    )
    args = ap.parse_args()
    if not args.calibration and args.time_rows is None:
        ap.error("nothing to do: give --calibration and --runs, or --time-rows")
    if args.calibration and not args.runs:
        ap.error("--calibration needs --runs: the saved runs to read the calibrations on")
    rows = (
        {rt: time_rows(rt) for rt in args.time_rows or ["torch"]}
        if args.time_rows is not None
        else None
    )
    if not args.calibration:
        saved = {"command": " ".join(sys.argv), "rows": rows}
        Path(args.out).write_text(json.dumps(saved, indent=1))
        print("saved", args.out)
        return
    archs = {a.summary(): a for _, a, _ in cases(3)}
    runs = [json.loads(Path(p).read_text())["rows"] for p in args.runs]
    lent = json.loads(Path(args.passes_from).read_text())["raw"] if args.passes_from else {}
    per: dict[str, dict] = {}
    one_pass: dict[str, dict] = {}
    for item in args.calibration:
        name, _, path = item.partition("=")
        saved = json.loads(Path(path).read_text())
        saved["raw"]["passes"] = saved["raw"].get("passes") or lent.get("passes")
        for into, without in ((per, ()), (one_pass, ("passes",))):
            device = variant(saved, without)
            glue, held = in_sample(saved, device), held_out(device, runs, archs)
            into[name] = {"glue": glue, "held_out": held}
        print(name, flush=True)
    summary = {where: over_calibrations(per, where) for where in ("glue", "held_out")}
    before = {where: over_calibrations(one_pass, where) for where in ("glue", "held_out")}
    for b, qs in before["held_out"].items():
        d = qs["decode"]
        print(f"one pass held_out batch {b}: decode {d['median']:.3f}, {d['within_10']:.1%}")
    for where, batches in summary.items():
        for b, qs in batches.items():
            d = qs["decode"]
            print(
                f"{where:8s} batch {b}: decode predicted/measured {d['median']:.3f} "
                f"(calibrations {d['least_median']:.3f}-{d['most_median']:.3f}), "
                f"within +-10% {d['within_10']:.1%}; TTFT {qs['ttft']['median']:.3f}, "
                f"{qs['ttft']['within_10']:.1%}"
            )
    saved = {
        "command": " ".join(sys.argv),
        "calibrations": keyed(per),
        "runs": args.runs,
        "summary": summary,
        "one_pass": {"calibrations": keyed(one_pass), "summary": before},
        "better": better(per, one_pass),
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(saved, indent=1))
    print("saved", args.out)


if __name__ == "__main__":
    main()
