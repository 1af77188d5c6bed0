"""Pruning a space before training: its cost constraints on the whole candidate table at once.

`prune(space, device)` enumerates a finite space (or samples an infinite or huge one), builds
every candidate, evaluates every cost constraint of the space on the vectorised table and
reports the survivors and, for each constraint, how many candidates it pruned; `rank` orders
candidates by the space's first cost objective. A latency constraint with `margin: error`
bounds each prediction times (1 + its error: `latency.predict.latency_errors`, by its working
set where the device profile gives bands) (`margin_errors`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from archsearch.cost.evaluate import metric_values
from archsearch.cost.ops import Columns
from archsearch.errors import UserError
from archsearch.latency.evaluate import spec_errors
from archsearch.metrics import Constraint, MetricSpec
from archsearch.space import Candidate, SearchSpace, build, count, draws


@dataclass
class PruneResult:
    space: str
    device: str
    assignments: int
    invalid: Counter = field(default_factory=Counter)
    duplicates: int = 0
    candidates: list[Candidate] = field(default_factory=list)  # distinct valid ones
    values: dict[str, np.ndarray] = field(default_factory=dict)  # constraint metric per candidate
    pruned_by: dict[str, int] = field(default_factory=dict)  # candidates failing each constraint
    # per candidate, the relative error of each latency constraint's prediction (None: not a
    # latency, or its profile states none) and the margin its bound was widened by (0 without
    # `margin: error`)
    errors: dict[str, np.ndarray | None] = field(default_factory=dict)
    margins: dict[str, np.ndarray] = field(default_factory=dict)
    feasible: np.ndarray | None = None
    sampled: bool = False

    @property
    def survivors(self) -> list[Candidate]:
        return [c for c, ok in zip(self.candidates, self.feasible) if ok]


PROGRESS_STEPS = 20  # progress reports over the assignments (one per 5%)


def prune(
    space: SearchSpace,
    device: str,
    *,
    limit: int = 200_000,
    seed: int = 0,
    progress: Callable[[int, int, str], None] | None = None,
) -> PruneResult:
    """Build every assignment (or `limit` samples), then price the cost constraints on the
    whole table; `progress(done, total, step)` is called after each twentieth of the
    assignments."""
    size = count(space)
    sampled = math.isinf(size) or size > limit
    total = limit if sampled else int(size)
    every = max(1, math.ceil(total / PROGRESS_STEPS))
    res = PruneResult(space.name, device, 0, sampled=sampled)
    seen: set[str] = set()
    for a in draws(space, limit, seed):
        res.assignments += 1
        cand = build(space, a)
        if not cand.ok:
            res.invalid[cand.reason] += 1
        elif cand.arch.arch_hash in seen:
            res.duplicates += 1
        else:
            seen.add(cand.arch.arch_hash)
            res.candidates.append(cand)
        if progress is not None and (res.assignments % every == 0 or res.assignments == total):
            progress(res.assignments, total, "assignments built")
    feasible = np.ones(len(res.candidates), dtype=bool)
    if res.candidates:
        c = Columns.from_archs([cand.arch for cand in res.candidates])
        for con in space.constraints:
            if con.spec.phase != "cost":
                continue
            spec = con.spec.on_device(device, only_unset=True)
            values = metric_values(c, spec)
            errors = spec_errors(c, spec)
            margin = margin_errors(con, spec, errors, len(values))
            ok = np.ones(len(values), dtype=bool)
            if con.max is not None:
                ok &= values * (1.0 + margin) <= con.max
            if con.min is not None:
                ok &= values * (1.0 - margin) >= con.min
            res.values[con.name] = values
            res.errors[con.name] = errors
            res.margins[con.name] = margin
            res.pruned_by[con.name] = int((~ok).sum())
            feasible &= ok
    res.feasible = feasible
    return res


def margin_errors(con: Constraint, spec: MetricSpec, errors: np.ndarray | None, n: int):
    """The relative error each candidate's bound is widened by: its prediction's `errors`
    (`latency.evaluate.spec_errors`) under `margin: error`, else 0. A profile with no check at the
    constraint's precision cannot give one: a one-line error naming the constraint."""
    if con.margin != "error":
        return np.zeros(n)
    if errors is None:
        raise UserError(
            f"margin: error on {con.name}, but the {spec.arg('device')!r} profile has no "
            f"held-out check at {spec.arg('precision')} (recalibrate it, choose a checked "
            "precision, or drop the margin)",
            key="constraints.margin",
        )
    return errors


def rank(space: SearchSpace, candidates: list[Candidate], device: str) -> list[int]:
    """Indices of `candidates` ordered by the space's first cost objective (else as given)."""
    cost_obj = [o for o in space.objectives if o.spec.phase == "cost"]
    if not candidates or not cost_obj:
        return list(range(len(candidates)))
    values = metric_values(
        Columns.from_archs([c.arch for c in candidates]),
        cost_obj[0].spec.on_device(device, only_unset=True),
    )
    order = np.argsort(values if cost_obj[0].direction == "minimize" else -values, kind="stable")
    return [int(i) for i in order]
