"""Pareto fronts of a stored study, for any device and any pair or triple of objectives.

Only fully trained, feasible trials count (a trial stopped early, failed, infeasible or a
repeat of an architecture is never on a front). Objective values that depend on a device are
re-read from each trial's stored cost numbers for the device asked for, so one sweep answers
for every device profile without retraining. Duplicated architectures (the same canonical hash)
count once; trials with identical objective values are all kept on the front (none dominates
the other).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from archsearch.errors import UserError
from archsearch.space.metrics import METRICS, MetricSpec
from archsearch.sweep.study import TrialRecord


@dataclass(frozen=True)
class Axis:
    """One objective of a front: a label as stored in the study, and its direction."""

    label: str
    direction: str = "minimize"

    @property
    def sign(self) -> float:
        return 1.0 if self.direction == "minimize" else -1.0


def parse_label(label: str) -> tuple[str, dict[str, str]]:
    """`decode_ms[rpi5,context=2048,precision=q4]` -> ("decode_ms", {device: rpi5, ...})."""
    if "[" not in label:
        return label, {}
    name, _, rest = label.partition("[")
    args: dict[str, str] = {}
    for part in rest.rstrip("]").split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            args[k] = v
        elif name == "probe_acc":
            args["task"] = part
        else:
            args["device"] = part
    return name, args


def for_device(label: str, device: str) -> str:
    """The same metric label on another device."""
    name, args = parse_label(label)
    if "device" not in args:
        return label
    spec_args = tuple(
        (k, device if k == "device" else _num(args[k])) for k in METRICS[name].args if k in args
    )
    return MetricSpec(name, spec_args).label


def _num(v: str) -> Any:
    try:
        return int(v)
    except ValueError:
        return v


def value_of(record: TrialRecord, label: str, objectives: list[str]) -> float | None:
    """A trial's value of an objective label: stored objective values first, then the stored
    device-dependent and device-independent cost numbers."""
    if label in objectives and record.values is not None:
        return float(record.values[objectives.index(label)])
    _, args = parse_label(label)
    if "device" in args:
        v = record.attrs.get("device_costs", {}).get(args["device"], {}).get(label)
        if v is not None:
            return float(v)
    costs = record.attrs.get("costs", {})
    if label in costs:
        return float(costs[label])
    metrics = record.attrs.get("metrics", {})
    return float(metrics[label]) if label in metrics else None


def candidates(records: list[TrialRecord]) -> list[TrialRecord]:
    """Fully trained feasible trials, one per architecture (the earliest trial of a hash)."""
    seen, out = set(), []
    for r in sorted(records, key=lambda r: r.number):
        if not r.fully_trained:
            continue
        h = r.attrs.get("arch_hash", r.number)
        if h in seen:
            continue
        seen.add(h)
        out.append(r)
    return out


def points(records: list[TrialRecord], axes: list[Axis], objectives: list[str]) -> np.ndarray:
    """[n, len(axes)] values (nan where missing)."""
    return np.array(
        [[_nan(value_of(r, a.label, objectives)) for a in axes] for r in records], dtype=float
    ).reshape(len(records), len(axes))


def _nan(v: float | None) -> float:
    return float("nan") if v is None else v


def non_dominated(values: np.ndarray, axes: list[Axis]) -> np.ndarray:
    """Mask of the rows no other row dominates (all finite; ties are kept)."""
    n = len(values)
    if n == 0:
        return np.zeros(0, dtype=bool)
    signed = values * np.array([a.sign for a in axes])
    finite = np.isfinite(signed).all(axis=1)
    mask = finite.copy()
    for i in np.flatnonzero(finite):
        others = signed[finite]
        dominated = np.any(np.all(others <= signed[i], axis=1) & np.any(others < signed[i], axis=1))
        mask[i] = not dominated
    return mask


def front(records: list[TrialRecord], axes: list[Axis], objectives: list[str]):
    """(the trained feasible trials, their values, the front mask), the front sorted by the
    first axis."""
    cands = candidates(records)
    values = points(cands, axes, objectives)
    mask = non_dominated(values, axes)
    return cands, values, mask


def hypervolume(values: np.ndarray, axes: list[Axis], reference: np.ndarray) -> float:
    """Hypervolume dominated by `values` up to `reference` (minimisation after flipping the
    maximised axes), with Optuna's implementation; 0 when no point beats the reference."""
    from optuna._hypervolume import compute_hypervolume

    signs = np.array([a.sign for a in axes])
    pts = values * signs
    ref = reference * signs
    pts = pts[np.isfinite(pts).all(axis=1) & np.all(pts < ref, axis=1)]
    if len(pts) == 0:
        return 0.0
    return float(compute_hypervolume(pts, ref, assume_pareto=False))


def reference_point(values: np.ndarray, axes: list[Axis], margin: float = 0.1) -> np.ndarray:
    """The stated reference point: the worst value of each axis over all trained trials, moved
    10% of that axis's range further out (so the extreme front points count)."""
    finite = values[np.isfinite(values).all(axis=1)]
    if len(finite) == 0:
        raise UserError(
            "the study has no fully trained trial with finite objective values", key="study"
        )
    signs = np.array([a.sign for a in axes])
    s = finite * signs
    worst, best = s.max(axis=0), s.min(axis=0)
    span = np.where(worst > best, worst - best, np.maximum(np.abs(worst), 1e-12))
    return (worst + margin * span) * signs


def hypervolume_history(
    records: list[TrialRecord], axes: list[Axis], objectives: list[str], reference: np.ndarray
) -> list[tuple[int, float]]:
    """Hypervolume of the fully trained feasible trials after each trial number."""
    cands = candidates(records)
    values = points(cands, axes, objectives)
    out, hv = [], 0.0
    order = sorted(range(len(cands)), key=lambda i: cands[i].number)
    for k, i in enumerate(order):
        hv = hypervolume(values[[order[j] for j in range(k + 1)]], axes, reference)
        out.append((cands[i].number, hv))
    return out


def finite_or_none(x: float) -> float | None:
    return x if isinstance(x, float) and math.isfinite(x) else None
