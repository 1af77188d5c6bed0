"""A half-precision decode step timed on a state built in fp32: does the step's time change?

Calibration checks the half precision on whole models timed in bf16 (`latency.calibrate.
roofline.half`), each decode step after a context of up to thousands of tokens. A CPU without
native bf16 runs that context's prefill in seconds; `timing.time_model` builds the state by
the same prefill in fp32 and casts it to the dtypes the model's own prefill gives
(`timing.state_after`). The step reads the state's values, not how long they took: here each
check model's step is timed on both states, interleaved (the order alternating by round), in
the full plan's way (the least of its samples over its span after its warm-up), and the
seconds each state took to build are recorded.

    python benchmarks/bench_half_state.py [--rounds 4]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import time
from pathlib import Path

import torch

from archsearch.latency.calibrate.models import held_out_models
from archsearch.latency.calibrate.plan import PLANS
from archsearch.latency.calibrate.roofline import LONG
from archsearch.latency.calibrate.timing import _call, seconds_per_call, state_after
from archsearch.models import build_model
from archsearch.runtimes import prepare


def one(model, rounds: int, timed: dict) -> dict:
    torch.manual_seed(0)
    built = build_model(model.arch).eval()
    fp32 = copy.deepcopy(built)
    built = built.to(torch.bfloat16)
    context = torch.randint(0, model.arch.vocab_size, (model.batch, model.context))
    states, build_s = {}, {}
    for name, source in (("bf16", None), ("fp32_cast", fp32)):
        t0 = time.perf_counter()
        states[name] = state_after(built, context, source)
        build_s[name] = time.perf_counter() - t0
    token = torch.randint(0, model.arch.vocab_size, (model.batch,))
    step_s: dict[str, list[float]] = {name: [] for name in states}
    for r in range(rounds):
        for name in sorted(states, reverse=bool(r % 2)):
            call = prepare("torch", _call(built, "step", states[name]), (token,))
            step_s[name].append(seconds_per_call(call, **timed))
    median = {name: statistics.median(s) for name, s in step_s.items()}
    return {
        "model": model.arch.summary(),
        "prompt": model.prompt,
        "context": model.context,
        "state_build_s": build_s,
        "step_ms": {name: 1e3 * m for name, m in median.items()},
        "step_ratio": median["fp32_cast"] / median["bf16"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "half_state.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    p = dataclasses.replace(PLANS["full"], precision="fp16", repeats=PLANS["full"].check_repeats)
    timed = dict(repeats=p.repeats, min_time=0.0, warmup=p.warmup, span=p.span)
    rows = []
    for m in held_out_models()[: p.held_out]:
        row = one(m._replace(prompt=LONG[0], context=LONG[1]), args.rounds, timed)
        rows.append(row)
        b = row["state_build_s"]
        print(
            f"{row['model']:42s} state {b['bf16']:5.2f} s in bf16, {b['fp32_cast']:5.2f} s "
            f"in fp32; step {row['step_ms']['bf16']:7.3f} ms vs {row['step_ms']['fp32_cast']:7.3f}"
            f" ms ({row['step_ratio']:.3f})",
            flush=True,
        )
    ratios = [r["step_ratio"] for r in rows]
    result = {
        "rounds": args.rounds,
        "threads": 1,
        "rows": rows,
        "state_build_s": {
            k: sum(r["state_build_s"][k] for r in rows) for k in ("bf16", "fp32_cast")
        },
        "step_ratio": {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)},
    }
    print(
        f"states built in {result['state_build_s']['bf16']:.1f} s (bf16) vs "
        f"{result['state_build_s']['fp32_cast']:.1f} s (fp32, cast); step time ratio "
        f"{min(ratios):.3f}-{max(ratios):.3f} (median {statistics.median(ratios):.3f})"
    )
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
