"""Training trained trials' architectures again: replicates and confirmations.

A replicate trains a trained trial's architecture with another seed at the same budget
(`replicates: N`: seeds `train.seed+1 .. train.seed+N-1` for every trained feasible trial in the
first two Pareto layers of the study); a confirmation trains it at `factor` x the sandbox budget
(tokens, FLOPs, steps or time, scaled), with the same recipe or another corpus (`archsearch
confirm`: the front and `n` trials spread over the sandbox-loss ranking).

`run_jobs` trains a list of jobs as real Ray Tune trials with the sweep's trainable contract
(`archsearch.sweep.trainable`) and resources, and writes each job only when it has ended, in one
transaction (`StudyWriter.add_finished`): REPLICATE / CONFIRMATION with its objective values
(training metrics from the run, cost metrics copied from the sandbox trial), or FAILED with the
reason, always with the link attributes (`replicate_of` / `confirms`, `seed`, `budget_factor`,
`confirm_train`). A job already stored (same link, seed, budget factor and corpus, whatever its
ending: a failure is not retried forever) is skipped, so rerunning a command resumes it; a job
that was in flight at Ctrl-C was never written and runs again.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archsearch.errors import UserError
from archsearch.metrics import MetricSpec
from archsearch.study import Status, StudyWriter, TrialRecord
from archsearch.sweep.ray_runtime import tuner
from archsearch.sweep.recorder import ended_run, error_text, training_value
from archsearch.sweep.searcher import trial_dir

__all__ = [
    "DRIVER_CPUS",
    "Resources",
    "RetrainJob",
    "after_sweep",
    "check_retrain",
    "confirm_jobs",
    "full_train",
    "import_trainable",
    "pareto_layers",
    "pending",
    "replicate_jobs",
    "run_jobs",
    "scaled_budget",
    "trained_as",
    "training_index",
]

DRIVER_CPUS = 0.01  # the Tune trial that drives a data-parallel trial only waits on its workers
SOURCE_ATTRS = ("arch_hash", "summary", "family", "attention_share", "params", "active_params")


@dataclass(frozen=True)
class Resources:
    """How trials are placed (the sweep's keys of the same names)."""

    concurrency: int
    cpus_per_trial: int
    gpus_per_trial: float
    workers_per_trial: int

    @classmethod
    def of(cls, cfg: Any) -> Resources:
        return cls(cfg.concurrency, cfg.cpus_per_trial, cfg.gpus_per_trial, cfg.workers_per_trial)

    def check(self) -> None:
        """One-line errors naming the key, before anything starts."""
        for key in ("concurrency", "cpus_per_trial", "workers_per_trial"):
            if getattr(self, key) <= 0:
                raise UserError(f"must be positive, got {getattr(self, key)}", key=key)
        if not self.gpus_per_trial >= 0:
            raise UserError(
                f"must be 0 or positive, got {self.gpus_per_trial}", key="gpus_per_trial"
            )

    def tune(self) -> dict[str, float]:
        """The Tune trial's resources: a data-parallel trial's Tune trial only drives its
        workers, which hold the rest (`trainable.fit_data_parallel`)."""
        if self.workers_per_trial > 1:
            return {"cpu": DRIVER_CPUS}
        return {"cpu": self.cpus_per_trial, "gpu": self.gpus_per_trial}

    def placement(self) -> dict[str, Any]:
        """`config["placement"]` of the trainable contract (per worker)."""
        return {
            "workers": self.workers_per_trial,
            "cpus": self.cpus_per_trial,
            "gpus": self.gpus_per_trial,
        }


@dataclass(frozen=True)
class RetrainJob:
    """One architecture of trained trial `source` to train again with the settings `train`
    (a whole `TrainConfig` dict): a REPLICATE (another seed) or a CONFIRMATION (`budget_factor`
    x the budget, maybe another corpus)."""

    status: Status
    source: int
    train: dict[str, Any]
    budget_factor: float = 1.0

    @property
    def seed(self) -> int:
        return int(self.train["seed"])

    @property
    def key(self) -> tuple:
        """What makes two jobs the same: status, sandbox trial, seed, budget factor, corpus."""
        data = tuple(self.train["data"]) if self.status == Status.CONFIRMATION else ()
        return (self.status.value, self.source, self.seed, float(self.budget_factor), data)

    def link(self) -> dict[str, Any]:
        """The stored attributes that link the job to its sandbox trial."""
        if self.status == Status.REPLICATE:
            return {"replicate_of": self.source, "seed": self.seed}
        return {
            "confirms": self.source,
            "budget_factor": float(self.budget_factor),
            "seed": self.seed,
            "confirm_train": dict(self.train),
        }


def stored_key(r: TrialRecord) -> tuple | None:
    """The `RetrainJob.key` of a stored replicate or confirmation (whatever its ending)."""
    a = r.attrs
    if "replicate_of" in a:
        return (Status.REPLICATE.value, int(a["replicate_of"]), int(a["seed"]), 1.0, ())
    if "confirms" in a:
        data = tuple((a.get("confirm_train") or {}).get("data") or ())
        factor = float(a["budget_factor"])
        return (Status.CONFIRMATION.value, int(a["confirms"]), int(a["seed"]), factor, data)
    return None


def pending(jobs: list[RetrainJob], records: list[TrialRecord]) -> list[RetrainJob]:
    """The jobs not stored yet (in order, each once)."""
    seen = {k for k in map(stored_key, records) if k is not None}
    out = []
    for job in jobs:
        if job.key not in seen:
            seen.add(job.key)
            out.append(job)
    return out


def import_trainable(path: str) -> Callable:
    """The Ray Tune trainable `module:function`."""
    import importlib

    module, _, func = path.partition(":")
    try:
        return getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError, ValueError):
        raise UserError(f"cannot import the trainable {path!r}", key="trainable") from None


