"""How does a profile price this machine? The whole models a calibration of this machine timed,
priced on profiles side by side.

No timing: `archsearch calibrate format=json` keeps the seconds of its whole models (`raw`: the
held-out models no calibration step fitted, and the glue models the memory terms were fitted
to). Each `--device` profile prices the same models at the same settings, so a profile measured
on another machine (the shipped `local` read on a processor of the same name but another
generation, say) is read against this one's timings beside the profile that calibration wrote.
Per profile and part, for TTFT and decode: the accuracy benchmark's figures (the share within
+-5/10/20%, the MAPE, Kendall's tau) and the median of predicted / measured.

    archsearch calibrate threads=1 output=/tmp/here.yaml format=json > /tmp/here.json
    python benchmarks/bench_profile_on_calibration.py --calibration /tmp/here.json \\
        --device /tmp/here.yaml local --out results/profile_on_calibration.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import numpy as np

from archsearch.latency import load_device
from archsearch.latency.calibrate.models import timed_models
from archsearch.latency.profile import strict_json

sys.path.insert(0, str(Path(__file__).parent))
from bench_latency_accuracy import figures

PARTS = ("held_out", "glue")
QUANTITIES = ("ttft", "decode")


def scores(predicted: np.ndarray, measured: np.ndarray) -> dict[str, dict[str, float]]:
    """Per quantity (columns: prefill, step) `figures` and the median of predicted / measured."""
    predicted, measured = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    return {
        quantity: {
            **figures(measured[:, i], predicted[:, i]),
            "median_ratio": float(np.median(predicted[:, i] / measured[:, i])),
        }
        for i, quantity in enumerate(QUANTITIES)
    }


def price(raw: dict, device) -> dict[str, dict]:
    """Each part's scores of `device`'s predictions of the calibration's timed whole models."""
    out = {}
    for part in PARTS:
        if raw.get(part):
            measured = np.array([e["measured_s"] for e in raw[part]], dtype=float)
            predicted = np.array([m.predicted(device) for m in timed_models(raw[part])])
            out[part] = {"n": len(measured), **scores(predicted, measured)}
    return out


def line(profile: str, part: str, quantity: str, s: dict[str, float]) -> str:
    within, mape, ratio = 100 * s["within_10"], s["mape_percent"], s["median_ratio"]
    return (
        f"{profile:12s} {part:8s} {quantity:6s} {within:5.1f}% within +-10%, MAPE {mape:5.1f}%, "
        f"predicted / measured {ratio:.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibration", required=True, help="archsearch calibrate format=json output")
    ap.add_argument("--device", nargs="+", required=True, help="profiles (names or paths)")
    ap.add_argument("--out", default="benchmarks/results/profile_on_calibration.json")
    args = ap.parse_args()
    calibration = strict_json(Path(args.calibration).read_bytes())
    result = {
        "date": datetime.date.today().isoformat(),
        "node": calibration["node"],
        "profiles": {},
    }
    for given in args.device:
        device = load_device(given)
        name = device.name
        result["profiles"][name] = {
            "measured_on": device.measured_on,
            "peak_fp32_flops": device.peak("fp32"),
            "memory_bandwidth": device.memory_bandwidth,
            **price(calibration["raw"], device),
        }
        for part in PARTS:
            for q in QUANTITIES:
                if q in result["profiles"][name].get(part, {}):
                    print(line(name, part, q, result["profiles"][name][part][q]))
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
