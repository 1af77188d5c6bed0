"""`archsearch confirm`: retrain a study's front and `n` trials spread over its ranking at
`factor` x the sandbox budget (`archsearch.sweep.retrain`), then print how far the sandbox's
answer held (`archsearch.analysis.confirm`). Every input is checked before anything is
trained or written; a rerun trains only what is not stored yet."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from archsearch.cli import output
from archsearch.cli.analysis_cmd import check_study_train
from archsearch.errors import UserError
from archsearch.resources import check_writable_dir


def run(_sub: str | None, cfg: Any) -> int:
    from archsearch.study import StudyData, load
    from archsearch.sweep.retrain import (
        Resources,
        confirm_jobs,
        full_train,
        import_trainable,
        pending,
    )

    if not (math.isfinite(cfg.factor) and cfg.factor > 0):
        raise UserError(f"must be a positive budget factor, got {cfg.factor}", key="factor")
    if cfg.n < 0:
        raise UserError(f"must be 0 or more trials beside the front, got {cfg.n}", key="n")
    resources = Resources.of(cfg)
    resources.check()
    where, name = _where(cfg)
    data: StudyData = check_study_train(load(where, name))
    data.require_trained()
    _refuse_while_a_sweep_runs(data)
    run_dir = Path(cfg.run_dir) if cfg.run_dir else data.home or Path("runs") / data.name
    check_writable_dir(run_dir, key="run_dir")
    if cfg.out:
        check_writable_dir(cfg.out, key="out")
    corpus = _corpus(cfg.data) if cfg.data else None
    train = full_train(data.meta.get("train") or {})
    trainable = import_trainable(cfg.trainable)
    jobs = confirm_jobs(
        data.records,
        data.objectives,
        data.directions,
        train,
        factor=cfg.factor,
        n=cfg.n,
        data=corpus,
        seed=cfg.seed,
    )
    todo = pending(jobs, data.records)
    ended = _train(data, todo, cfg, trainable, resources, run_dir) if todo else []
    if todo:
        data = load(data.url, data.name)
        data.home = run_dir
    return _show(data, jobs, todo, ended, cfg, run_dir)


def _refuse_while_a_sweep_runs(data) -> None:
    """Confirmation retrains the front of a finished search: while a driver of the study is
    alive its front still moves (and its run directory is the sweep's), so nothing is done."""
    from archsearch.study.tables import heartbeat_ages
    from archsearch.sweep.drivers import drivers_alive

    running = drivers_alive(data.records, heartbeat_ages(data.storage, data.name))
    if running:
        number, driver = min(running.items())
        more = f" and {len(running) - 1} more" if len(running) > 1 else ""
        raise UserError(
            f"a sweep is still running on study {data.name!r} (trial {number}{more}, driver "
            f"{driver}): confirm its front once the sweep has ended",
            key="study",
        )


def _where(cfg: Any) -> tuple[str, str | None]:
    """(what `archsearch.study.load` opens, the study's name): `study=` as `pareto` reads it (a
    run directory, an SQLite file or a URL), or a study name with `storage.url=` or `run_dir=`
    (default runs/NAME, where `archsearch sweep` puts it)."""
    if cfg.storage.url:
        name = cfg.study_name or cfg.study
        if not name:
            raise UserError("name the study: study=NAME with storage.url=", key="study")
        return cfg.storage.url, name
    if not cfg.study:
        raise UserError(
            "name the study: study=<run dir, SQLite file, database URL or study name>",
            key="study",
        )
    if "://" in cfg.study or Path(cfg.study).expanduser().exists():
        return cfg.study, cfg.study_name
    return str(Path(cfg.run_dir or Path("runs") / cfg.study)), cfg.study_name or cfg.study


def _corpus(items: list[str]) -> list[str]:
    """`data=` checked as the trainer reads it, local files made absolute (Ray runs a trial in
    its own folder)."""
    from archsearch.trainers.data import resolve_source

    resolve_source(list(items), key="data")
    return [
        str(Path(i).expanduser().resolve()) if Path(i).expanduser().exists() else i for i in items
    ]


def _train(data, todo, cfg: Any, trainable, resources, run_dir: Path):
    """Train the jobs in a Ray session (a local one recorded under `run_dir`, or the cluster
    at `ray.address`)."""
    import optuna

    from archsearch.cli.progress import StepProgress
    from archsearch.study import StudyWriter, open_storage
    from archsearch.sweep.ray_runtime import contain_ray, ray_session
    from archsearch.sweep.retrain import run_jobs

    contain_ray(cfg.ray.verbose, cfg.ray.address)
    storage = open_storage(data.url)  # the study was read read-only; confirmations are written
    writer = StudyWriter(storage, optuna.load_study(study_name=data.name, storage=storage))
    done: list[int] = []
    left_alone: list[str] = []
    with (
        ray_session(
            cfg.ray.address,
            cfg.ray.num_cpus,
            cfg.ray.verbose,
            cfg.ray.num_gpus,
            run_dir=run_dir,
            left_alone=left_alone,
        ),
        StepProgress(f"confirm {data.name}") as progress,
    ):
        for record in left_alone:  # driver records the clean-up did not honour
            print(f"archsearch: left alone: {record}", file=sys.stderr)
        progress(0, len(todo), "confirmations trained")

        def on_end(job, status, reason) -> None:
            done.append(job.source)
            progress(len(done), len(todo), f"trial {job.source}: {status.value} {reason}".strip())

        return run_jobs(
            writer,
            todo,
            objectives=data.objectives,
            trainable=trainable,
            resources=resources,
            run_dir=run_dir,
            verbose=cfg.ray.verbose,
            on_end=on_end,
        )


def _show(data, jobs, todo, ended, cfg: Any, run_dir: Path) -> int:
    from rich.markup import escape

    from archsearch.analysis.confirm import (
        COLUMNS,
        confirmations,
        table_rows,
        write_confirm_outputs,
    )

    key = (jobs[0].budget_factor, tuple(jobs[0].train["data"]), jobs[0].seed) if jobs else None
    found = next((c for c in confirmations(data) if c.key == key), None)
    files: dict[str, Path] = {}
    if found is not None and found.trials and cfg.plots:
        out = Path(cfg.out) if cfg.out else run_dir / "confirm" / f"{cfg.factor:g}x"
        files = write_confirm_outputs(found, out)
    this_run = [status.value for _, status in ended]
    summary = {
        "study": data.name,
        "factor": cfg.factor,
        "jobs": len(jobs),
        "already_stored": len(jobs) - len(todo),
        "this_run": {s: this_run.count(s) for s in sorted(set(this_run))},
        "confirmation": found.summary() if found is not None else None,
        "files": {k: str(v) for k, v in files.items()},
    }
    if cfg.format == "json":
        output.print_json(summary)
        return 0
    con = output.console()
    ran = ", ".join(f"{v} {k}" for k, v in summary["this_run"].items()) or "nothing trained"
    con.print(
        escape(
            f"confirmation of study {data.name} at {cfg.factor:g}x: {len(jobs)} trials "
            f"(the front and up to {cfg.n} others); this run: {ran}; "
            f"{summary['already_stored']} already stored"
        )
    )
    if found is None or not found.trials:
        con.print("no confirmed trial yet")
        return 0
    con.print(
        output.table(
            escape(f"{found.objective}: sandbox vs {found.budget_factor:g}x"),
            list(COLUMNS),
            [[escape(c) for c in row] for row in table_rows(found)],
        )
    )
    for k, v in found.facts():
        con.print(escape(f"{k + ':':<15}{v}"))
    for k, path in files.items():
        con.print(escape(f"{k + ':':<15}{path}"))
    return 0