# ---- choosing what to train again --------------------------------------------------------------


def full_train(settings: dict[str, Any]) -> dict[str, Any]:
    """A study's stored training settings (`StudyMeta.train`) as a whole `TrainConfig` dict."""
    from archsearch.trainers.config import TrainConfig

    return TrainConfig.from_dict(settings, prefix="train").to_dict()


def scaled_budget(budget: str, factor: float) -> str:
    """`tokens:160K` x 8 -> `tokens:1.28M` (steps rounded to a whole number)."""
    from archsearch.trainers.config import Budget, parse_budget

    b = parse_budget(budget)
    amount = b.amount * factor
    if b.kind == "steps":
        return f"steps:{max(1, round(amount))}"
    if b.kind == "time":
        return str(Budget("time", amount))
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if amount >= scale:
            return f"{b.kind}:{amount / scale:.6g}{suffix}"
    return f"{b.kind}:{amount:.6g}"


def training_index(objectives: list[str]) -> int | None:
    """Index of the study's first training objective (the sandbox loss), None without one."""
    for i, label in enumerate(objectives):
        try:
            if MetricSpec.parse(label).phase == "train":
                return i
        except ValueError:
            continue
    return None


def pareto_layers(
    records: list[TrialRecord], directions: list[str], layers: int
) -> list[list[TrialRecord]]:
    """The first `layers` layers of non-dominated sorting ([NSGA-II], through moocore) of
    the fully trained feasible trials on the study's stored objectives."""
    import moocore
    import numpy as np

    trained = [r for r in records if r.fully_trained and r.values is not None]
    if not trained:
        return []
    values = np.array([r.values for r in trained], dtype=float)
    rank = moocore.pareto_rank(values, maximise=[d == "maximize" for d in directions])
    return [[r for r, k in zip(trained, rank) if k == layer] for layer in range(layers)]


