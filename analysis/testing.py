"""Stand-in studies with known content, for tests and demos of the analysis commands.

`make_study` writes a study straight into an SQLite file with Optuna, in the schema of
`archsearch.sweep` (user attributes, constraints stored the new and the old way, the study meta,
metric names), without Ray or training: candidates come from the `tiny` space, the loss from
`archsearch.sweep.testing.synthetic_loss`, every cost number from the cost model for every
device profile. Statuses follow a fixed plan, so a test knows what to expect: candidates that
break a constraint are `infeasible`; of the others, every 5th is `stopped_early`, every 7th
`failed`, the rest `trained`; the first trained architecture is then suggested once more and
recorded as a `duplicate` (COMPLETE, with the first one's values, as the sweep does).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from archsearch.arch import ArchConfig
from archsearch.space.metrics import METRICS, MetricSpec

OBJECTIVES = ("val_loss", "decode_ms[rpi5,context=1024,precision=fp16]")


def _label_spec(label: str) -> MetricSpec:
    from archsearch.analysis.front import _num, parse_label

    name, args = parse_label(label)
    return MetricSpec(name, tuple((k, _num(args[k])) for k in METRICS[name].args if k in args))


def price(arch: ArchConfig, space, devices: list[str]) -> tuple[dict, dict]:
    """Device-independent and per-device cost numbers, exactly as the sweep stores them."""
    from archsearch.sweep.bridge import price as sweep_price

    return sweep_price(space, devices, arch)


def make_study(
    path: Path, *, n: int = 14, seed: int = 0, name: str = "tiny", device: str = "rpi5"
) -> dict[str, Any]:
    """Write the study into the SQLite file `path`; returns what was written by status."""
    import optuna

    from archsearch.cost.devices import device_names
    from archsearch.space import load_space, sample
    from archsearch.sweep.testing import synthetic_loss

    space = load_space("tiny")
    devices = device_names()
    url = f"sqlite:///{Path(path).resolve()}"
    objectives = [o.spec.with_device(device).label for o in space.objectives]
    directions = [o.direction for o in space.objectives]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=name, storage=url, directions=directions)
    meta = {
        "space": space.name,
        "space_source": space.source,
        "device": device,
        "objectives": objectives,
        "directions": directions,
        "constraints": [c.describe() for c in space.constraints],
        "devices": devices,
        "version": 1,
    }
    study.set_user_attr("archsearch", json.dumps(meta))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(objectives)
    written: dict[str, list[int]] = {}
    first_trained: tuple[ArchConfig, list[float]] | None = None
    feasible_seen = 0
    cands = [c.arch for c in sample(space, n, seed).candidates]
    for arch in cands:
        costs, device_costs = price(arch, space, devices)
        violations = {
            c.name: c.violation(costs.get(c.spec.label, device_costs[device].get(c.spec.label)))
            for c in space.constraints
        }
        if any(v > 0 for v in violations.values()):
            status = "infeasible"
        else:
            feasible_seen += 1
            status = (
                "stopped_early"
                if feasible_seen % 5 == 0
                else "failed"
                if feasible_seen % 7 == 0
                else "trained"
            )
        loss = synthetic_loss(arch.to_dict())
        values = [loss, device_costs[device][objectives[1]]]
        number = _add(study, arch, status, values, costs, device_costs, violations)
        written.setdefault(status, []).append(number)
        if status == "trained" and first_trained is None:
            first_trained = (arch, values)
    if first_trained is not None:
        arch, values = first_trained
        costs, device_costs = price(arch, space, devices)
        n_dup = _add(study, arch, "duplicate", values, costs, device_costs, {})
        written.setdefault("duplicate", []).append(n_dup)
    return {"url": url, "name": name, "objectives": objectives, "by_status": written}


def _add(study, arch, status, values, costs, device_costs, violations) -> int:
    import optuna

    trial = study.ask()
    attrs = {
        "status": status,
        "reason": "" if status == "trained" else f"synthetic {status}",
        "summary": arch.summary(),
        "family": arch.family,
        "arch_hash": arch.arch_hash,
        "attention_share": arch.attention_share,
        "params": costs["params"],
        "active_params": costs["active_params"],
        "arch": json.dumps(arch.to_dict()),
        "costs": json.dumps(costs),
        "device_costs": json.dumps(device_costs),
    }
    for k, v in attrs.items():
        trial.set_user_attr(k, v)
    if violations:
        for k, v in violations.items():
            trial.set_constraint(k, v)
        study._storage.set_trial_system_attr(
            trial._trial_id, "constraints", list(violations.values())
        )
    state = optuna.trial.TrialState
    if status in ("trained", "duplicate"):
        study.tell(trial, values)
    elif status == "failed":
        study.tell(trial, state=state.FAIL)
    else:
        study.tell(trial, state=state.PRUNED)
    return trial.number
