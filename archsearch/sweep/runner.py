"""`archsearch sweep`: a YAML space becomes a stored multi-objective study.

Order of work, so that bad input never touches the study: check the settings and the device,
check the storage is reachable, start (or reach) Ray, check the space has a feasible candidate,
and only then create or reopen the study. A rerun of the same command reopens the same study
(`run_dir/study.db`, named after the space): its completed trials are kept, trials left RUNNING
by a driver that died are marked FAIL ("interrupted") and enqueued again, and the sweep goes on
until the study holds `trials` fully trained trials (trials stopped early, failed, infeasible,
invalid or duplicate are counted beside, never in `trials`), the space is exhausted, or
`max_failures` trials failed in this run. Ctrl-C marks the trials in flight interrupted,
enqueues them for the next run, writes `sweep.json` and raises `KeyboardInterrupt` with what
was interrupted.
"""

from __future__ import annotations

import json
import math
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from archsearch.errors import CtrlC, UserError
from archsearch.resources import check_name, check_writable_dir
from archsearch.space import SearchSpace
from archsearch.study import (
    Status,
    StudyMeta,
    StudyWriter,
    check_storage_reachable,
    check_study_storage,
    default_storage_url,
    open_storage,
    study_names,
)
from archsearch.sweep.drivers import (
    GRACE_S,
    HEARTBEAT_S,
    Driver,
    Heartbeat,
    reap_dead,
    requeue_stale,
    sync,
)
from archsearch.sweep.pricing import assess
from archsearch.sweep.ray_runtime import contain_ray, ray_session, tuner
from archsearch.sweep.recorder import create_recorder, record_measured
from archsearch.sweep.reference import study_reference
from archsearch.sweep.retrain import (
    DRIVER_CPUS,
    Resources,
    after_sweep,
    check_retrain,
    import_trainable,
)
from archsearch.sweep.searcher import create_searcher, settle_duplicates
from archsearch.sweep.settings import EarlyStopping, LatencyMode, Sampler, SweepConfig
from archsearch.sweep.state import SweepState

__all__ = ["check_feasible", "run_sweep", "train_settings"]

FEASIBILITY_PROBES = 2000  # candidates checked for feasibility before a sweep starts


