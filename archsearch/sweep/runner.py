"""`archsearch sweep`: a YAML space becomes a stored multi-objective study.

Order of work, so that bad input never touches the study: load the space and the device, check
the storage is reachable, start (or reach) Ray, check the space has a feasible candidate, and
only then create or reopen the study. A rerun of the same command reopens the same study
(`run_dir/study.db`, named after the space): its completed trials are kept, trials left RUNNING
by a driver that died are marked FAIL ("interrupted") and enqueued again, and the sweep goes on
until the study holds `trials` trained trials.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from archsearch.errors import UserError
from archsearch.space import SearchSpace
from archsearch.sweep.bridge import ArchSearcher, StudyRecorder, SweepState
from archsearch.sweep.study import check_storage_reachable, default_storage_url, open_storage

FEASIBILITY_PROBES = 2000  # candidates checked for feasibility before a sweep starts


def contain_ray(verbose: bool) -> None:
    """Keep Ray's files and tokens out of the home directory and its logs quiet."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    if not verbose:
        for name in ("ray", "ray.tune", "ray.train", "ray.air", "ray.data"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)


def ray_temp_dir() -> str:
    """Ray's session files under the system temp dir (AF_UNIX socket paths must stay short)."""
    return tempfile.mkdtemp(prefix="archsearch-ray-")


def check_address(address: str) -> None:
    if address in ("auto", "local") or address.startswith("ray://"):
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=3):
            pass
    except (OSError, ValueError):
        raise UserError(f"cannot reach a Ray cluster at {address!r}", key="ray.address") from None


@contextlib.contextmanager
def ray_session(address: str | None, num_cpus: int | None, verbose: bool):
    import ray

    if ray.is_initialized():  # e.g. the caller manages Ray
        yield
        return
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": verbose,
        "logging_level": logging.INFO if verbose else logging.ERROR,
    }
    # settings for our own code (ARCHSEARCH_*) reach the workers of an existing cluster too
    env_vars = {k: v for k, v in os.environ.items() if k.startswith("ARCHSEARCH_")}
    if env_vars:
        kwargs["runtime_env"] = {"env_vars": env_vars}
    temp_dir = None
    try:
        if address:
            check_address(address)
            ray.init(address=address, **kwargs)
        else:
            temp_dir = ray_temp_dir()
            ray.init(num_cpus=num_cpus or os.cpu_count(), _temp_dir=temp_dir, **kwargs)
    except ConnectionError as err:
        raise UserError(
            f"cannot reach a Ray cluster at {address!r}: {str(err).splitlines()[0]}",
            key="ray.address",
        ) from None
    try:
        yield
    finally:
        ray.shutdown()
        if temp_dir:  # Ray leaves its session files behind
            import shutil

            shutil.rmtree(temp_dir, ignore_errors=True)


