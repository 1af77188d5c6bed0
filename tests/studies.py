"""Stand-in studies with known content, for the analysis tests.

`make_study` writes a study into an SQLite file through the sweep's own writer
(`archsearch.study.StudyWriter`) and pricing (`archsearch.sweep.pricing.price`), without Ray or
training: candidates come from the `tiny` space, the loss from
`archsearch.sweep.testing.synthetic_loss`. Statuses follow a fixed plan, so a test knows what
to expect: candidates that break a constraint are `infeasible`; of the others, every 5th is
`stopped_early`, every 7th `failed`, the rest `trained`; the first trained architecture is then
suggested once more and recorded as a `duplicate` (PRUNED, the first one's values in
`duplicate_values`, as the sweep does).

`records_so_far` reads the study of a sweep that is still running.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from archsearch.study import Status, StudyMeta, StudyWriter, open_storage, records
from archsearch.sweep.pricing import price

OBJECTIVES = ("val_loss", "decode_ms[rpi5,context=1024,precision=fp16]")


def make_study(
    path: Path,
    *,
    n: int = 14,
    seed: int = 0,
    name: str = "tiny",
    device: str = "rpi5",
    lr_search: bool = False,
) -> dict[str, Any]:
    """Write the study into the SQLite file `path`; returns what was written by status. With
    `lr_search`, the study's recipe searched each trial's rate (`train.lr_search: halving`)
    and each trained trial stores a search that chose `searched_rate(number)`."""
    import optuna

    from archsearch.cost.devices import device_names
    from archsearch.space import load_space, sample
    from archsearch.sweep.testing import synthetic_loss

    space = load_space("tiny")
    devices = device_names()
    url = f"sqlite:///{Path(path).resolve()}"
    train = {**space.train, "lr_search": "halving"} if lr_search else None
    meta = StudyMeta.for_space(space, device, devices, train)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    writer, _ = StudyWriter.create_or_open(open_storage(url), name, meta)
    written: dict[str, list[int]] = {}
    first_trained = None
    feasible_seen = 0
    for cand in sample(space, n, seed).candidates:
        priced = price(space, devices, device, cand.arch)
        if not priced.feasible:
            status = Status.INFEASIBLE
        else:
            feasible_seen += 1
            status = (
                Status.STOPPED_EARLY
                if feasible_seen % 5 == 0
                else Status.FAILED
                if feasible_seen % 7 == 0
                else Status.TRAINED
            )
        values = [synthetic_loss(cand.arch.to_dict()), priced.device_costs[device][OBJECTIVES[1]]]
        number = _add(writer, priced, status, values, priced.violations, lr_search)
        written.setdefault(status.value, []).append(number)
        if status == Status.TRAINED and first_trained is None:
            first_trained = (priced, values)
    if first_trained is not None:
        priced, values = first_trained
        n_dup = _add(writer, priced, Status.DUPLICATE, values, {})
        written.setdefault(Status.DUPLICATE.value, []).append(n_dup)
    return {"url": url, "name": name, "objectives": list(meta.objectives), "by_status": written}


def searched_rate(number: int) -> float:
    """The rate a stand-in trial's search chose (`make_study(lr_search=True)`)."""
    return (1e-3, 2e-3, 4e-3, 8e-3)[number % 4]


def _add(
    writer: StudyWriter, priced, status: Status, values, violations, lr_search: bool = False
) -> int:
    trial = writer.ask()
    writer.set_constraints(trial, violations)
    reason = "" if status == Status.TRAINED else f"synthetic {status.value}"
    keep = status in (Status.TRAINED, Status.DUPLICATE)
    attrs = priced.attrs()
    if lr_search and status == Status.TRAINED:
        grid = [1e-3, 2e-3, 4e-3, 8e-3]
        attrs["lr_search"] = {"method": "halving", "grid": grid, "share": 0.15}
        attrs["lr_search"].update(chosen=searched_rate(trial.number), runs=[], flops=1e9)
    writer.finish(trial, status, reason, attrs, values if keep else None)
    return trial.number


def records_so_far(run_dir: Path, name: str, url: str | None = None) -> list:
    """The trial records of the study `name` that a sweep may still be creating (in `url`, else
    `run_dir`'s SQLite file), [] until it can be read. Never creates the database: a file is
    read once the sweep has made it; while the sweep is creating its schema, reading can fail
    (no study yet; SQLite's UNIQUE constraint on alembic_version), which counts as nothing yet."""
    import optuna

    if url is None:
        if not (run_dir / "study.db").exists():
            return []
        url = f"sqlite:///{run_dir / 'study.db'}"
    with contextlib.suppress(Exception):
        return records(optuna.load_study(study_name=name, storage=open_storage(url)))
    return []