def check_feasible(space: SearchSpace, device: str) -> int:
    """Return how many of the first candidates are feasible; raise when none is. A candidate
    that raises while it is built or priced counts as rejected (`assess`)."""
    from archsearch.space import draws

    seen_valid = 0
    reasons: dict[str, int] = {}
    for a in draws(space, FEASIBILITY_PROBES):
        got = assess(space, [], device, a)
        if got.status is None:
            return 1
        seen_valid += got.priced is not None
        for kind in got.kinds:
            kind = got.reason if kind == "error" else kind
            reasons[kind] = reasons.get(kind, 0) + 1
    detail = ", ".join(f"{k} x{v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1]))
    raise UserError(
        f"no feasible candidate in {space.name!r} (checked {seen_valid} valid "
        f"candidates; rejected by: {detail or 'nothing'})",
        key="search_space",
    )


def resolve_sampler(name: Sampler, space: SearchSpace, latency: LatencyMode) -> Sampler:
    """`auto` -> `ehvi` where it applies: the space has exactly one objective that training
    measures (`ehvi` models that one) and latencies are predicted (its other objectives are
    then known before training); else `tpe`. Other names as they are. Why (numbers in
    docs/benchmarks/samplers.md): at a quarter of the compute `ehvi` was ahead of every other
    sampler, `gp` included, in the mean and the lowest seed on both benchmark spaces; where it
    does not apply, `gp` was not ahead of `tpe` everywhere (behind it at a quarter of the
    compute in real sweeps of one space) and takes seconds per suggestion against
    milliseconds, so `tpe` stays the default there and `gp` is asked for by name."""
    from archsearch.sweep.ehvi import trained_objective

    if name != Sampler.auto:
        return name
    if latency != LatencyMode.predicted:
        return Sampler.tpe
    try:
        trained_objective(space)  # the check that refuses `sampler=ehvi` where it cannot work
    except UserError:
        return Sampler.tpe
    return Sampler.ehvi


def startup_trials(n_trials: int) -> int:
    """Trials `tpe` and `gp` draw before they model anything (a third of a short sweep)."""
    return max(4, min(10, n_trials // 3))


def make_sampler(
    name: Sampler, seed: int, n_trials: int, space: SearchSpace | None = None, device: str = ""
):
    """The sampler by name (Hydra has checked the name: `Sampler`); `ehvi` needs the space and
    the run's device (its known objectives are priced there)."""
    import warnings

    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    startup = startup_trials(n_trials)
    if name == Sampler.tpe:
        return optuna.samplers.TPESampler(
            seed=seed, multivariate=True, group=True, constant_liar=True, n_startup_trials=startup
        )
    if name == Sampler.gp:  # Optuna's GP; conditional parameters drawn by the tpe path's TPE
        from archsearch.sweep.gp import GPSearch

        tpe = optuna.samplers.TPESampler(
            seed=seed, multivariate=True, group=True, constant_liar=True, n_startup_trials=startup
        )
        return GPSearch(seed, startup, tpe)
    if name == Sampler.ehvi:
        from archsearch.sweep.ehvi import EHVISampler

        assert space is not None, "the ehvi sampler prices the space's candidates"
        return EHVISampler(space, device, seed)
    if name == Sampler.nsga2:
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(8, min(50, n_trials)))
    return optuna.samplers.RandomSampler(seed=seed)


def make_scheduler(
    kind: EarlyStopping,
    metric: str | None,
    mode: str,
    n_evals: int,
    state: SweepState | None = None,
):
    """Ray Tune's early-stopping rule (None: none): ASHA or the median rule on the first
    training objective `metric`, or Pareto-aware stopping on the objective vector (reads the
    study through `state`)."""
    if kind == EarlyStopping.none or metric is None:
        return None
    if kind == EarlyStopping.pareto:
        from archsearch.sweep.pareto_stopping import create_scheduler

        assert state is not None, "Pareto-aware early stopping reads the sweep's state"
        return create_scheduler(state, metric, mode)
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
    """Fully trained trials already in the study, and arch hash -> trial number of every
    trial that spent training compute (trained, stopped early or failed: not tried again)."""
    trained, done = 0, {}
    for r in writer.records():
        if r.state == "RUNNING" or r.status not in {s.value for s in Status if s.spent_compute}:
            continue
        trained += r.status == Status.TRAINED
        if "arch_hash" in r.attrs:
            done.setdefault(r.attrs["arch_hash"], r.number)
    return trained, done


def study_counts(writer: StudyWriter) -> dict[str, int]:
    """Trials in the study by status."""
    counts: dict[str, int] = {}
    for r in writer.records():
        key = r.status or r.state.lower()
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


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


def check_placement(cfg: SweepConfig, train: dict[str, Any]) -> None:
    """Refuse, before Ray starts, settings no trial could run under: a CUDA trial without GPUs
    (or, on a local Ray, on a machine without CUDA), fp16 on CPU-only trials, a global batch
    that does not split between the workers."""
    from archsearch.trainers.config import TrainConfig, check_cpu_precision

    tc = TrainConfig.from_dict(train)
    where = str(tc.device)
    if where == "cuda" and cfg.gpus_per_trial == 0:
        raise UserError("cuda trials need gpus_per_trial > 0", key="train.device")
    if where == "auto" and cfg.gpus_per_trial == 0:
        where = "cpu"  # what auto resolves to in a trial Ray assigned no GPU
    try:  # the driver's machine is the cluster (or the trial runs on the CPU)
        if where == "cpu":  # what the CPU refuses needs no torch import
            check_cpu_precision(tc.precision)
        elif where != "auto" and (where != "cuda" or not cfg.ray.address):
            from archsearch.trainers.device import Placement, resolve_device

            resolve_device(where, tc.precision, Placement())
    except UserError as err:
        raise UserError(err.detail, key=f"train.{err.key}") from None
    workers = cfg.workers_per_trial
    share = tc.batch_size // workers
    if tc.batch_size % workers or share % (tc.micro_batch_size or share):
        raise UserError(
            f"train.batch_size {tc.batch_size} does not split into {workers} equal shares of "
            f"whole micro batches ({tc.micro_batch_size or share})",
            key="workers_per_trial",
        )


def check_latency_runtime(cfg: SweepConfig, device: str) -> None:
    """`latency.runtime` names where latency is measured (`latency.mode=measured`), or, for
    predicted latency, the runtime the device's kernel predictor was calibrated in: refuse one
    that the profile was not calibrated in (its numbers would silently be another runtime's),
    and a deploy runtime whose packages a local Ray lacks (`runtimes.require`)."""
    runtime = str(cfg.latency.runtime)
    if cfg.latency.mode == LatencyMode.predicted:
        if runtime == "torch":
            return  # the default: whatever the profile was fitted to, as before
        from archsearch.latency import load_device

        learned = load_device(device).predictor
        if learned is None or learned.runtime != runtime:
            source = f"kernels timed in {learned.runtime}" if learned else "no kernel timings"
            raise UserError(
                f"{runtime!r}: device {device!r} has {source}; predict {runtime} latency "
                f"from a profile of `archsearch calibrate runtime={runtime}`, or measure it "
                "(latency.mode=measured)",
                key="latency.runtime",
            )
    elif not cfg.ray.address:  # a cluster's nodes have their own packages
        from archsearch.runtimes import require

        require(runtime, key="latency.runtime")


def check_cluster_gpus(cfg: SweepConfig) -> None:
    """A trial asking for GPUs needs a Ray cluster that has them (declared or detected)."""
    import ray

    need = cfg.gpus_per_trial * cfg.workers_per_trial
    have = ray.cluster_resources().get("GPU", 0)
    if need > have:
        raise UserError(
            f"a trial needs {need:g} GPU(s) but the Ray cluster has {have:g}",
            key="gpus_per_trial",
        )


def early_stopping_metric(space: SearchSpace) -> tuple[str | None, str]:
    """The first training objective as the trial reports it (a loss predicted at a larger
    budget is watched through the loss the trial measures) and its mode."""
    for o in space.objectives:
        if o.spec.phase == "train":
            return o.spec.measured.label, "min" if o.direction == "minimize" else "max"
    return None, "min"


def check_settings(space: SearchSpace, cfg: SweepConfig) -> None:
    """The sweep's counts, waits and reference point, checked before anything starts: one-line
    errors that name the key."""
    if not space.objectives:
        raise UserError("the space names no objectives", source=space.source, key="objectives")
    for key, value in (
        ("trials", cfg.trials),
        ("concurrency", cfg.concurrency),
        ("cpus_per_trial", cfg.cpus_per_trial),
        ("workers_per_trial", cfg.workers_per_trial),
    ):
        if value <= 0:
            raise UserError(f"must be positive, got {value}", key=key)
    if not cfg.gpus_per_trial >= 0:
        raise UserError(f"must be 0 or positive, got {cfg.gpus_per_trial}", key="gpus_per_trial")
    if not (math.isfinite(cfg.latency.wait_s) and cfg.latency.wait_s >= 0):
        raise UserError(
            f"must be 0 or a positive number of seconds, got {cfg.latency.wait_s}",
            key="latency.wait_s",
        )
    if cfg.max_failures < 0:
        raise UserError(
            f"must be 0 (never) or positive, got {cfg.max_failures}", key="max_failures"
        )
    if cfg.reference and len(cfg.reference) != len(space.objectives):
        raise UserError(
            f"give one value per objective ({len(space.objectives)}), got {len(cfg.reference)}",
            key="reference",
        )
    if cfg.reference and not all(math.isfinite(v) for v in cfg.reference):
        raise UserError(f"give finite numbers, got {list(cfg.reference)}", key="reference")


def run_sweep(space: SearchSpace, cfg: SweepConfig) -> dict[str, Any]:
    """Run the sweep `cfg` (the `sweep` command's settings) over the parsed `space`; returns
    the summary also written to `run_dir/sweep.json`. Every check that needs no Ray comes
    first; then, in Ray: the measuring device, the study (`_open_study`), the trials
    (`_train`), the replicates and confirmation (`_retrain`)."""
    from archsearch.latency import load_device
    from archsearch.trainers.config import TrainConfig

    contain_ray(cfg.ray.verbose, cfg.ray.address)
    device = load_device(cfg.device).name
    check_settings(space, cfg)
    replicates = space.replicates if cfg.replicates is None else cfg.replicates
    labels = [o.spec.label for o in space.objectives]
    check_retrain(labels, replicates, cfg.confirm.factor, cfg.confirm.n)
    study_name = check_name(cfg.study_name or space.name, what="study", key="study_name")
    run_dir = Path(cfg.run_dir or Path("runs") / study_name).resolve()
    check_writable_dir(run_dir, key="run_dir")  # before Ray starts or the study is touched
    url = cfg.storage.url or default_storage_url(run_dir)
    if cfg.storage.url:
        check_storage_reachable(url)
    # a file or database that is not an Optuna study of this schema is refused untouched
    check_study_storage(url, creating=True, key="storage.url" if cfg.storage.url else "run_dir")
    train = train_settings(space, cfg)
    check_placement(cfg, train)
    check_latency_runtime(cfg, device)
    sampler_name = resolve_sampler(cfg.sampler, space, cfg.latency.mode)
    sampler = make_sampler(sampler_name, cfg.seed, cfg.trials, space, device)
    n_evals = len({*TrainConfig.from_dict(train).eval_at, 1.0})
    check_feasible(space, device)
    trainable = import_trainable(cfg.trainable)

    left_alone: list[str] = []  # driver records of this run dir the clean-up did not honour
    with ray_session(
        cfg.ray.address,
        cfg.ray.num_cpus,
        cfg.ray.verbose,
        cfg.ray.num_gpus,
        run_dir=run_dir,
        left_alone=left_alone,
    ):
        check_cluster_gpus(cfg)
        measure = _measurer(space, device, cfg)  # checks the resource before the study is touched
        run_dir.mkdir(parents=True, exist_ok=True)
        state, existed = _open_study(
            space, cfg, device, train, run_dir=run_dir, name=study_name, url=url, sampler=sampler
        )
        state.measure = measure
        trained_before, t0, ctrl_c = state.trained, time.time(), CtrlC()
        interrupted = _train(state, trainable, cfg, n_evals, ctrl_c)
        retrained: dict[str, Any] = {}
        if not interrupted:  # replicates and confirmation (`retrain`); a rerun resumes them
            retrained, interrupted = _retrain(state, trainable, cfg, replicates, ctrl_c)
        in_study = study_counts(state.writer)
    summary = {
        "study_name": study_name,
        "storage": url,
        "run_dir": str(run_dir),
        "resumed": existed,
        "wall_s": round(time.time() - t0, 1),
        "trials": cfg.trials,
        "trained_in_study": state.trained,
        "trained_before": trained_before,
        "counts": {k: v for k, v in sorted(state.counts.items()) if k != "launched"},
        "in_study": in_study,
        "outcome": _outcome(state, trained_before, interrupted),
        "gave_up_reason": state.gave_up_reason,
        "exhausted": state.exhausted,
        "device": device,
        "sampler": sampler_name.value,
        "early_stopping": cfg.early_stopping.value,
        "reference_point": StudyMeta.from_study(state.writer.study).reference,
        "left_alone": left_alone,
        **retrained,
    }
    (run_dir / "sweep.json").write_text(json.dumps(summary, indent=2))
    if interrupted:
        raise KeyboardInterrupt(
            f"sweep of study {study_name!r} stopped with {state.trained} of {cfg.trials} trained "
            f"trials in the study; the trials in flight are marked interrupted and run again "
            f"first when the same command is run again"
        )
    return summary


def _measurer(space: SearchSpace, device: str, cfg: SweepConfig):
    """With `latency.mode=measured`, what sends a candidate to the device's node to be timed
    (the resource is checked here); else None."""
    if cfg.latency.mode != LatencyMode.measured:
        return None
    from archsearch.sweep.measure import remote_measurer

    lat = cfg.latency
    return remote_measurer(space, device, lat.resource, lat.repeats, str(lat.runtime), lat.wait_s)


def _open_study(
    space: SearchSpace,
    cfg: SweepConfig,
    device: str,
    train: dict[str, Any],
    *,
    run_dir: Path,
    name: str,
    url: str,
    sampler: Any,
) -> tuple[SweepState, bool]:
    """Create or reopen the study `name` in the storage at `url`, enqueue again the trials
    dead drivers left running, and start the sweep's state from what the study holds:
    (state, whether the study existed)."""
    from archsearch.latency import device_names

    devices = sorted({*device_names(), device})
    meta = StudyMeta.for_space(space, device, devices, train)
    me = Driver.this()
    storage = open_storage(url, heartbeat_s=HEARTBEAT_S, grace_s=GRACE_S, on_stale=requeue_stale)
    if name not in study_names(storage):
        meta.reference, meta.reference_source = study_reference(space, device, cfg.reference)
    writer, existed = StudyWriter.create_or_open(storage, name, meta, sampler, driver=me.key)
    for params in reap_dead(writer, me):  # only dead drivers' trials: see `drivers`
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
        es_metric=early_stopping_metric(space)[0],
        max_failures=cfg.max_failures,
    )
    state.placement = {
        "workers": cfg.workers_per_trial,
        "cpus": cfg.cpus_per_trial,
        "gpus": cfg.gpus_per_trial,
    }
    return state, existed


def _train(state: SweepState, trainable, cfg: SweepConfig, n_evals: int, ctrl_c: CtrlC) -> bool:
    """Train trials until the study holds `cfg.trials` trained ones (or the sweep ends), then
    settle what is left open; whether Ctrl-C ended it (its trials in flight are then marked
    interrupted and enqueued for the next run)."""
    writer = state.writer
    interrupted = False
    first_number = len(writer.study.get_trials(deepcopy=False))
    try:
        if state.trained < cfg.trials:
            with ctrl_c, Heartbeat(state):
                _fit(state, trainable, cfg, n_evals)
    except (KeyboardInterrupt, Exception) as err:  # the study is settled below either way
        if not ctrl_c.interrupted(err):
            raise
        interrupted = True
    if not interrupted:  # trials Tune ended whose latency was still being measured
        record_measured(state, wait=True)
    sync(state, force=True)  # duplicates of other drivers' trials that finished meanwhile
    settle_duplicates(state)
    _finish_stragglers(state, again=interrupted)
    if interrupted:  # a trial of this run asked for but not yet launched when Ctrl-C came
        for params in writer.mark_interrupted(lambda t: t.number >= first_number):
            writer.study.enqueue_trial(params, skip_if_exists=False)
    return interrupted


def _retrain(
    state: SweepState, trainable, cfg: SweepConfig, replicates: int, ctrl_c: CtrlC
) -> tuple[dict[str, Any], bool]:
    """Replicates and confirmation runs after the sweep (`retrain.after_sweep`): (what they
    add to the summary, whether Ctrl-C ended them)."""
    try:
        with ctrl_c:
            return after_sweep(
                state.writer,
                state.train,
                replicates=replicates,
                factor=cfg.confirm.factor,
                n=cfg.confirm.n,
                trainable=trainable,
                resources=Resources.of(cfg),
                run_dir=state.run_dir,
                verbose=cfg.ray.verbose,
                say=_say_to(sys.stdout if cfg.format == "table" else sys.stderr),
            ), False
    except (KeyboardInterrupt, Exception) as err:
        if not ctrl_c.interrupted(err):
            raise
        return {}, True


def _say_to(stream):
    """A progress line printer: `HH:MM:SS text`, flushed (a log file shows it at once)."""

    def say(text: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {text}", file=stream, flush=True)

    return say


def _outcome(state: SweepState, trained_before: int, interrupted: bool) -> str:
    """How the run ended: interrupted, nothing_to_do, done, exhausted or gave_up."""
    if interrupted:
        return "interrupted"
    if trained_before >= state.target:
        return "nothing_to_do"
    if state.trained >= state.target:
        return "done"
    return "gave_up" if state.gave_up else "exhausted"


def _fit(state: SweepState, trainable, cfg: SweepConfig, n_evals: int) -> None:
    """One Ray Tune run of the sweep's trials, its progress shown as it goes."""
    from archsearch.sweep.progress import SweepProgress

    es_metric, es_mode = early_stopping_metric(state.space)

    if cfg.workers_per_trial > 1:  # the Tune trial is the Train driver; its workers hold the rest
        resources = {"cpu": DRIVER_CPUS}
    else:
        resources = {"cpu": cfg.cpus_per_trial, "gpu": cfg.gpus_per_trial}
    run = tuner(
        trainable,
        resources,
        name="tune",
        run_dir=state.run_dir,
        # Tune asks the searcher every second even with no trial live: a measurement that comes
        # in then is recorded there (the recorder's `on_step_end` is not called meanwhile)
        search_alg=create_searcher(state, before_suggest=partial(record_measured, state)),
        scheduler=make_scheduler(cfg.early_stopping, es_metric, es_mode, n_evals, state),
        num_samples=-1,
        concurrency=cfg.concurrency,
        # a data-parallel trial's driver is ended when Tune stops it, with its workers
        reuse_actors=cfg.workers_per_trial == 1,
        verbose=cfg.ray.verbose,
        callbacks=[create_recorder(state)],
    )
    stream = sys.stdout if cfg.format == "table" else sys.stderr  # json: stdout is the result
    with SweepProgress(state, cfg.concurrency, stream=stream) as progress:
        state.on_change = progress.update
        try:
            run.fit()
        finally:
            state.on_change = None


def _finish_stragglers(state: SweepState, *, again: bool) -> None:
    """Trials still open when Tune stopped (duplicates waiting on a trial that never ended);
    with `again` (Ctrl-C), the interrupted ones are enqueued for the next run."""
    for trials in state.pending_duplicates.values():
        for t in trials:
            state.writer.finish(
                t, Status.DUPLICATE, "its original trial never finished", failed=True
            )
    for launched in state.by_tune_id.values():
        reason = "interrupted (Ctrl-C)" if again else "the sweep ended before this trial did"
        state.writer.finish(launched.optuna_trial, Status.INTERRUPTED, reason)
        if again and launched.optuna_trial.params:
            state.writer.study.enqueue_trial(launched.optuna_trial.params, skip_if_exists=False)
    state.by_tune_id.clear()
