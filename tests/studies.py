"""Stand-in studies with known content, for the analysis tests.

`make_study` writes a study into an SQLite file through the sweep's own writer
(`archsearch.study.StudyWriter`) and pricing (`archsearch.sweep.pricing.price`), without Ray or
training: candidates come from the `tiny` space, the loss from
`archsearch.sweep.testing.synthetic_loss`; each trial stores its searched parameters as the
sweep's define-by-run suggestions do. Statuses follow a fixed plan, so a test knows what
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
        number = _add(
            writer, priced, status, values, priced.violations, lr_search, cand.assignment, space
        )
        written.setdefault(status.value, []).append(number)
        if status == Status.TRAINED and first_trained is None:
            first_trained = (priced, values, cand.assignment)
    if first_trained is not None:
        priced, values, assignment = first_trained
        n_dup = _add(writer, priced, Status.DUPLICATE, values, {}, False, assignment, space)
        written.setdefault(Status.DUPLICATE.value, []).append(n_dup)
    return {"url": url, "name": name, "objectives": list(meta.objectives), "by_status": written}


def searched_rate(number: int) -> float:
    """The rate a stand-in trial's search chose (`make_study(lr_search=True)`)."""
    return (1e-3, 2e-3, 4e-3, 8e-3)[number % 4]


def _add(
    writer: StudyWriter,
    priced,
    status: Status,
    values,
    violations,
    lr_search: bool = False,
    assignment: dict[str, Any] | None = None,
    space=None,
) -> int:
    """One trial as the sweep writes it: its searched parameters suggested define-by-run (the
    `assignment`, enqueued), its constraints, then how it ended."""
    if assignment is not None:
        from archsearch.space import suggest

        writer.study.enqueue_trial(assignment)
    trial = writer.ask()
    if assignment is not None:
        suggest(space, trial)
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


# ---- a study with planted effects -----------------------------------------------------------------

LATENCY = "decode_ms[rpi5,context=1024,precision=fp16]"
PREDICTED = "val_loss[tokens=10M]"
# what `make_planted_study` plants: the loss in nats/token, the latency as a factor
PLANTED = {
    "quality=high": +0.10,  # the loss only
    "speed=fast": 0.70,  # the latency only (x0.70: -30%), on both devices
    "layers.mixer=linear": +0.02,  # the loss, at linear.family=gla
    "linear.family=retnet": -0.05,  # the loss, among linear mixers only
    "quality=high x layers.mixer=linear": +0.08,  # the loss: high costs 0.18 with a linear mixer
    "width=128": -0.04,  # the loss; the latency x1.5
}
PLANTED_CHOICES = {
    "width": (64, 128),
    "layers.mixer": ("attention", "linear"),
    "linear.family": ("gla", "retnet"),
    "quality": ("base", "high"),
    "speed": ("slow", "fast"),
    "noise": ("a", "b"),  # does nothing
}


def planted_loss(params: dict[str, Any]) -> float:
    """The planted loss of an assignment, before seed noise."""
    high = params["quality"] == "high"
    linear = params["layers.mixer"] == "linear"
    return (
        3.0
        + PLANTED["quality=high"] * high
        + PLANTED["layers.mixer=linear"] * linear
        + PLANTED["linear.family=retnet"] * (params.get("linear.family") == "retnet")
        + PLANTED["quality=high x layers.mixer=linear"] * (high and linear)
        + PLANTED["width=128"] * (params["width"] == 128)
    )


def planted_latency(params: dict[str, Any], device: str, jitter: float) -> float:
    """Its latency (ms): attention is slower on rpi5, a linear mixer on jetson_orin_nx, so
    the fronts of the two devices differ; `jitter` a per-architecture factor near 1."""
    slow_mixer = "attention" if device == "rpi5" else "linear"
    return (
        1.0
        * (PLANTED["speed=fast"] if params["speed"] == "fast" else 1.0)
        * (1.5 if params["width"] == 128 else 1.0)
        * (1.6 if params["layers.mixer"] == slow_mixer else 1.0)
        * jitter
    )