def check_feasible(space: SearchSpace, device: str) -> int:
    """Return how many of the first candidates are feasible; raise when none is."""
    import math
    import random

    from archsearch.space import assignments, build, count
    from archsearch.space.candidates import sample_assignment
    from archsearch.sweep.bridge import _value, price

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
        costs, device_costs = price(space, [device], cand.arch)
        ok = True
        for c in space.constraints:
            spec = c.spec.with_device(device)
            if c.violation(_value(spec.label, costs, device_costs, device)) > 0:
                reasons[c.name] = reasons.get(c.name, 0) + 1
                ok = False
        if ok:
            return 1
    detail = ", ".join(f"{k} x{v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1]))
    raise UserError(
        f"no feasible candidate in {space.name!r} (checked {seen_valid} valid "
        f"candidates; rejected by: {detail or 'nothing'})",
        key="search_space",
    )


def make_sampler(name: str, seed: int, n_trials: int):
    import warnings

    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if name == "tpe":
        return optuna.samplers.TPESampler(
            seed=seed,
            multivariate=True,
            group=True,
            constant_liar=True,
            n_startup_trials=max(4, min(10, n_trials // 3)),
        )
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(8, min(50, n_trials)))
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise UserError(f"unknown sampler {name!r} (known: tpe, nsga2, random)", key="sampler")


def make_scheduler(kind: str, metric: str | None, mode: str, n_evals: int):
    if kind == "none" or metric is None:
        return None
    from ray.tune.schedulers import ASHAScheduler, MedianStoppingRule

    if kind == "asha":
        return ASHAScheduler(
            metric=metric,
            mode=mode,
            time_attr="training_iteration",
            max_t=n_evals,
            grace_period=1,
            reduction_factor=2,
        )
    if kind == "median":
        return MedianStoppingRule(
            metric=metric,
            mode=mode,
            time_attr="training_iteration",
            grace_period=1,
            min_samples_required=3,
        )
    raise UserError(
        f"unknown early_stopping {kind!r} (known: asha, median, none)", key="early_stopping"
    )


def mark_interrupted(study) -> list[dict[str, Any]]:
    """Trials left RUNNING by a driver that died: FAIL them and return their params to re-run."""
    import optuna

    again = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study._storage.set_trial_user_attr(t._trial_id, "status", "interrupted")
        study._storage.set_trial_user_attr(
            t._trial_id, "reason", "the sweep driver stopped while this trial ran"
        )
        study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
        if t.params:
            again.append(dict(t.params))
    return again


def trained_so_far(study) -> tuple[int, dict[str, int]]:
    """Trained trials already in the study, and arch hash -> trial number of finished ones."""
    from archsearch.sweep.study import records

    trained, done = 0, {}
    for r in records(study):
        if r.status in ("trained", "stopped_early", "failed") and r.state != "RUNNING":
            trained += 1
            if "arch_hash" in r.attrs:
                done.setdefault(r.attrs["arch_hash"], r.number)
    return trained, done


# ---- the sweep --------------------------------------------------------------------------------


def train_settings(space: SearchSpace, cfg: Any) -> dict[str, Any]:
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


def run_sweep(cfg: Any) -> dict[str, Any]:
    import importlib

    from archsearch.cli.space_cmd import open_space
    from archsearch.cost.devices import device_names, load_device

    contain_ray(cfg.ray.verbose)
    space = open_space(cfg)
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
    if cfg.latency.mode not in ("predicted", "measured"):
        raise UserError(
            f"unknown latency mode {cfg.latency.mode!r} (known: predicted, measured)",
            key="latency.mode",
        )
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
    make_scheduler(scheduler_kind, es_metric, es_mode, n_evals)  # validates the name
    check_feasible(space, device)
    module, _, func = cfg.trainable.partition(":")
    try:
        trainable = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError):
        raise UserError(f"cannot import the trainable {cfg.trainable!r}", key="trainable") from None

    with ray_session(cfg.ray.address, cfg.ray.num_cpus, cfg.ray.verbose):
        measure = None
        if cfg.latency.mode == "measured":  # checks the resource before the study is touched
            from archsearch.sweep.measure import remote_measurer

            measure = remote_measurer(space, device, cfg.latency.resource, cfg.latency.repeats)
        run_dir.mkdir(parents=True, exist_ok=True)
        from archsearch.sweep.study import open_study

        devices = sorted({*device_names(), device})
        meta = {
            "space": space.name,
            "space_source": space.source,
            "device": device,
            "objectives": [o.spec.with_device(device).label for o in space.objectives],
            "directions": [o.direction for o in space.objectives],
            "constraints": [c.describe() for c in space.constraints],
            "train": train,
            "devices": devices,
            "version": 1,
        }
        study, existed = open_study(open_storage(url), study_name, meta, sampler)
        for params in mark_interrupted(study):
            study.enqueue_trial(params, skip_if_exists=False)
        trained, done = trained_so_far(study)
        state = SweepState(
            study=study,
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
            search_alg=ArchSearcher.create(state),
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
            callbacks=[StudyRecorder.create(state)],
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
    import optuna

    for trials in state.pending_duplicates.values():
        for t in trials:
            t.set_user_attr("reason", "its original trial never finished")
            state.study.tell(t, state=optuna.trial.TrialState.FAIL)
    for launched in state.by_tune_id.values():
        launched.optuna_trial.set_user_attr("status", "interrupted")
        launched.optuna_trial.set_user_attr("reason", "the sweep ended before this trial did")
        state.study.tell(launched.optuna_trial, state=optuna.trial.TrialState.FAIL)
