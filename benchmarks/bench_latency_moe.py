"""Why is a mixture of experts' prefill priced slow? The held-out MoE models' TTFT on every
recorded calibration, with the `moe` kernel's correction trees and without them, and the `moe`
kernel timed alone at those models' prefill shapes against each calibration's fit of it.

No whole model is timed: each calibration's raw timings (`archsearch calibrate format=json`)
are refitted (`calibrate.refit`) and the saved runs priced, as `bench_latency_batch.py` does.
Per calibration: the MoE models' TTFT, predicted / measured (median) and the share within
+-10%, and every model's TTFT and decode within +-10%, as fitted and with the `moe` kernel
priced by its learned roofline alone (its trees dropped). Then the `moe` kernel (one layer,
built as a model builds it, the least of its samples, one thread) at each held-out MoE model's
prefill shape (its width, experts, top-k, shared experts and expert width, at batch x prompt
tokens), and each calibration's price of it, with and without the trees.

    python benchmarks/bench_latency_moe.py --calibration A=a.json B=b.json \\
        --runs results/latency_accuracy*.json --out results/latency_moe.json
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from archsearch.cost.ops import Columns, Phase
from archsearch.latency.calibrate import timing
from archsearch.latency.calibrate.plan import plan
from archsearch.latency.predict import KernelFit

sys.path.insert(0, str(Path(__file__).parent))
from bench_latency_ablation import variant
from bench_latency_accuracy import cases, predict
from bench_latency_batch import figures


def without_moe_trees(device):
    """`device` with its `moe` kernel priced by the learned roofline alone."""
    p = device.predictor
    fit = p.kernels["moe"]
    kernels = {**p.kernels, "moe": KernelFit(fit.base, None, fit.samples)}
    return device.with_predictor(dataclasses.replace(p, kernels=kernels))


def scores(device, runs: list[list[dict]], archs: dict) -> dict:
    """MoE TTFT (median ratio, within +-10%), and every model's TTFT and decode within +-10%."""
    moe, ttft, decode = [], [], []
    for rows in runs:
        for r in copy.deepcopy(rows):
            predict(r, archs[r["summary"]], device)
            ttft.append(r["ttft_pred_ms"] / r["ttft_ms"])
            decode.append(r["decode_pred_ms"] / r["decode_ms"])
            if archs[r["summary"]].moe is not None:
                moe.append(ttft[-1])
    moe_figures = figures(moe)
    return {
        "moe_ttft_ratio": moe_figures["median"],
        "moe_ttft_within_10": moe_figures["within_10"],
        "ttft_within_10": figures(ttft)["within_10"],
        "decode_within_10": figures(decode)["within_10"],
    }


def moe_shapes(runs: list[list[dict]], archs: dict) -> list[dict]:
    """The held-out MoE models' prefill shapes, as the `moe` kernel's values (tokens: N)."""
    shapes = {}
    for rows in runs:
        for r in rows:
            a = archs[r["summary"]].resolved()
            if a.moe is not None:
                m = a.moe
                v = dict(d=a.d_model, E=m.n_experts, topk=m.top_k, S=m.n_shared)
                v.update(mult=m.d_expert / a.d_model, N=r["batch"] * r["prompt"])
                shapes[json.dumps(v, sort_keys=True)] = v
    return list(shapes.values())


def time_moe(v: dict) -> float:
    """Seconds of the `moe` kernel at values `v`, one thread, as calibration times a kernel."""
    import torch

    from archsearch.models import build_channel_mixer, init_weights

    torch.set_num_threads(1)
    torch.manual_seed(0)
    module = build_channel_mixer(timing.arch_of("moe", v).resolved()).apply(init_weights).eval()
    x = torch.randn(1, v["N"], v["d"])
    full = plan("full")
    with torch.inference_mode():
        return timing.seconds_per_call(lambda: module(x), full.repeats, full.min_time)


def priced(device, v: dict) -> float:
    c = Columns.from_archs([timing.arch_of("moe", v).resolved()])
    return float(device.predictor.kernel("moe", c, Phase("forward", T=v["N"], B=1), device)[0])


def summary(out: dict) -> dict:
    """Means over calibrations of each score, with and without the trees (and in how many
    calibrations dropping them helps); per kernel shape the median price / time of each."""
    cal = list(out["calibrations"].values())
    scored = {
        k: {v: float(np.mean([c[v][k] for c in cal])) for v in ("trees", "no trees")}
        for k in cal[0]["trees"]
    }
    for k in ("moe_ttft_within_10", "ttft_within_10", "decode_within_10"):
        diff = [c["no trees"][k] - c["trees"][k] for c in cal]
        scored[k]["no trees better, worse"] = [sum(d > 0 for d in diff), sum(d < 0 for d in diff)]
    kernel = {}
    for row in out["kernel"]:
        v = row["values"]
        key = f"d{v['d']} E{v['E']} top{v['topk']} N{v['N']}"
        kernel[key] = {
            k: float(
                np.median(
                    [r for n, r in row["priced_over_timed"].items() if n.split(" ", 1)[1] == k]
                )
            )
            for k in ("trees", "no trees")
        }
    return {"calibrations": len(cal), "scores": scored, "kernel": kernel}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calibration", nargs="+", required=True, help="NAME=RAW.json")
    ap.add_argument("--runs", nargs="+", required=True, help="saved bench_latency_accuracy runs")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results/latency_moe.json"))
    args = ap.parse_args()
    archs = {a.summary(): a for _, a, _ in cases(3)}
    runs = [json.loads(Path(p).read_text())["rows"] for p in args.runs]
    devices, out = {}, {"command": " ".join(sys.argv), "calibrations": {}, "kernel": []}
    for item in args.calibration:
        name, _, path = item.partition("=")
        fitted = variant(json.loads(Path(path).read_text()), ())
        devices[name] = {"trees": fitted, "no trees": without_moe_trees(fitted)}
        row = {k: scores(d, runs, archs) for k, d in devices[name].items()}
        out["calibrations"][name] = row
        print(name, json.dumps(row), flush=True)
    for v in moe_shapes(runs, archs):
        s = time_moe(v)
        ratios = {f"{n} {k}": priced(d, v) / s for n, ds in devices.items() for k, d in ds.items()}
        out["kernel"].append({"values": v, "timed_s": s, "priced_over_timed": ratios})
        print(v, f"{s * 1e3:.2f} ms", {k: round(r, 2) for k, r in ratios.items()}, flush=True)
    out["summary"] = summary(out)
    print(json.dumps(out["summary"], indent=1))
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print("saved", args.out)


if __name__ == "__main__":
    main()