def replicate_jobs(
    records: list[TrialRecord], directions: list[str], train: dict[str, Any], replicates: int
) -> list[RetrainJob]:
    """Seeds train.seed+1 .. train.seed+replicates-1 of every trained feasible trial in the
    first two Pareto layers (the front and its near neighbours)."""
    base = int(train["seed"])
    return [
        RetrainJob(Status.REPLICATE, r.number, {**trained_as(train, r), "seed": base + k})
        for layer in pareto_layers(records, directions, 2)
        for r in layer
        for k in range(1, replicates)
    ]


def trained_as(train: dict[str, Any], record: TrialRecord) -> dict[str, Any]:
    """The study's settings as `record` trained under them: at the rate its rate search chose
    (`train.lr_search`), which replicates and confirmations reuse rather than search again."""
    from archsearch.trainers.lr_search import at_trained_rate

    return at_trained_rate(train, record.attrs.get("lr_search"))


def confirm_jobs(
    records: list[TrialRecord],
    objectives: list[str],
    directions: list[str],
    train: dict[str, Any],
    *,
    factor: float,
    n: int,
    data: list[str] | None = None,
    seed: int | None = None,
) -> list[RetrainJob]:
    """The front (first Pareto layer) and `n` other trained feasible trials spread evenly over
    the sandbox-loss ranking (best, worst and evenly between), at `factor` x the budget."""
    index = training_index(objectives)
    if index is None:
        raise UserError(
            f"the study has no training objective to confirm (objectives: {objectives})",
            key="study",
        )
    layers = pareto_layers(records, directions, 1)
    front = layers[0] if layers else []
    on_front = {r.number for r in front}
    rest = [r for r in records if r.fully_trained and r.values and r.number not in on_front]
    sign = 1.0 if directions[index] == "minimize" else -1.0
    rest.sort(key=lambda r: (sign * r.values[index], r.number))
    last = len(rest) - 1
    if n >= len(rest):
        picked = rest
    else:  # n evenly spaced ranks from the best to the worst (the middle one for n = 1)
        positions = [round(k * last / (n - 1)) for k in range(n)] if n > 1 else [last // 2] * n
        picked = [rest[i] for i in sorted(set(positions))]
    settings = {
        **train,
        "budget": scaled_budget(train["budget"], factor),
        "data": list(data) if data else list(train["data"]),
        "seed": int(train["seed"] if seed is None else seed),
    }
    return [
        RetrainJob(Status.CONFIRMATION, r.number, trained_as(settings, r), float(factor))
        for r in sorted([*front, *picked], key=lambda r: r.number)
    ]


# ---- training them ----------------------------------------------------------------------------


@dataclass
class _Run:
    """The jobs of one `run_jobs` call while Tune trains them."""

    writer: StudyWriter
    objectives: list[str]
    sources: dict[int, TrialRecord]
    queue: list[RetrainJob]
    config: Callable[[RetrainJob], dict[str, Any]]
    on_end: Callable[[RetrainJob, Status, str], None] | None
    by_tune_id: dict[str, RetrainJob] = field(default_factory=dict)
    ended: list[tuple[RetrainJob, Status]] = field(default_factory=list)


def run_jobs(
    writer: StudyWriter,
    jobs: list[RetrainJob],
    *,
    objectives: list[str],
    trainable: Callable,
    resources: Resources,
    run_dir: Path,
    verbose: bool = False,
    on_end: Callable[[RetrainJob, Status, str], None] | None = None,
) -> list[tuple[RetrainJob, Status]]:
    """Train `jobs` as Ray Tune trials (Ray must be running: `ray_runtime.ray_session`) and
    write each as it ends; returns each job written and how it ended. `on_end(job, status,
    reason)` is told of each ending (progress)."""
    from ray.tune import Callback
    from ray.tune.search import Searcher

    from archsearch.arch import ArchConfig
    from archsearch.trainers.config import TrainConfig

    if not jobs:
        return []
    by_number = {r.number: r for r in writer.records()}
    labels = [s for s in objectives if _phase(s) == "train"]

    def config(job: RetrainJob) -> dict[str, Any]:
        arch = ArchConfig.from_dict(by_number[job.source].attrs["arch"])
        cfg = TrainConfig.from_dict(job.train, prefix="train")
        return {
            "arch": arch.to_dict(),
            "train": cfg.to_dict(),
            "trial_dir": str(trial_dir(run_dir, arch, cfg)),
            "metrics": labels,
            "optuna_number": job.source,  # the sandbox trial's (what `testing.faulty` reads)
            "placement": resources.placement(),
        }

    run = _Run(writer, objectives, by_number, list(jobs), config, on_end)

    class JobSearcher(Searcher):
        def suggest(self, trial_id: str):
            if not run.queue:
                return Searcher.FINISHED
            job = run.queue.pop(0)
            run.by_tune_id[trial_id] = job
            return run.config(job)

        def on_trial_complete(self, trial_id, result=None, error=False):
            pass  # the callback writes the job (it sees errors too)

    class JobRecorder(Callback):
        def on_trial_complete(self, iteration, trials, trial, **info):
            _record(run, trial.trial_id, trial.last_result or {}, None)

        def on_trial_error(self, iteration, trials, trial, **info):
            _record(run, trial.trial_id, trial.last_result or {}, error_text(trial))

    tune_run = tuner(
        trainable,
        resources.tune(),
        name="retrain",
        run_dir=run_dir,
        search_alg=JobSearcher(),
        num_samples=len(jobs),
        concurrency=resources.concurrency,
        reuse_actors=resources.workers_per_trial == 1,
        verbose=verbose,
        callbacks=[JobRecorder()],
    )
    tune_run.fit()
    return run.ended


def _phase(label: str) -> str:
    try:
        return MetricSpec.parse(label).phase
    except ValueError:
        return ""


def _record(run: _Run, tune_id: str, result: dict[str, Any], error: str | None) -> None:
    """Write the job of Tune trial `tune_id` as it ended."""
    job = run.by_tune_id.pop(tune_id, None)
    if job is None:  # already written (Tune may report an error after completion)
        return
    source = run.sources[job.source]
    attrs: dict[str, Any] = {k: source.attrs[k] for k in SOURCE_ATTRS if k in source.attrs}
    attrs.update({**job.link(), "arch": source.attrs["arch"], "node": result.get("node", "")})
    values = None
    res, failure = ended_run(result, error, attrs)
    if res is not None:
        values, reason = _values(run.objectives, res, source, attrs)
        status = job.status if values is not None else Status.FAILED
    else:
        status = Status.FAILED
        reason = failure or "the trial ended without its final result"
    if status == Status.FAILED:
        what = "replicate" if job.status == Status.REPLICATE else "confirmation"
        reason = f"{what} of trial {job.source} failed: {reason}"
    run.writer.add_finished(status, reason, attrs, values)
    run.ended.append((job, status))
    if run.on_end is not None:
        run.on_end(job, status, reason)


def _values(
    objectives: list[str], res: dict[str, Any], source: TrialRecord, attrs: dict[str, Any]
) -> tuple[list[float] | None, str]:
    """The study's objectives in order: training metrics from the run (a predicted loss from
    its curve), the others (costs) from the sandbox trial's stored values."""
    values = []
    for i, label in enumerate(objectives):
        if _phase(label) == "train":
            try:
                v = training_value(MetricSpec.parse(label), res, attrs)
            except ValueError as err:
                return None, f"objective {label}: {err}"
        else:
            v = source.values[i]
        if v is None or not math.isfinite(v):
            return None, f"the trial produced no finite value for objective {label}"
        values.append(float(v))
    return values, ""


# ---- at the end of a sweep --------------------------------------------------------------------


def check_retrain(objectives: list[str], replicates: int, factor: float, n: int) -> None:
    """Refuse, before a sweep starts, retraining settings that cannot be run."""
    if type(replicates) is not int or replicates < 1:
        raise UserError(
            f"must be 1 (no replicates) or more seeds, got {replicates}", key="replicates"
        )
    if not (math.isfinite(factor) and factor >= 0):
        raise UserError(
            f"must be 0 (no confirmation) or a positive factor, got {factor}", key="confirm.factor"
        )
    if n < 0:
        raise UserError(f"must be 0 or more trials beside the front, got {n}", key="confirm.n")
    if (replicates > 1 or factor > 0) and training_index(objectives) is None:
        key = "replicates" if replicates > 1 else "confirm.factor"
        raise UserError(
            f"the space has no training objective to retrain for: {objectives}", key=key
        )


def _announce(
    todo: list[RetrainJob], factor: float, say: Callable[[str], None]
) -> Callable[[RetrainJob, Status, str], None]:
    """Say what is about to retrain; return what says how each job ended, and how many have."""
    reps = [j for j in todo if j.status == Status.REPLICATE]
    confs = [j for j in todo if j.status == Status.CONFIRMATION]
    parts = []
    if reps:
        trials = ", ".join(map(str, sorted({j.source for j in reps})))
        seeds = ", ".join(map(str, sorted({j.seed for j in reps})))
        parts.append(f"{len(reps)} replicates (trials {trials}, seeds {seeds})")
    if confs:
        parts.append(
            f"{len(confs)} confirmations at {factor:g}x the budget (trials "
            f"{', '.join(map(str, sorted({j.source for j in confs})))})"
        )
    say(f"retraining: {' and '.join(parts)}")
    ended_count = [0]

    def on_end(job: RetrainJob, status: Status, reason: str) -> None:
        ended_count[0] += 1
        what = (
            f"replicate of trial {job.source} (seed {job.seed})"
            if job.status == Status.REPLICATE
            else f"confirmation of trial {job.source} ({job.budget_factor:g}x)"
        )
        outcome = reason if status == Status.FAILED else "trained"
        say(f"{what} {outcome} | {ended_count[0]} of {len(todo)} retrained")

    return on_end


def after_sweep(
    writer: StudyWriter,
    train_settings: dict[str, Any],
    *,
    replicates: int,
    factor: float,
    n: int,
    trainable: Callable,
    resources: Resources,
    run_dir: Path,
    verbose: bool = False,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """After a sweep's search: its replicates (`replicates` > 1) and its confirmation
    (`factor` > 0), those not stored yet, in one Tune run; returns what `sweep.json` reports.
    `say(line)` is told what is about to train and of each job as it ends (progress)."""
    from archsearch.study import StudyMeta

    meta = StudyMeta.from_study(writer.study)
    records = writer.records() if replicates > 1 or factor > 0 else []  # nothing asked
    train = full_train(train_settings)
    wanted = {
        Status.REPLICATE: replicate_jobs(records, meta.directions, train, replicates),
        Status.CONFIRMATION: confirm_jobs(
            records, meta.objectives, meta.directions, train, factor=factor, n=n
        )
        if factor > 0
        else [],
    }
    todo = pending([*wanted[Status.REPLICATE], *wanted[Status.CONFIRMATION]], records)
    on_end = _announce(todo, factor, say) if say is not None and todo else None
    ended = run_jobs(
        writer,
        todo,
        objectives=meta.objectives,
        trainable=trainable,
        resources=resources,
        run_dir=run_dir,
        verbose=verbose,
        on_end=on_end,
    )
    out = {}
    for kind, key in ((Status.REPLICATE, "replicated"), (Status.CONFIRMATION, "confirmed")):
        jobs = wanted[kind]
        this_run = [status.value for job, status in ended if job.status == kind]
        out[key] = {
            "trials": sorted({j.source for j in jobs}),
            "jobs": len(jobs),
            "already_stored": len(jobs) - sum(j.status == kind for j in todo),
            "this_run": {s: this_run.count(s) for s in sorted(set(this_run))},
        }
    out["replicated"]["replicates"] = replicates
    out["replicated"]["seeds"] = [int(train["seed"]) + k for k in range(1, replicates)]
    out["confirmed"].update(factor=factor, n=n)
    return out
