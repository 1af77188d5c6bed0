"""How many samples the half precision's timings need: the roofline's half-precision factors
and their held-out check (`latency.calibrate.roofline.half`) at fewer repeats, side by side.

`archsearch calibrate` ends by timing whole models in bf16: the reference models, to fit the
roofline's half-precision factors, then each held-out model at its setting and at the
calibration ranges' longest prompt and context, to check them. Each timing is the least of
`repeats` samples, and more until they span `span` seconds (`calibrate.timing.seconds_per_call`).
On a CPU without native bf16 a long prefill takes seconds, so these timings are a large share
of a calibration, yet they check a roofline whose error is tens of percent.

This benchmark runs `half` once at the plan's repeats, recording every sample of every timing,
then replays it (no timing) at each of `--repeats`, two ways: the check's timings only (the
factors fitted as before) and every timing (the factors refitted too); each timing is the least
of its first r samples (and more until its span) and `half` itself fits and scores. Printed and
saved (results/half_repeats.json), per way and r: the check's share within +-10% and MAPE per
phase, the fitted factors, how far the check's timings are from the full ones (median and
largest |least_r / least_full - 1| per phase), and the seconds the timings take (warm-up and
samples used; the builds and context prefills are the same for every r). `--replay PATH` reads
a saved result's recording instead of timing.

    python benchmarks/bench_half_repeats.py --threads 1
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from unittest import mock

import numpy as np
import torch

from archsearch.cost.devices import processor
from archsearch.latency.calibrate import roofline, timing
from archsearch.latency.calibrate.plan import plan


def record(p) -> tuple[dict, list[dict]]:
    """The roofline measured and `half` timed at plan `p`, every timing's samples recorded in
    call order: (the roofline's measurement, the log)."""
    log: list[dict] = []
    real_time_model, real_seconds = roofline.time_model, timing.seconds_per_call

    def seconds(fn, repeats, min_time, reduce=min, warmup=0.0, span=0.0):
        start = time.perf_counter()
        samples = real_seconds(fn, repeats, min_time, reduce=list, warmup=warmup, span=span)
        spent = time.perf_counter() - start
        other = spent - sum(samples)  # the warm-up calls and the allocator's setting
        log[-1]["calls"].append({"samples": samples, "span": span, "other_s": other})
        return reduce(samples)

    def time_model(m, how, builds=1):
        log.append({"model": named(m), "calls": []})
        try:
            return real_time_model(m, how, builds)
        except RuntimeError as e:
            log[-1]["error"] = str(e)
            raise

    measured = roofline.measure(p)
    with (
        mock.patch.object(timing, "seconds_per_call", seconds),
        mock.patch.object(roofline, "time_model", time_model),
    ):
        roofline.half(measured, p, lambda text: print(f"  {text}", flush=True))
    return measured, log


def named(m) -> str:
    return f"{m.arch.summary()} P{m.prompt}/C{m.context}"


def least(call: dict, repeats: int) -> tuple[float, float]:
    """The least of the first samples a timing at `repeats` takes, and the seconds it takes."""
    samples, n, spent = call["samples"], 0, 0.0
    while n < len(samples) and (n < repeats or spent < call["span"]):
        spent += samples[n]
        n += 1
    return min(samples[:n]), call["other_s"] + spent


def replay(measured: dict, p, log: list[dict], checks: int, references: int) -> tuple[dict, dict]:
    """`half` again with each recorded timing read at fewer repeats: `checks` for the held-out
    check's, `references` for the reference models' (timed first, `roofline.references`):
    (its result, timing seconds of each part)."""
    n_references = len(roofline.references(p))
    entries, spent = iter(enumerate(log)), {"references": 0.0, "check": 0.0}

    def time_model(m, how, builds=1):
        i, entry = next(entries)
        assert entry["model"] == named(m), f"recorded {entry['model']}, asked for {named(m)}"
        if "error" in entry:
            raise RuntimeError(entry["error"])
        part, repeats = ("references", references) if i < n_references else ("check", checks)
        reads = [least(c, repeats) for c in entry["calls"]]
        spent[part] += sum(s for _, s in reads)
        return reads[0][0], reads[1][0]

    with mock.patch.object(roofline, "time_model", time_model):
        return roofline.half(measured, p, lambda text: None), spent


def timings(out: dict) -> np.ndarray:
    return np.array([r["measured_s"] for r in out["check"]], dtype=float)


def row(out: dict, spent: dict, base: np.ndarray) -> dict:
    """A replay's figures: its timing seconds, factors, check and check timings against `base`."""
    gap = np.abs(timings(out) / base - 1)
    return {
        "timing_seconds": {k: round(v, 1) for k, v in spent.items()},
        "factors": [round(f, 4) for f in out["factors"]],
        "check_vs_full_percent": {
            q: {"median": float(100 * np.median(gap[:, i])), "max": float(100 * gap[:, i].max())}
            for i, q in enumerate(("ttft", "decode"))
        },
        "check": {
            q: {k: v[k] for k in ("within_10", "mape", "p90", "n")}
            for q, v in out["validation"].items()
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--budget", default="full", help="the calibration plan (quick: a smoke run)")
    ap.add_argument("--repeats", default="1,2,3", help="fewer repeats to replay, comma-separated")
    ap.add_argument("--replay", help="a saved result: replay its recording, time nothing")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "half_repeats.json"))
    args = ap.parse_args()
    if args.replay:
        saved = json.loads(Path(args.replay).read_text())
        p = plan(saved["plan"]["name"], threads=saved["threads"])
        measured, log, wall = saved["roofline"], saved["log"], saved["wall_seconds"]
    else:
        torch.set_num_threads(args.threads)
        p = plan(args.budget, threads=args.threads)
        t0 = time.perf_counter()
        measured, log = record(p)
        wall = time.perf_counter() - t0
    base = timings(replay(measured, p, log, p.repeats, p.repeats)[0])
    fewer = (r for r in map(int, args.repeats.split(",")) if r < p.repeats)
    rows: dict[str, dict] = {"check": {}, "all": {}}
    for r in sorted({p.repeats, *fewer}):
        for way, references in (("check", p.repeats), ("all", r)):
            rows[way][r] = got = row(*replay(measured, p, log, r, references), base)
            c, vs = got["check"], got["check_vs_full_percent"]
            print(
                f"{way:5s} at {r} repeats: timings {sum(got['timing_seconds'].values()):6.1f} s; "
                f"check TTFT within +-10% {c['ttft']['within_10']:.0%} (MAPE "
                f"{100 * c['ttft']['mape']:.1f}%), decode {c['decode']['within_10']:.0%} (MAPE "
                f"{100 * c['decode']['mape']:.1f}%); check timings vs {p.repeats} repeats: TTFT "
                f"{vs['ttft']['median']:.1f}% median ({vs['ttft']['max']:.1f}% max), decode "
                f"{vs['decode']['median']:.1f}% ({vs['decode']['max']:.1f}% max)",
                flush=True,
            )
    if args.replay:
        result = {**saved, "repeats": rows}  # the recording's own command, machine and date
    else:
        result = {
            "command": f"python benchmarks/bench_half_repeats.py --threads {args.threads} "
            f"--budget {args.budget}",
            "machine": {
                **processor(),
                "torch": torch.__version__,
                "python": platform.python_version(),
            },
            "date": time.strftime("%Y-%m-%d"),
            "plan": {"name": p.name, "repeats": p.repeats, "span": p.span, "warmup": p.warmup},
            "threads": p.threads,
            "wall_seconds": round(wall, 1),
            "repeats": rows,
            "roofline": measured,
            "log": log,
        }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"the roofline measured and the half precision timed in {wall:.0f} s; saved {out}")


if __name__ == "__main__":
    main()
