"""How long a whole model's timing should sample: the agreement of two timings of one model
minutes apart, for each sampling span (`latency.calibrate.plan.SAMPLE_S`).

A whole model is timed (`latency.calibrate.timing.time_model`) as the least of its samples after
`WARMUP_S` of warm-up calls. On a shared VM the machine slows down for tenths of a second to
seconds at a time (other tenants' work on the shared cache and memory): five samples taken
back to back after the warm-up (a decode step: 10-50 ms) fall inside one such moment or
outside it, and two timings of the same model agree only as often as both fall outside one.
Sampling over a span of `S` seconds gives the least more moments to find an undisturbed one.

For each span of `--spans` and 0 (`repeats` samples back to back, as before), each of the
calibration's held-out models (`calibrate.models.held_out_models`, twelve families and sizes) is
timed in two passes minutes apart, `--builds` fresh builds per pass, the spans interleaved
build by build (so that every span meets the same moments of the machine). Printed and saved
(results/timing_window.json), per span and phase: the share of models whose two passes (the
least of each) agree within +-10% (`retest`, as `bench_latency_accuracy.py` reads it), their
MAPE and median (first / second - 1), the median spread of a pass's builds (max / min), how
much lower the span's least is than the back-to-back one's, and the seconds a timing takes;
the timings are saved with them.

    python benchmarks/bench_timing_window.py --threads 1
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from archsearch.latency.calibrate.models import held_out_models
from archsearch.latency.calibrate.plan import TimingPlan
from archsearch.latency.calibrate.timing import time_model

PHASES = ("ttft", "decode")


def spans_arg(text: str) -> list[float]:
    """`--spans`: seconds, comma-separated, each finite and >= 0; 0 (back to back, what the
    others are compared with) is always timed, first."""
    try:
        spans = [float(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected seconds separated by commas, got {text!r}"
        ) from None
    if not all(math.isfinite(s) and s >= 0 for s in spans):
        raise argparse.ArgumentTypeError(f"expected finite seconds >= 0, got {text!r}")
    return sorted({0.0, *spans})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--builds", type=int, default=2, help="builds per pass and span")
    ap.add_argument(
        "--spans", type=spans_arg, default="0,0.25,1.0", help="sampling spans to compare (s)"
    )
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "timing_window.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    spans = args.spans  # spans[0] == 0: the back-to-back timings the others are compared with
    models = held_out_models()
    # timed[span][model][pass] -> list of (ttft, decode, seconds) per build
    timed = [[[[], []] for _ in models] for _ in spans]
    t0 = time.perf_counter()
    for k in range(2):
        for i, m in enumerate(models):
            for _ in range(args.builds):
                for j, span in enumerate(spans):
                    start = time.perf_counter()
                    how = TimingPlan("window", repeats=args.repeats, span=span)
                    ttft, decode = time_model(m, how)
                    timed[j][i][k].append((ttft, decode, time.perf_counter() - start))
            print(f"pass {k + 1}/2: {i + 1}/{len(models)} {m.arch.summary()}", flush=True)
    result = {
        "threads": args.threads,
        "repeats": args.repeats,
        "builds_per_pass": args.builds,
        "models": [m.arch.summary() for m in models],
        "seconds": round(time.perf_counter() - t0, 1),
        "spans": {},
    }
    base = np.array([[min(b[q] for p in model for b in p) for q in (0, 1)] for model in timed[0]])
    for span, per_model in zip(spans, timed):
        figures = {}
        for q, phase in enumerate(PHASES):
            least = np.array([[min(b[q] for b in p) for p in model] for model in per_model])
            retest = least[:, 0] / least[:, 1] - 1
            spread = [max(b[q] for b in p) / min(b[q] for b in p) for m in per_model for p in m]
            overall = least.min(axis=1)
            figures[phase] = {
                "retest_within_10": float(np.mean(np.abs(retest) <= 0.10)),
                "retest_median_percent": float(100 * np.median(retest)),
                "retest_mape_percent": float(100 * np.mean(np.abs(retest))),
                "median_build_spread": float(np.median(spread)),
                "median_vs_back_to_back_percent": float(100 * np.median(overall / base[:, q] - 1)),
            }
        cost = float(np.mean([b[2] for m in per_model for p in m for b in p]))
        result["spans"][str(span)] = {
            "phases": figures,
            "seconds_per_build": cost,
            "timings_ms": [[[[1e3 * b[0], 1e3 * b[1]] for b in p] for p in m] for m in per_model],
        }
        for phase, f in figures.items():
            print(
                f"span {span:4.2f} s {phase:6s}: passes agree within +-10% for "
                f"{f['retest_within_10']:.0%} (MAPE {f['retest_mape_percent']:.1f}%, median "
                f"{f['retest_median_percent']:+.1f}%), builds "
                f"spread {f['median_build_spread']:.2f}x (median), least "
                f"{f['median_vs_back_to_back_percent']:+.1f}% vs back to back; "
                f"{cost:.1f} s per build"
            )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"saved {out}")


if __name__ == "__main__":
    main()
