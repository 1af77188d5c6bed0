"""Orchestration overhead per trial of `archsearch sweep` (target: at most 0.5 s).

A sweep of the `tiny` space runs with the synthetic trainable (`archsearch.sweep.testing`) and
no sleep, so a trial does no work of its own: what a trial costs is the orchestration (Optuna
ask and suggest, pricing every candidate on every device profile, the SQLite writes of its
record, Ray Tune's scheduling, the reused actor's reset, the reports). Per trial =
(wall time of the Tune run) / (trials trained); Ray's start and shutdown are reported apart.
Median of 3 sweeps, side by side with actor reuse switched off.

    python benchmarks/bench_sweep_overhead.py [--trials 40]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path


def config(run_dir: str, trials: int):
    from archsearch.sweep.settings import LatencySection, RaySection, StorageSection, SweepConfig

    return SweepConfig(
        search_space="tiny",
        space_file=None,
        device="rpi5",
        trials=trials,
        sampler="tpe",
        seed=0,
        study_name=None,
        run_dir=run_dir,
        concurrency=2,
        cpus_per_trial=1,
        early_stopping="none",
        budget=None,
        train={},
        storage=StorageSection(url=None),
        ray=RaySection(address=None, num_cpus=2, verbose=False),
        latency=LatencySection(),
        trainable="archsearch.sweep.testing:synthetic",
    )


def one(trials: int, reuse: bool) -> dict:
    from archsearch.space import load_space
    from archsearch.sweep import runner

    os.environ["ARCHSEARCH_SYNTHETIC_SLEEP"] = "0"
    timings = {}
    original = runner._fit

    def timed_fit(state, *args, **kwargs):
        t0 = time.perf_counter()
        if not reuse:
            import ray.tune

            real = ray.tune.TuneConfig

            def no_reuse(**kw):
                kw["reuse_actors"] = False
                return real(**kw)

            ray.tune.TuneConfig = no_reuse
            try:
                original(state, *args, **kwargs)
            finally:
                ray.tune.TuneConfig = real
        else:
            original(state, *args, **kwargs)
        timings["fit_s"] = time.perf_counter() - t0
        timings["trained"] = state.trained
        timings["untrained"] = sum(
            v for k, v in state.counts.items() if k in ("infeasible", "invalid", "duplicate")
        )

    runner._fit = timed_fit
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            runner.run_sweep(load_space("tiny"), config(tmp, trials))
            timings["total_s"] = time.perf_counter() - t0
    finally:
        runner._fit = original
    timings["per_trial_s"] = timings["fit_s"] / timings["trained"]
    timings["ray_start_stop_and_setup_s"] = timings["total_s"] - timings["fit_s"]
    return timings


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    results = {}
    for reuse in (True, False):
        runs = [one(args.trials, reuse) for _ in range(args.repeats)]
        per = statistics.median(r["per_trial_s"] for r in runs)
        results["reuse_actors" if reuse else "fresh_actors"] = {
            "runs": runs,
            "median_per_trial_s": per,
        }
        print(
            f"reuse_actors={reuse}: {per:.3f} s per trial (median of {args.repeats} sweeps of "
            f"{args.trials} trials; per run: "
            + ", ".join(f"{r['per_trial_s']:.3f}" for r in runs)
            + ")",
            flush=True,
        )
    out = Path(__file__).parent / "results" / "sweep_overhead.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"trials": args.trials, **results}, indent=2))
    print(f"saved {out}")


if __name__ == "__main__":
    main()
