"""Search efficiency: hypervolume reached against training compute spent.

1. Ground truth (`--truth`, cached in benchmarks/results/search_truth.json): every candidate of
   the 40-candidate space benchmarks/spaces/search_small.yaml is trained once with the real
   sandbox trainer (seeded, deterministic), keeping its eval points; the true Pareto front of
   validation loss vs predicted Raspberry Pi 5 decode latency over the feasible candidates, and
   its hypervolume, follow.
2. Strategies, each a real `archsearch sweep` (Ray Tune + Optuna + SQLite, composed from
   conf/sweep.yaml like the command) whose trainable replays the recorded trials
   (`archsearch.sweep.testing:replay`: what retraining would report, in milliseconds), over
   several seeds:
   - default: today's `archsearch sweep`: cost pruning (constraints checked before training),
     `sampler=auto` (`ehvi` on these spaces: one trained objective, latency predicted) and
     `early_stopping=pareto`;
   - tpe_asha: cost pruning + multi-objective TPE + ASHA on the loss (the default until
     `sampler=auto`);
   - tpe: cost pruning + TPE, no early stopping (every trial trained to the end);
   - pareto: cost pruning + TPE + Pareto-aware early stopping (`early_stopping=pareto`);
   - random: random sampling of the space without its constraints, no early stopping (every
     draw is trained to the end, infeasible or not);
   - ehvi: cost pruning + expected hypervolume improvement over the cost model's known
     objectives (`sampler=ehvi`, archsearch/sweep/ehvi.py), no early stopping;
   - ehvi_pareto: the same with Pareto-aware early stopping;
   - gp: cost pruning + Optuna's Gaussian-process sampler (`sampler=gp`, archsearch/sweep/gp.py:
     log-EHVI over both objectives, the study's untried trials as pending points), no early
     stopping;
   - nsga2: cost pruning + Optuna's NSGA-II, no early stopping.
   Compute spent is the tokens actually trained (a stopped trial counts what it ran). After each
   trial, the hypervolume of the feasible, fully trained front found so far is computed with the
   ground-truth reference point.
Results: mean hypervolume (fraction of the true one) at 25/50/100% of the compute of training
every candidate once (a sweep stops at `--trials` trained trials, so its later share is its final
front), a PNG of the curves, and JSON; for Pareto stopping also how many trials it stopped and
whether any was on the true front.

A second check (`--one-at-a-time`, minutes): the samplers one pick at a time in Optuna alone
(`SAMPLERS`: ehvi, gp, tpe, nsga2, random as the sweep builds them, and Optuna's GPSampler as it
comes), on the space's ground truth and, for search_small, on the recordings of other seeds and
of 10x the budget (benchmarks/results/loss_axis_truth.jsonl, written by
benchmarks/loss_truth.py), after a quarter of the candidates' trainings, with the sampler's wall
time per suggestion. `--space` names another enumerable space
(benchmarks/spaces/search_mixers.yaml: other mixers, widths and depths); its ground truth and
results are kept in files named after it.

    python benchmarks/bench_search_efficiency.py --truth   # once (minutes)
    python benchmarks/bench_search_efficiency.py           # the comparison (5 seeds)
    python benchmarks/bench_search_efficiency.py --one-at-a-time --seeds 10
    python benchmarks/bench_search_efficiency.py --strategies gp,nsga2 --seeds 10
    python benchmarks/bench_search_efficiency.py --gp-cost    # gp's time per suggestion
    python benchmarks/bench_search_efficiency.py --space benchmarks/spaces/search_mixers.yaml \
        --one-at-a-time --seeds 10
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
SPACE = HERE / "spaces" / "search_small.yaml"
TRUTH = HERE / "results" / "search_truth.json"
SUFFIX = ""  # of the result files of a space other than search_small


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
    from archsearch.latency import metric_value

    arch = ArchConfig.from_dict(arch_dict)
    latency = metric_value(arch, space.objectives[1].spec.on_device("rpi5", only_unset=True))
    feasible = all(
        c.violation(metric_value(arch, c.spec.on_device("rpi5", only_unset=True))) <= 0
        for c in space.constraints
    )
    return result["metrics"]["val_loss"], latency, feasible


STRATEGIES = {  # name -> (sampler, early stopping, constraints kept)
    "default": ("auto", "pareto", True),
    "tpe_asha": ("tpe", "asha", True),
    "tpe": ("tpe", "none", True),
    "pareto": ("tpe", "pareto", True),
    "random": ("random", "none", False),
    "ehvi": ("ehvi", "none", True),
    "ehvi_pareto": ("ehvi", "pareto", True),
    "gp": ("gp", "none", True),
    "nsga2": ("nsga2", "none", True),
}


def run_strategy(strategy: str, seed: int, trials: int) -> dict:
    """One sweep: (cumulative tokens, hypervolume) after each trial that trained, in the order
    trials ended, and the arch hashes of the trials stopped early."""
    import optuna

    from archsearch.analysis.front import Axis, hypervolume
    from archsearch.cli.config import compose, to_schema
    from archsearch.space import open_space, parse_space_file
    from archsearch.study import open_storage, records
    from archsearch.sweep import run_sweep

    sampler, early_stopping, constrained = STRATEGIES[strategy]
    truth = json.loads(TRUTH.read_text())
    space = parse_space_file(SPACE)
    with tempfile.TemporaryDirectory() as tmp:
        space_file = SPACE
        if not constrained:  # the same space without its constraints
            text = SPACE.read_text()
            text = text.split("constraints:")[0] + "objectives:" + text.split("objectives:")[1]
            space_file = Path(tmp) / "unconstrained.yaml"
            space_file.write_text(text)
        cfg = to_schema(
            "sweep",
            compose(
                "sweep",
                [
                    f"space_file={space_file}",
                    "device=rpi5",
                    f"trials={trials}",
                    f"sampler={sampler}",
                    f"seed={seed}",
                    f"run_dir={tmp}/run",
                    "concurrency=2",
                    f"early_stopping={early_stopping}",
                    "trainable=archsearch.sweep.testing:replay",
                    "ray.num_cpus=2",
                    "format=json",
                ],
            ),
        )
        os.environ["ARCHSEARCH_REPLAY_CACHE"] = str(TRUTH)
        summary = run_sweep(open_space(search_space=None, space_file=str(space_file)), cfg)
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
    stopped = [r.attrs["arch_hash"] for r in recs if r.status == "stopped_early"]
    return {"curve": curve, "stopped": stopped}


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


def front_hashes(truth) -> set[str]:
    """Arch hashes of the feasible candidates on the true front."""
    from archsearch.space import parse_space_file

    space = parse_space_file(SPACE)
    pts = {r["arch_hash"]: objectives(space, r["arch_dict"], r) for r in _with_arch(truth)}
    feasible = {h: (a, b) for h, (a, b, ok) in pts.items() if ok}
    return {
        h
        for h, p in feasible.items()
        if not any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in feasible.values())
    }


def true_front(truth) -> tuple[float, float]:
    from archsearch.analysis.front import Axis, hypervolume
    from archsearch.space import parse_space_file

    space = parse_space_file(SPACE)
    pts = [objectives(space, r["arch_dict"], r) for r in _with_arch(truth)]
    feasible = np.array([(a, b) for a, b, ok in pts if ok])
    ref = np.array(reference_point(space, truth))
    total = sum(r["tokens"] for r in truth.values())
    return hypervolume(feasible, [Axis("val_loss"), Axis("decode_ms")], ref), total


OTHER_RECORDINGS = (("tokens:160K", 1), ("tokens:160K", 2), ("tokens:1.6M", 0))  # search_small


def recordings() -> dict[str, dict[str, float]]:
    """{label: {arch hash: final loss}}: this space's ground truth, and for search_small the
    recordings of other seeds and of 10x the budget (benchmarks/results/loss_axis_truth.jsonl,
    written by benchmarks/loss_truth.py)."""
    truth = json.loads(TRUTH.read_text())
    out = {"ground truth": {h: r["metrics"]["val_loss"] for h, r in truth.items()}}
    other = HERE / "results" / "loss_axis_truth.jsonl"
    if SPACE.stem == "search_small" and other.exists():
        rows = [json.loads(line) for line in other.open()]
        for budget, seed in OTHER_RECORDINGS:
            out[f"{budget} seed {seed}"] = {
                r["arch_hash"]: r["result"]["metrics"]["val_loss"]
                for r in rows
                if (r["space"], r["budget"], r["seed"]) == ("search_small", budget, seed)
            }
    return out


# the samplers `--one-at-a-time` compares, archsearch's (`sampler=NAME`); `--samplers gp_optuna`
# runs Optuna's GPSampler as it comes (`sampler=gp` without the view of what was tried)
SAMPLERS = ("ehvi", "gp", "tpe", "nsga2", "random")
SWEEP_TRIALS = {"search_small": 16, "search_mixers": 20}  # as the sweeps of the tables ask


def make(name: str, space, seed: int):
    """A sampler of `--one-at-a-time` (see `SAMPLERS`), as the sweep makes it."""
    import optuna

    from archsearch.sweep.ehvi import EHVISampler
    from archsearch.sweep.runner import make_sampler, startup_trials
    from archsearch.sweep.settings import Sampler

    trials = SWEEP_TRIALS.get(SPACE.stem, 16)
    if name == "ehvi":
        return EHVISampler(space, "rpi5", seed)
    if name == "gp_optuna":
        return optuna.samplers.GPSampler(
            seed=seed,
            independent_sampler=make_sampler(Sampler.tpe, seed, trials),
            n_startup_trials=startup_trials(trials),
            warn_independent_sampling=False,
        )
    return make_sampler(Sampler(name), seed, trials)


def one_pick_at_a_time(
    seeds: int, samplers: tuple[str, ...] = SAMPLERS, skip_limit: int = 500
) -> dict:
    """The samplers on each recording, one pick at a time in Optuna alone (no Ray, no early
    stopping; an infeasible or repeated ask told PRUNED, as the sweep does): the share of the
    true hypervolume after a quarter of the candidates' trainings, mean and lowest over seeds,
    and the sampler's wall time: per ask (Optuna's `ask` and the space's define-by-run
    suggestions; pricing and telling are the sweep's, not the sampler's) and per training
    (every ask it took to reach a new feasible candidate). A seed that gets `skip_limit`
    untrainable suggestions in a row stops there, stalled (the sweep gives up after
    `searcher.SKIP_LIMIT`, 500), with the front it found."""
    import optuna

    from archsearch.analysis.hypervolume import hypervolume
    from archsearch.space import parse_space_file, suggest
    from archsearch.sweep.pricing import assess

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = parse_space_file(SPACE)
    candidates = _with_arch(json.loads(TRUTH.read_text()))
    latency = {}
    for r in candidates:
        _, lat, feasible = objectives(space, r["arch_dict"], r)
        if feasible:
            latency[r["arch_hash"]] = lat
    picks = round(0.25 * len(candidates))  # a quarter of the compute: all train as long
    out = {}
    for label, loss in recordings().items():
        truth = {h: (loss[h], lat) for h, lat in latency.items() if h in loss}
        pts = np.array(list(truth.values()))
        ref = pts.max(axis=0) + 0.1 * (pts.max(axis=0) - pts.min(axis=0))
        whole = hypervolume(pts, ref)
        got_by = {}
        for name in samplers:
            if name == "gp_optuna" and label != "ground truth":
                continue  # it shows the stall; once is enough
            shares, seconds, asks, stalled = [], [], 0, 0
            for s in range(seeds):
                sampler = make(name, space, s)
                study = optuna.create_study(directions=["minimize"] * 2, sampler=sampler)
                picked: list[str] = []
                skipped = 0  # untrainable suggestions in a row
                while len(picked) < min(picks, len(truth)) and skipped < skip_limit:
                    t0 = time.perf_counter()  # the sampler's share of one ask: ask + suggest
                    trial = study.ask()
                    params = suggest(space, trial)
                    seconds.append(time.perf_counter() - t0)
                    got = assess(space, [], "rpi5", params)
                    for key, v in (got.priced.violations if got.priced else {}).items():
                        trial.set_constraint(key, v)  # as the sweep's writer stores them
                    h = got.priced.arch.arch_hash if got.status is None else None
                    if h not in truth or h in picked:
                        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                        skipped += 1
                        continue
                    study.tell(trial, list(truth[h]))
                    picked.append(h)
                    skipped = 0
                stalled += skipped >= skip_limit
                asks += len(study.trials)
                shares.append(hypervolume(np.array([truth[h] for h in picked]), ref) / whole)
            got_by[name] = {
                "mean": float(np.mean(shares)),
                "lowest": float(np.min(shares)),
                "by_seed": [float(x) for x in shares],
                "asks_per_training": asks / (seeds * picks),
                "seconds_per_ask": float(np.mean(seconds)),
                "seconds_per_ask_max": float(np.max(seconds)),
                "seconds_per_training": float(np.sum(seconds)) / (seeds * picks),
                "stalled_seeds": stalled,  # seeds that gave up: skip_limit untrainable in a row
            }
        out[label] = {"picks": picks, "feasible_recorded": len(truth), **got_by}
        print(
            f"{SPACE.stem}, {label} ({len(truth)} feasible recorded): after {picks} trainings "
            + ", ".join(
                f"{k} {v['mean']:.3f} ({v['lowest']:.3f}; {v['seconds_per_training'] * 1e3:.0f} "
                f"ms/training, {v['asks_per_training']:.1f} asks)"
                for k, v in got_by.items()
            ),
            flush=True,
        )
    return out


GP_COST_TRIALS = (10, 25, 50, 100, 200, 400)


def gp_cost(asks: int = 3) -> dict:
    """The `gp` sampler's wall time per suggestion against the completed trials it fits: a
    study of the `tiny` space with n completed trials (random feasible candidates, the
    synthetic loss and the predicted latency), then `asks` suggestions timed."""
    import optuna

    from archsearch.space import load_space, suggest
    from archsearch.sweep.pricing import assess
    from archsearch.sweep.runner import make_sampler
    from archsearch.sweep.settings import Sampler
    from archsearch.sweep.testing import synthetic_loss

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = load_space("tiny")
    out = {}
    for n in GP_COST_TRIALS:
        study = optuna.create_study(
            directions=["minimize"] * 2, sampler=optuna.samplers.RandomSampler(seed=n)
        )
        while len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) < n:
            trial = study.ask()
            got = assess(space, [], "rpi5", suggest(space, trial))
            if got.status is not None:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                continue
            for key, v in got.priced.violations.items():
                trial.set_constraint(key, v)
            latency = got.priced.value(space.objectives[1].spec, "rpi5")
            study.tell(trial, [synthetic_loss(got.priced.arch.to_dict()), latency])
        study.sampler = make_sampler(Sampler.gp, 0, n)
        seconds = []
        for _ in range(asks):
            t0 = time.perf_counter()
            trial = study.ask()
            suggest(space, trial)
            seconds.append(time.perf_counter() - t0)
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        out[str(n)] = {"mean_s": float(np.mean(seconds)), "max_s": float(np.max(seconds))}
        print(f"gp with {n} completed trials: {np.mean(seconds):.2f} s per suggestion", flush=True)
    return out


def provenance(seconds: float) -> dict:
    """What a result file records of how it was made: the command, the machine, the date."""
    import platform
    import sys
    from datetime import datetime, timezone

    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in _lines("/proc/cpuinfo") if "model name" in ln),
        platform.processor(),
    )
    return {
        "command": "python " + " ".join(sys.argv),
        "machine": {
            "cpu": cpu,
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_avg_at_end": list(os.getloadavg()),
        },
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_s": round(seconds, 1),
    }


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def main() -> None:
    global SPACE, TRUTH, SUFFIX
    ap = argparse.ArgumentParser()
    ap.add_argument("--truth", action="store_true", help="train every candidate (cached)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--samplers", default=",".join(SAMPLERS), help="for --one-at-a-time")
    ap.add_argument(
        "--skip-limit", type=int, default=100, help="--one-at-a-time: untrainable asks in a row"
    )
    ap.add_argument("--tag", default="", help="--one-at-a-time: a suffix of the result file")
    ap.add_argument(
        "--gp-cost", action="store_true", help="only: gp's seconds per suggestion by trials fitted"
    )
    ap.add_argument("--space", default=str(SPACE), help="an enumerable space file")
    ap.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="only: the samplers one pick at a time on the space's recordings (no Ray)",
    )
    args = ap.parse_args()
    SPACE = Path(args.space).resolve()
    if SPACE.stem != "search_small":  # every space keeps its own ground truth and results
        SUFFIX = f"_{SPACE.stem}"
        TRUTH = HERE / "results" / f"search_truth{SUFFIX}.json"
    if args.truth or not TRUTH.exists():
        ground_truth(args.workers)
    if args.gp_cost:
        t0 = time.time()
        got = gp_cost()
        path = HERE / "results" / "search_efficiency_gp_cost.json"
        path.write_text(json.dumps({**provenance(time.time() - t0), "by_trials": got}, indent=1))
        print(f"saved {path}")
        return
    if args.one_at_a_time:
        t0 = time.time()
        got = one_pick_at_a_time(args.seeds, tuple(args.samplers.split(",")), args.skip_limit)
        tag = f"_{args.tag}" if args.tag else ""
        path = HERE / "results" / f"search_efficiency_one_at_a_time{SUFFIX}{tag}.json"
        head = {"space": SPACE.stem, "seeds": args.seeds, **provenance(time.time() - t0)}
        path.write_text(json.dumps({**head, **got}, indent=1))
        print(f"saved {path}")
        return
    truth = json.loads(TRUTH.read_text())
    hv_true, total = true_front(truth)
    on_front = front_hashes(truth)
    print(
        f"ground truth: {len(truth)} candidates, true hypervolume {hv_true:.4g}, "
        f"{total:,.0f} tokens to train them all, {len(on_front)} on the true front"
    )
    grid = np.linspace(0, total, 101)
    shares = (0.25, 0.5, 1.0)
    results = {}
    for strategy in args.strategies.split(","):
        started = time.time()
        curves, per_seed, stopped, stopped_on_front = [], [], 0, 0
        for seed in range(args.seeds):
            t0 = time.time()
            got = run_strategy(strategy, seed, args.trials)
            curve = got["curve"]
            xs, ys = zip(*curve)
            step = [max([y for x, y in curve if x <= g], default=0.0) for g in grid]
            curves.append(step)
            stopped += len(got["stopped"])
            stopped_on_front += len(on_front.intersection(got["stopped"]))
            per_seed.append([step[int(100 * s)] / hv_true for s in shares])
            print(
                f"{strategy:8s} seed {seed}: {len(curve)} trials ({len(got['stopped'])} stopped "
                f"early, {len(on_front.intersection(got['stopped']))} of them on the true front), "
                f"{xs[-1]:,.0f} tokens, hypervolume {ys[-1] / hv_true:.3f} of the true front at "
                f"the end, {step[25] / hv_true:.3f} at 25% of the compute "
                f"({time.time() - t0:.0f} s)",
                flush=True,
            )
        mean = np.mean(np.array(curves), axis=0) / hv_true
        results[strategy] = {
            "sampler": STRATEGIES[strategy][0],
            "early_stopping": STRATEGIES[strategy][1],
            "constraints": STRATEGIES[strategy][2],
            "grid_tokens": grid.tolist(),
            "mean_hv_fraction": mean.tolist(),
            "hv_fraction_by_seed": {
                f"{s:.0%}": [p[i] for p in per_seed] for i, s in enumerate(shares)
            },
            "stopped_early": stopped,
            "stopped_on_true_front": stopped_on_front,
            "measured": provenance(time.time() - started),  # this strategy's run
        }
    out = HERE / "results" / f"search_efficiency{SUFFIX}.json"
    if out.exists():  # strategies not run this time keep their figures from the same setting
        before = json.loads(out.read_text())
        if (before.get("seeds"), before.get("trials")) == (args.seeds, args.trials):
            kept = {k: before[k] for k in STRATEGIES if k in before and k not in results}
            results = {
                k: results[k] if k in results else kept[k]
                for k in STRATEGIES
                if k in results or k in kept
            }
    print(
        "\nmean hypervolume fraction (min over seeds) at a share of the compute of training every "
        "candidate once:"
    )
    print("  strategy   " + "  ".join(f"{s:>13.0%}" for s in shares))
    for strategy, r in results.items():
        means = [r["mean_hv_fraction"][int(100 * s)] for s in shares]
        lows = [min(r["hv_fraction_by_seed"][f"{s:.0%}"]) for s in shares]
        cells = [f"{m:.3f} ({lo:.3f})" for m, lo in zip(means, lows)]
        print(f"  {strategy:9s}  " + "  ".join(f"{c:>13s}" for c in cells))
    out.write_text(
        json.dumps(
            {
                "true_hypervolume": hv_true,
                "total_tokens": total,
                "true_front_size": len(on_front),
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

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for strategy, r in results.items():
        label = f"{strategy} ({r['sampler']}, early stopping {r['early_stopping']})"
        ax.plot(np.array(r["grid_tokens"]) / total, r["mean_hv_fraction"], label=label)
    ax.axhline(0.95, color="grey", lw=0.8, ls="--")
    ax.axvline(0.25, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("training compute spent (share of the tokens of training every candidate once)")
    ax.set_ylabel("hypervolume / true hypervolume")
    ax.set_title(f"{SPACE.stem}: mean over {args.seeds} seeds, sweeps of {args.trials} trials")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(HERE / "results" / f"search_efficiency{SUFFIX}.png", dpi=110)
    print(f"saved {out} and search_efficiency{SUFFIX}.png")


if __name__ == "__main__":
    main()
