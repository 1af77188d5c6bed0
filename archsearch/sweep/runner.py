"""`archsearch sweep`: a YAML space becomes a stored multi-objective study.

Order of work, so that bad input never touches the study: check the settings and the device,
check the storage is reachable, start (or reach) Ray, check the space has a feasible candidate,
and only then create or reopen the study. A rerun of the same command reopens the same study
(`run_dir/study.db`, named after the space): its completed trials are kept, trials left RUNNING
by a driver that died are marked FAIL ("interrupted") and enqueued again, and the sweep goes on
until the study holds `trials` trained trials.
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from typing import Any

from archsearch.errors import UserError
from archsearch.space import SearchSpace
from archsearch.study import (
    Status,
    StudyMeta,
    StudyWriter,
    check_storage_reachable,
    default_storage_url,
    open_storage,
)
from archsearch.sweep.pricing import price
from archsearch.sweep.ray_runtime import contain_ray, ray_session
from archsearch.sweep.recorder import create_recorder
from archsearch.sweep.searcher import create_searcher
from archsearch.sweep.settings import EarlyStopping, LatencyMode, Sampler, SweepConfig
from archsearch.sweep.state import SweepState

__all__ = ["check_feasible", "run_sweep", "train_settings"]

FEASIBILITY_PROBES = 2000  # candidates checked for feasibility before a sweep starts


def check_feasible(space: SearchSpace, device: str) -> int:
    """Return how many of the first candidates are feasible; raise when none is."""
    from archsearch.space import assignments, build, count
    from archsearch.space.candidates import sample_assignment

    size = count(space)
    if math.isinf(size) or size > FEASIBILITY_PROBES:
        rng = random.Random(0)
        source = (sample_assignment(space, rng) for _ in range(FEASIBILITY_PROBES))
    else:
        source = assignments(space)
    seen_valid = 0
    reasons: dict[str, int] = {}
    for a in source:
        cand = build(space, a)
        if not cand.ok:
            reasons[cand.reason] = reasons.get(cand.reason, 0) + 1
            continue
        seen_valid += 1
        priced = price(space, [], device, cand.arch)
        if priced.feasible:
            return 1
        for name, v in priced.violations.items():
            if v > 0:
                reasons[name] = reasons.get(name, 0) + 1
    detail = ", ".join(f"{k} x{v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1]))
    raise UserError(
        f"no feasible candidate in {space.name!r} (checked {seen_valid} valid "
        f"candidates; rejected by: {detail or 'nothing'})",
        key="search_space",
    )


def make_sampler(name: Sampler, seed: int, n_trials: int):
    """Optuna's sampler by name (Hydra has checked the name: `Sampler`)."""
    import warnings

    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if name == Sampler.tpe:
        return optuna.samplers.TPESampler(
            seed=seed,
            multivariate=True,
            group=True,
            constant_liar=True,
            n_startup_trials=max(4, min(10, n_trials // 3)),
        )
    if name == Sampler.nsga2:
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(8, min(50, n_trials)))
    return optuna.samplers.RandomSampler(seed=seed)


def make_scheduler(kind: EarlyStopping, metric: str | None, mode: str, n_evals: int):
    """Ray Tune's early-stopping rule on the first training objective (None: none)."""
    if kind == EarlyStopping.none or metric is None:
        return None
    from ray.tune.schedulers import ASHAScheduler, MedianStoppingRule

    if kind == EarlyStopping.asha:
        return ASHAScheduler(
            metric=metric,
            mode=mode,
            time_attr="training_iteration",
            max_t=n_evals,
            grace_period=1,
            reduction_factor=2,
        )
    return MedianStoppingRule(
        metric=metric,
        mode=mode,
        time_attr="training_iteration",
        grace_period=1,
        min_samples_required=3,
    )


def trained_so_far(writer: StudyWriter) -> tuple[int, dict[str, int]]:
    """Trials that took training compute already in the study, and arch hash -> trial number
    of finished ones."""
    trained, done = 0, {}
    for r in writer.records():
        if r.status in {s.value for s in Status if s.took_budget} and r.state != "RUNNING":
            trained += 1
            if "arch_hash" in r.attrs:
                done.setdefault(r.attrs["arch_hash"], r.number)
    return trained, done


# ---- the sweep --------------------------------------------------------------------------------


def train_settings(space: SearchSpace, cfg: SweepConfig) -> dict[str, Any]:
    """The space's `train:` mapping, the command's `train.*` and `budget=` on top, and the probe
    tasks the objectives need; validated (errors name `train.KEY`)."""
    from archsearch.trainers.config import TrainConfig

    settings = {**space.train, **dict(cfg.train or {})}
    if cfg.budget:
        settings["budget"] = cfg.budget
    tasks = [o.spec.arg("task") for o in space.objectives if o.spec.metric == "probe_acc"]
    lm = any(o.spec.metric in ("val_loss", "val_ppl") for o in space.objectives)
    if tasks:
        settings.setdefault("objective", "both" if lm else "probe")
        settings.setdefault("probe_tasks", sorted(set(tasks)))
    TrainConfig.from_dict(settings, source=space.source if space.train else None, prefix="train")
    return settings


def early_stopping_metric(space: SearchSpace) -> tuple[str | None, str]:
    for o in space.objectives:
        if o.spec.phase == "train":
            return o.spec.label, "min" if o.direction == "minimize" else "max"
    return None, "min"


def run_sweep(space: SearchSpace, cfg: SweepConfig) -> dict[str, Any]:
    """Run the sweep `cfg` (the `sweep` command's settings) over the parsed `space`; returns
    the summary also written to `run_dir/sweep.json`."""
    import importlib

    from archsearch.cost.devices import device_names, load_device

    contain_ray(cfg.ray.verbose)
    device = load_device(cfg.device).name
    if not space.objectives:
        raise UserError("the space names no objectives", source=space.source, key="objectives")
    for key, value in (
        ("trials", cfg.trials),
        ("concurrency", cfg.concurrency),
        ("cpus_per_trial", cfg.cpus_per_trial),
    ):
        if value <= 0:
            raise UserError(f"must be positive, got {value}", key=key)
    study_name = cfg.study_name or space.name
    run_dir = Path(cfg.run_dir or Path("runs") / study_name).resolve()
    url = cfg.storage.url or default_storage_url(run_dir)
    if cfg.storage.url:
        check_storage_reachable(url)
    train = train_settings(space, cfg)
    sampler = make_sampler(cfg.sampler, cfg.seed, cfg.trials)
    es_metric, es_mode = early_stopping_metric(space)
    from archsearch.trainers.config import TrainConfig

    n_evals = len({*TrainConfig.from_dict(train).eval_at, 1.0})
    scheduler_kind = cfg.early_stopping
    check_feasible(space, device)
    module, _, func = cfg.trainable.partition(":")
    try:
        trainable = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError):
        raise UserError(f"cannot import the trainable {cfg.trainable!r}", key="trainable") from None

    with ray_session(cfg.ray.address, cfg.ray.num_cpus, cfg.ray.verbose):
        measure = None
        if (
            cfg.latency.mode == LatencyMode.measured
        ):  # checks the resource before the study is touched
            from archsearch.sweep.measure import remote_measurer

            measure = remote_measurer(space, device, cfg.latency.resource, cfg.latency.repeats)
        run_dir.mkdir(parents=True, exist_ok=True)
        devices = sorted({*device_names(), device})
        meta = StudyMeta.for_space(space, device, devices, train)
        writer, existed = StudyWriter.create_or_open(open_storage(url), study_name, meta, sampler)
        for params in writer.mark_interrupted():
            writer.study.enqueue_trial(params, skip_if_exists=False)
        trained, done = trained_so_far(writer)
        state = SweepState(
            writer=writer,
            space=space,
            device=device,
            devices=devices,
            train=train,
            run_dir=run_dir,
            target=cfg.trials,
            trained=trained,
            done_by_hash=done,
            es_metric=es_metric,
        )
        state.measure = measure
        t0 = time.time()
        if trained < cfg.trials:
            _fit(state, trainable, cfg, scheduler_kind, es_metric, es_mode, n_evals)
        _finish_stragglers(state)
    summary = {
        "study_name": study_name,
        "storage": url,
        "run_dir": str(run_dir),
        "resumed": existed,
        "wall_s": round(time.time() - t0, 1),
        "counts": dict(state.counts),
        "trained_in_study": state.trained,
        "exhausted": state.exhausted,
        "device": device,
    }
    (run_dir / "sweep.json").write_text(json.dumps(summary, indent=2))
    return summary


