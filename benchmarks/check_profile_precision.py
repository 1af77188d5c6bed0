"""The half precision of a measured profile, fitted and checked on this machine.

`archsearch calibrate` fits the roofline's fp16 efficiencies to reference models timed in
bf16 and checks them on its 12 held-out whole models, timed in bf16 and predicted at fp16
(`archsearch.cost.calibrate.fit_half`), so that fp16/bf16 latencies carry a measured error.
This script runs that same step on an existing profile (one calibrated before the step
existed, whose fp16/bf16 latencies carry no error) and prints each held-out model's error and
the figures; `--write` stores the fitted efficiencies and the check in the profile (replacing
an earlier check of the same precisions), atomically, with the date in the check's `method`.
Run it on the machine the profile measured, at its threads, with nothing else running.

    python benchmarks/check_profile_precision.py --device local --threads 1 [--write]
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import torch

from archsearch import yamlio
from archsearch.cost.calibrate import fit_half
from archsearch.cost.devices import load_device, parse_device, read_profile, write_profile


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="local")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--write", action="store_true", help="store the fit and check in the profile")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = load_device(args.device)
    path = Path(device.path)
    profile = read_profile(path)
    half = fit_half(profile, args.repeats)
    fit = half["raw"]["fit"]
    print(
        f"fp16 efficiencies fitted to {fit['models']} reference models in bf16: compute "
        f"{fit['compute']:.3f}, vector {fit['vector']:.3f}, op_overhead "
        f"{1e6 * fit['op_overhead_s']:.2f} us (fit error {fit['fit_mape_percent']:.1f}%); "
        f"not run in bf16: {fit['skipped'] or 'none'}"
    )
    for r in half["raw"]["check"]:
        (t, d), (pt, pd) = r["measured_s"], r["predicted_s"]
        print(
            f"{r['arch']:48s} TTFT {1e3 * t:8.2f} ms (pred {pt / t - 1:+6.1%})  decode "
            f"{1e3 * d:7.3f} ms (pred {pd / d - 1:+6.1%})"
        )
    for q, v in half["validation"].items():
        print(
            f"{q} at {'/'.join(v['precisions'])}: MAPE {100 * v['mape']:.1f}%, within +-10% "
            f"{100 * v['within_10']:.0f}%, 90th percentile +-{100 * v['p90']:.0f}%, n={v['n']}"
        )
    if not args.write or not half["validation"]:
        return
    when = datetime.date.today().isoformat()
    for q, v in half["validation"].items():
        v["method"] += f"; added on {when} by benchmarks/check_profile_precision.py"
        old = profile.setdefault("validation", {}).get(q, [])
        old = old if isinstance(old, list) else [old]
        for e, parsed in zip(old, device.validation.get(q, ())):  # what each covers, stated
            e["precisions"] = list(parsed.precisions)
        profile["validation"][q] = [
            *(e for e in old if not set(e["precisions"]) & set(v["precisions"])),
            v,
        ]
    # parsed before it is written: a bad profile never lands
    parse_device(yamlio.loads(yamlio.dumps(profile)), source=str(path), default_name="local")
    write_profile(profile, path)
    print(f"written: {path}")


if __name__ == "__main__":
    main()
