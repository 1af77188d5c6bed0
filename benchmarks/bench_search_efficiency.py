"""Search efficiency: hypervolume reached against training compute spent.

1. Ground truth (`--truth`, cached in benchmarks/results/search_truth.json): every candidate of
   the 40-candidate space benchmarks/spaces/search_small.yaml is trained once with the real
   sandbox trainer (seeded, deterministic), keeping its eval points; the true Pareto front of
   validation loss vs predicted Raspberry Pi 5 decode latency over the feasible candidates, and
   its hypervolume, follow.
2. Strategies, each a real `archsearch sweep` (Ray Tune + Optuna + SQLite) whose trainable
   replays the recorded trials (`archsearch.sweep.testing:replay`: what retraining would report,
   in milliseconds), over several seeds:
   - default: cost pruning (constraints checked before training) + multi-objective TPE + ASHA;
   - random: random sampling of the space without its constraints, no early stopping (every
     draw is trained to the end, infeasible or not).
   Compute spent is the tokens actually trained (a stopped trial counts what it ran). After each
   trial, the hypervolume of the feasible, fully trained front found so far is computed with the
   ground-truth reference point.
Results: mean hypervolume (fraction of the true one) at 25/50/75/100% of the compute of
training every candidate once, a PNG of the curves, and JSON.

    python benchmarks/bench_search_efficiency.py --truth   # once (minutes)
    python benchmarks/bench_search_efficiency.py           # the comparison
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
SPACE = HERE / "spaces" / "search_small.yaml"
TRUTH = HERE / "results" / "search_truth.json"


def _train(args):
    arch_dict, train, run_dir = args
    import torch

    from archsearch.arch import ArchConfig
    from archsearch.trainers.config import TrainConfig
    from archsearch.trainers.trial import run_trial

    torch.set_num_threads(1)
    arch = ArchConfig.from_dict(arch_dict)
    res = run_trial(arch, TrainConfig.from_dict(train), run_dir=run_dir)
    return arch.arch_hash, res.to_dict()


def ground_truth(workers: int) -> None:
    from archsearch.space import assignments, build, parse_space_file

    space = parse_space_file(SPACE)
    archs = {}
    for a in assignments(space):
        c = build(space, a)
        archs[c.arch.arch_hash] = c.arch
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [(a.to_dict(), space.train, f"{tmp}/{h}") for h, a in archs.items()]
        with mp.get_context("spawn").Pool(workers) as pool:
            results = dict(pool.map(_train, jobs))
    TRUTH.parent.mkdir(exist_ok=True)
    TRUTH.write_text(json.dumps(results, indent=1))
    print(f"trained {len(results)} candidates; saved {TRUTH}")


def objectives(space, arch_dict: dict, result: dict) -> tuple[float, float, bool]:
    from archsearch.arch import ArchConfig
    from archsearch.cost import metric_value

    arch = ArchConfig.from_dict(arch_dict)
    latency = metric_value(arch, space.objectives[1].spec.on_device("rpi5", only_unset=True))
    feasible = all(
        c.violation(metric_value(arch, c.spec.on_device("rpi5", only_unset=True))) <= 0
        for c in space.constraints
    )
    return result["metrics"]["val_loss"], latency, feasible


def run_strategy(strategy: str, seed: int, trials: int) -> list[tuple[float, float]]:
    """(cumulative tokens, hypervolume) after each trained trial of one sweep."""
    import optuna

    from archsearch.analysis.front import Axis, hypervolume
    from archsearch.space import parse_space_file
    from archsearch.study import open_storage, records
    from archsearch.sweep import run_sweep
    from archsearch.sweep.settings import LatencySection, RaySection, StorageSection, SweepConfig

    truth = json.loads(TRUTH.read_text())
    space = parse_space_file(SPACE)
    with tempfile.TemporaryDirectory() as tmp:
        space_file = SPACE
        if strategy == "random":  # the same space without its constraints
            text = (
                SPACE.read_text().split("constraints:")[0]
                + "objectives:"
                + SPACE.read_text().split("objectives:")[1]
            )
            space_file = Path(tmp) / "unconstrained.yaml"
            space_file.write_text(text)
        cfg = SweepConfig(
            search_space=str(space_file),
            space_file=None,
            device="rpi5",
            trials=trials,
            sampler="tpe" if strategy == "default" else "random",
            seed=seed,
            study_name=None,
            run_dir=f"{tmp}/run",
            concurrency=2,
            cpus_per_trial=1,
            early_stopping="asha" if strategy == "default" else "none",
            budget=None,
            train={},
            storage=StorageSection(url=None),
            ray=RaySection(address=None, num_cpus=2, verbose=False),
            latency=LatencySection(),
            trainable="archsearch.sweep.testing:replay",
        )
        os.environ["ARCHSEARCH_REPLAY_CACHE"] = str(TRUTH)
        summary = run_sweep(parse_space_file(Path(space_file)), cfg)
        study = optuna.load_study(
            study_name=summary["study_name"], storage=open_storage(summary["storage"])
        )
        done = {t.number: t.datetime_complete for t in study.get_trials()}
        recs = [r for r in records(study) if r.status in ("trained", "stopped_early", "failed")]
    recs.sort(key=lambda r: done[r.number])  # in the order the trials finished
    axes = [Axis("val_loss"), Axis("decode_ms")]
    ref = np.array(reference_point(space, truth))
    spent, found, curve = 0.0, [], []
    for r in recs:
        res = truth[r.attrs["arch_hash"]]
        fraction = 1.0 if r.status == "trained" else r.attrs["budget"]["fraction"]
        spent += res["tokens"] * fraction
        if r.status == "trained":
            loss, lat, feasible = objectives(space, r.attrs["arch"], res)
            if feasible:
                found.append((loss, lat))
        hv = hypervolume(np.array(found), axes, ref) if found else 0.0
        curve.append((spent, hv))
    return curve


def reference_point(space, truth) -> list[float]:
    pts = [objectives(space, r["arch_dict"], r)[:2] for r in _with_arch(truth)]
    worst = np.max(np.array(pts), axis=0)
    best = np.min(np.array(pts), axis=0)
    return list(worst + 0.1 * (worst - best))


def _with_arch(truth):
    from archsearch.space import assignments, build, parse_space_file

    space = parse_space_file(SPACE)
    by_hash = {build(space, a).arch.arch_hash: build(space, a).arch for a in assignments(space)}
    return [{**res, "arch_dict": by_hash[h].to_dict()} for h, res in truth.items()]


def true_front(truth) -> tuple[float, float]:
    from archsearch.analysis.front import Axis, hypervolume
    from archsearch.space import parse_space_file

    space = parse_space_file(SPACE)
    pts = [objectives(space, r["arch_dict"], r) for r in _with_arch(truth)]
    feasible = np.array([(a, b) for a, b, ok in pts if ok])
    ref = np.array(reference_point(space, truth))
    total = sum(r["tokens"] for r in truth.values())
    return hypervolume(feasible, [Axis("val_loss"), Axis("decode_ms")], ref), total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--truth", action="store_true", help="train every candidate (cached)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--trials", type=int, default=16)
    args = ap.parse_args()
    if args.truth or not TRUTH.exists():
        ground_truth(args.workers)
    truth = json.loads(TRUTH.read_text())
    hv_true, total = true_front(truth)
    print(
        f"ground truth: {len(truth)} candidates, true hypervolume {hv_true:.4g}, "
        f"{total:,.0f} tokens to train them all"
    )
    grid = np.linspace(0, total, 101)
    results = {}
    for strategy in ("default", "random"):
        curves = []
        for seed in range(args.seeds):
            curve = run_strategy(strategy, seed, args.trials)
            xs, ys = zip(*curve)
            step = [max([y for x, y in curve if x <= g], default=0.0) for g in grid]
            curves.append(step)
            print(
                f"{strategy:8s} seed {seed}: {len(curve)} trials, {xs[-1]:,.0f} tokens, "
                f"hypervolume {ys[-1] / hv_true:.3f} of the true front",
                flush=True,
            )
        mean = np.mean(np.array(curves), axis=0) / hv_true
        results[strategy] = {"grid_tokens": grid.tolist(), "mean_hv_fraction": mean.tolist()}
    print("\nmean hypervolume fraction at a share of the compute of training every candidate:")
    for share in (0.1, 0.25, 0.5):
        i = int(share * 100)
        print(
            f"  {share:4.0%}: default {results['default']['mean_hv_fraction'][i]:.3f}, "
            f"random {results['random']['mean_hv_fraction'][i]:.3f}"
        )
    out = HERE / "results" / "search_efficiency.json"
    out.write_text(
        json.dumps(
            {
                "true_hypervolume": hv_true,
                "total_tokens": total,
                "seeds": args.seeds,
                "trials": args.trials,
                **results,
            },
            indent=1,
        )
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for strategy, r in results.items():
        ax.plot(np.array(r["grid_tokens"]) / total, r["mean_hv_fraction"], label=strategy)
    ax.set_xlabel("training compute spent (share of training every candidate once)")
    ax.set_ylabel("hypervolume / true hypervolume")
    ax.set_title(f"search_small: mean over {args.seeds} seeds")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(HERE / "results" / "search_efficiency.png", dpi=110)
    print(f"saved {out} and search_efficiency.png")


if __name__ == "__main__":
    main()