def _fit(state: SweepState, trainable, cfg, scheduler_kind, es_metric, es_mode, n_evals) -> None:
    from ray import tune

    from archsearch.sweep.progress import SweepProgress

    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": cfg.cpus_per_trial}),
        tune_config=tune.TuneConfig(
            search_alg=create_searcher(state),
            scheduler=make_scheduler(scheduler_kind, es_metric, es_mode, n_evals),
            num_samples=-1,
            max_concurrent_trials=cfg.concurrency,
            reuse_actors=True,
            trial_dirname_creator=lambda t: f"trial_{t.trial_id}",
            trial_name_creator=lambda t: f"trial_{t.trial_id}",
        ),
        run_config=tune.RunConfig(
            name=f"tune-{time.strftime('%Y%m%d-%H%M%S')}",
            storage_path=str(state.run_dir / "ray"),
            verbose=1 if cfg.ray.verbose else 0,
            callbacks=[create_recorder(state)],
            failure_config=tune.FailureConfig(max_failures=0),
            log_to_file=True,
        ),
    )
    with SweepProgress(state, enabled=cfg.format == "table") as progress:
        state.on_change = progress.update
        tuner.fit()
        state.on_change = None


def _finish_stragglers(state: SweepState) -> None:
    """Trials still open when Tune stopped (duplicates waiting on a trial that never ended)."""
    for trials in state.pending_duplicates.values():
        for t in trials:
            state.writer.finish(
                t, Status.DUPLICATE, "its original trial never finished", failed=True
            )
    for launched in state.by_tune_id.values():
        state.writer.finish(
            launched.optuna_trial, Status.INTERRUPTED, "the sweep ended before this trial did"
        )
