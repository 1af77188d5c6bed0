"""Does a profile's pairwise confidence (`archsearch.latency.order`) hold on the pairs it was not
built from?

For each published profile (the five fitted to [PLM] Table 12 by
`benchmarks/fit_edge_profiles.py`) and each quantity (TTFT, decode): every pair of held-out
models at one precision, with their leave-one-model-out predictions (measured time x (1 +
error), the errors of `benchmarks/results/edge_fit.json` that the profile keeps) and their
measured times. Per pair: the predicted ratio, whether the predictions order the two as the
measurements do, and the confidence `latency.order` gives that ratio from the other models' pairs
only (both models of the pair left out). By bins of the predicted ratio: how many pairs, the
share ordered right, and the mean confidence claimed; and each profile's absolute band (its
+-, the 90th percentile of |error|) for comparison.

    python benchmarks/bench_order_confidence.py
"""

from __future__ import annotations

import itertools
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
BINS = (0.0, 0.05, 0.1, 0.2, 0.4, math.inf)  # |log(predicted ratio)|


def pairs(device: str, quantity: str) -> list[dict]:
    from fit_edge_profiles import throughputs

    from archsearch.latency.order import Ordering, log_differences

    fit = json.loads((HERE / "results" / "edge_fit.json").read_text())[device]
    measured = {
        (r.model, r.precision): (r.ttft_s if quantity == "ttft" else r.decode_s)
        for r in throughputs(device)
    }
    errors = {(e["model"], e["precision"]): e[quantity] for e in fit["errors"]}
    out = []
    for precision in sorted({p for _, p in errors}):
        models = [m for m, p in errors if p == precision]
        for a, b in itertools.combinations(models, 2):
            ma, mb = measured[(a, precision)], measured[(b, precision)]
            pa = ma * (1 + errors[(a, precision)])
            pb = mb * (1 + errors[(b, precision)])
            others: dict[str, list[float]] = {}
            for (m, p), e in errors.items():
                if m not in (a, b):
                    others.setdefault(p, []).append(e)
            confidence = Ordering((log_differences(others),), "").confidence(pa / pb)
            out.append(
                {
                    "precision": precision,
                    "models": [a, b],
                    "log_ratio": abs(math.log(pa / pb)),
                    "right": (pa < pb) == (ma < mb),
                    "confidence": float(confidence),
                }
            )
    return out


def main() -> None:
    sys.path.insert(0, str(HERE))
    from bench_search_efficiency import provenance
    from fit_edge_profiles import DEVICES

    from archsearch.latency import load_device

    t0 = time.time()
    results = {}
    for device in DEVICES:
        profile = load_device(device)
        for quantity in ("ttft", "decode"):
            got = pairs(device, quantity)
            x = np.array([p["log_ratio"] for p in got])
            bins = []
            for lo, hi in itertools.pairwise(BINS):
                sel = [p for p, v in zip(got, x) if lo <= v < hi]
                if not sel:
                    continue
                bins.append(
                    {
                        "ratio": [round(math.exp(-hi), 3), round(math.exp(-lo), 3)],
                        "pairs": len(sel),
                        "ordered_right": float(np.mean([p["right"] for p in sel])),
                        "confidence_claimed": float(np.mean([p["confidence"] for p in sel])),
                    }
                )
            right = float(np.mean([p["right"] for p in got]))
            claimed = float(np.mean([p["confidence"] for p in got]))
            band = profile.check(quantity, "fp16").error
            results[f"{device}/{quantity}"] = {
                "pairs": len(got),
                "ordered_right": right,
                "confidence_claimed": claimed,
                "band": band,
                "bins": bins,
            }
            print(
                f"{device:17s} {quantity:6s} {len(got)} held-out pairs (+-{band:.0%} each): "
                f"{right:.2f} ordered right, {claimed:.2f} claimed; by predicted ratio "
                + ", ".join(
                    f"{b['ratio'][0]}-{b['ratio'][1]}: {b['ordered_right']:.2f} vs "
                    f"{b['confidence_claimed']:.2f} (n={b['pairs']})"
                    for b in bins
                ),
                flush=True,
            )
    out = HERE / "results" / "order_confidence.json"
    out.write_text(json.dumps({**provenance(time.time() - t0), **results}, indent=1) + "\n")
    print(f"saved {out}")


if __name__ == "__main__":
    main()