def make_planted_study(
    path: Path,
    *,
    sigma: float = 0.02,
    replicates: int = 0,
    single_objective: bool = False,
    seed: int = 0,
    rare: bool = False,
    extras: bool = True,
    predicted_std: float | None = None,
) -> dict[str, Any]:
    """Write a study whose effects are known (`PLANTED`) into the SQLite file `path`, through
    the sweep's writer: the full factorial of `PLANTED_CHOICES` (48 architectures, `linear.family`
    active for linear mixers only), each trained once with seed noise N(0, sigma) on the loss,
    and `replicates` more seeds of each (Status.REPLICATE). The latency is exact up to a fixed
    +-3% per architecture. With `extras`, trials the analysis must leave out: one stopped early,
    one failed, one infeasible, one duplicate. With `rare`, one more factor `rare` whose level
    `yes` only one trial has. `single_objective`: the loss alone. With `predicted_std`, each
    trained trial stores `PREDICTED` (its loss 0.3 lower, as at a 10x budget) with that
    1-sigma error, and a value moved by a draw of it."""
    import itertools

    import numpy as np
    import optuna
    from optuna.distributions import CategoricalDistribution

    rng = np.random.default_rng(seed)
    objectives = ["val_loss"] if single_objective else ["val_loss", LATENCY]
    meta = StudyMeta(
        objectives=objectives,
        directions=["minimize"] * len(objectives),
        space="planted",
        device="rpi5",
        devices=["rpi5", "jetson_orin_nx"],
        train={"budget": "tokens:100K"},
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{Path(path).resolve()}"
    writer, _ = StudyWriter.create_or_open(open_storage(url), "planted", meta)
    choices = dict(PLANTED_CHOICES, **({"rare": ("no", "yes")} if rare else {}))
    dists = {k: CategoricalDistribution(list(v)) for k, v in choices.items()}
    names = [k for k in choices if k != "linear.family"]
    number, trained = 0, []
    for values in itertools.product(*(choices[k] for k in names)):
        base = dict(zip(names, values))
        if rare and base["rare"] == "yes" and number != 5:
            continue
        families = choices["linear.family"] if base["layers.mixer"] == "linear" else (None,)
        for family in families:
            params = {**base, **({"linear.family": family} if family else {})}
            if rare and number == 5:
                params["rare"] = "yes"
            jitter = float(rng.uniform(0.97, 1.03))
            costs = {
                d: {LATENCY.replace("rpi5", d): planted_latency(params, d, jitter)}
                for d in meta.devices
            }
            loss = planted_loss(params) + float(rng.normal(0.0, sigma))
            value = [loss] if single_objective else [loss, costs["rpi5"][LATENCY]]
            attrs = {
                "arch_hash": f"h{number:03d}",
                "device_costs": costs,
                "family": params["layers.mixer"],
            }
            if predicted_std is not None:
                moved = loss - 0.3 + float(rng.normal(0.0, predicted_std))
                attrs["predicted"] = {PREDICTED: {"value": moved, "std": predicted_std}}
            writer.add_finished(
                Status.TRAINED, "", attrs, value, {}, params, {k: dists[k] for k in params}
            )
            trained.append((number, params))
            number += 1
    for n, params in trained[:] if replicates else []:
        for k in range(replicates):
            loss = planted_loss(params) + float(rng.normal(0.0, sigma))
            rep = [loss] if single_objective else [loss, None]
            writer.add_finished(Status.REPLICATE, "", {"replicate_of": n, "seed": k + 1}, rep)
            number += 1
    if extras:
        params = trained[0][1]
        d = {k: dists[k] for k in params}
        first = [planted_loss(params)] if single_objective else [planted_loss(params), 1.0]
        writer.add_finished(
            Status.STOPPED_EARLY, "stopped", {"arch_hash": "s1"}, None, {}, params, d
        )
        writer.add_finished(Status.FAILED, "nan", {"arch_hash": "f1"}, None, {}, params, d)
        writer.add_finished(
            Status.INFEASIBLE, "params", {"arch_hash": "i1"}, None, {"params": 1.0}, params, d
        )
        writer.add_finished(
            Status.DUPLICATE, "same", {"arch_hash": "h000", "duplicate_of": 0}, first, {}, params, d
        )
    return {"url": url, "name": "planted", "trained": len(trained), "objectives": objectives}
