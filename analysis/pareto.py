"""A study's Pareto front on one device and one set of axes, with everything the table, the plots
and the reports show: every trial placed where its numbers allow, the front, the hypervolume
against a stated reference point and its history over the trials.

With replicates in the study (`archsearch.analysis.noise`) a trained trial's training axes are
the means over its seeds, and the front is the noise-aware one: the points no other point
dominates beyond the seed noise; a point dominated by means but not significantly stays on it,
tied with the points that dominate it (`Pareto.ties`).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from archsearch.analysis.confirm import correct_predicted_axes
from archsearch.analysis.front import (
    Axis,
    default_axes,
    front,
    hypervolume,
    hypervolume_history,
    latency_errors,
    points,
    predict_axes,
    reference_point,
    resolve_axis,
    study_labels,
    value_of,
)
from archsearch.analysis.noise import SeedNoise, noise_aware_front, seed_noise
from archsearch.analysis.proxies import Proxies, proxies
from archsearch.errors import UserError
from archsearch.metrics import parse_label
from archsearch.study import DamagedAttribute, StudyData, TrialRecord, redact


@dataclass
class Pareto:
    study: StudyData
    device: str
    axes: list[Axis]
    trained: list[TrialRecord]  # fully trained feasible trials, one per architecture
    values: np.ndarray  # [len(trained), len(axes)]
    on_front: np.ndarray  # bool mask over `trained`
    others: list[TrialRecord]  # the other trials that are not repeats of an architecture
    other_values: np.ndarray  # [len(others), len(axes)], nan where unknown (e.g. no loss)
    reference: np.ndarray
    reference_source: str  # "reference=", "study" (fixed when it was created) or "data"
    hypervolume: float
    history: list[tuple[int, float]]
    kv_label: str
    default_axes: bool
    noise: SeedNoise  # seeds per trained trial on the training axes, the pooled seed noise
    # trial number -> the trial numbers that dominate it by means but within the seed noise
    ties: dict[int, list[int]] = field(default_factory=dict)
    # predicted-loss axis -> how its values came from the study's confirmations at its budget
    corrected: dict[str, str] = field(default_factory=dict)

    @property
    def strict_front(self) -> np.ndarray:
        """Mask over `trained` of the front by means alone (the noise-aware front less its
        tied points): what the staircase joins."""
        if not self.ties:
            return self.on_front
        return self.on_front & np.array([r.number not in self.ties for r in self.trained])

    @cached_property
    def axis_errors(self) -> dict[str, np.ndarray]:
        """Per predicted-latency axis, each trained trial's relative error (`latency_errors`:
        by its working set where the device profile gives bands; nan where unknown)."""
        out = {a.label: latency_errors(self.trained, a.label) for a in self.axes}
        return {label: e for label, e in out.items() if e is not None}

    @cached_property
    def faster_than_next(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per predicted-latency axis whose profile keeps held-out pairs
        (`archsearch.latency.order`): for each front point, the next slower front point on that
        axis (its trial number; -1 for the slowest and off the front) and the chance the
        profile orders the two right, P(faster), from their predicted ratio (nan elsewhere):
        what the +- of each, overlapping, does not say."""
        from archsearch.latency.order import spec_ordering
        from archsearch.metrics import MetricSpec

        out = {}
        front = np.flatnonzero(self.on_front)
        for k, a in enumerate(self.axes):
            try:
                ordering = spec_ordering(MetricSpec.parse(a.label))
            except ValueError:
                ordering = None
            if ordering is None:
                continue
            nxt = np.full(len(self.trained), -1)
            odds = np.full(len(self.trained), np.nan)
            ranked = front[np.argsort(self.values[front, k], kind="stable")]
            ranked = ranked[np.isfinite(self.values[ranked, k]) & (self.values[ranked, k] > 0)]
            for i, j in itertools.pairwise(ranked):
                nxt[i] = self.trained[j].number
                odds[i] = ordering.confidence(self.values[i, k] / self.values[j, k])
            out[a.label] = (nxt, odds)
        return out

    @cached_property
    def proxies(self) -> Proxies:
        """Rank correlations of the study's training objectives with its cheap signals
        (`archsearch.analysis.proxies`), over `trained`."""
        return proxies(self.study, self.trained)

    @property
    def front(self) -> list[tuple[TrialRecord, np.ndarray]]:
        """The front's trials and values, sorted by the first axis (best first)."""
        items = [(r, v) for r, v, on in zip(self.trained, self.values, self.on_front) if on]
        return sorted(items, key=lambda t: tuple(a.sign * x for a, x in zip(self.axes, t[1])))

    def group_of_other(self, r: TrialRecord) -> str:
        """How a trial that is not fully trained and feasible is drawn."""
        if r.status == "infeasible" or not r.feasible:
            return "infeasible"
        if r.status == "stopped_early":
            return "stopped_early"
        return "failed"

    def status_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.study.records:
            key = r.status or r.state.lower()
            out[key] = out.get(key, 0) + 1
        return dict(sorted(out.items()))

    def row(self, r: TrialRecord, v: np.ndarray) -> dict[str, Any]:
        """One trial as a table/report row."""
        objectives = self.study.objectives
        return {
            "trial": r.number,
            "arch_hash": r.attrs.get("arch_hash"),
            "summary": r.attrs.get("summary"),
            "family": r.attrs.get("family"),
            "attention_share": r.attrs.get("attention_share"),
            **{a.label: float(x) for a, x in zip(self.axes, v)},
            **{
                f"{label}:error": _number(errors[self._index[r.number]])
                for label, errors in self.axis_errors.items()
            },
            "params": value_of(r, "params", objectives),
            "active_params": value_of(r, "active_params", objectives),
            self.kv_label: value_of(r, self.kv_label, objectives),
            **self.order_cells(r),
            **self.seed_cells(r),
            **{
                f"{label}:predicted_std": got.get("std")
                for label, got in (r.attrs.get("predicted") or {}).items()
                if label in {a.label for a in self.axes} and isinstance(got, dict)
            },
        }

    def order_cells(self, r: TrialRecord) -> dict[str, Any]:
        """A front point's `faster_than_next` per latency axis: [next trial, P(faster)]."""
        i = self._index[r.number]
        return {
            f"{label}:faster_than_next": [int(nxt[i]), _number(odds[i])]
            for label, (nxt, odds) in self.faster_than_next.items()
            if nxt[i] >= 0
        }

    def seed_cells(self, r: TrialRecord) -> dict[str, Any]:
        """A trained trial's seeds, the standard error of its mean on each noisy axis and the
        points it is tied with (nothing when the study has no measured seed noise)."""
        if not self.noise.measured:
            return {}
        i = self._index[r.number]
        out: dict[str, Any] = {}
        for a in self.axes:
            se, n = self.noise.std_error(a.label), self.noise.seeds(a.label)
            if se is not None and n is not None:
                out[f"{a.label}:std_error"] = float(se[i])
                out[f"{a.label}:seeds"] = int(n[i])
        out["tied_with"] = list(self.ties.get(r.number, []))
        return out

    @cached_property
    def _index(self) -> dict[int, int]:
        return {r.number: i for i, r in enumerate(self.trained)}

    def front_rows(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The front's rows, best first by the first axis; the first `limit` of them."""
        return [self.row(r, v) for r, v in self.front[:limit]]

    def summary(self) -> dict[str, Any]:
        """Everything as plain data (for format=json and front.json)."""
        return {
            "study": self.study.name,
            "storage": redact(self.study.url),
            "device": self.device,
            "axes": [{"label": a.label, "direction": a.direction} for a in self.axes],
            "trials": len(self.study.records),
            "statuses": self.status_counts(),
            "unreadable": {str(n): why for n, why in sorted(self.study.unreadable.items())},
            "fully_trained": len(self.trained),
            "front": self.front_rows(),
            "reference_point": [float(x) for x in self.reference],
            "reference_source": self.reference_source,
            "hypervolume": self.hypervolume,
            "hypervolume_history": [[n, hv] for n, hv in self.history],
            "kv_label": self.kv_label,
            "seed_noise": self.noise.summary(),
        }


def choose_axes(
    data: StudyData,
    device: str,
    x: str | None,
    y: str | None,
    z: str | None,
    *,
    devices: Collection[str] | None = None,
) -> tuple[list[Axis], bool]:
    """The axes named on the command line, else the study's objectives on the device.
    (Axes, whether they are the study's own.) With `devices`, a device an axis names must be
    one of them (by name: no profile is read from a path)."""
    defaults = default_axes(data.objectives, data.directions, device)
    if x is None and y is None and z is None:
        return defaults, True
    if z is not None and (x is None or y is None):
        raise UserError("a third axis needs x= and y= as well", key="z")

    def resolve(spec: str, key: str) -> Axis:
        return resolve_axis(
            spec,
            device=device,
            objectives=data.objectives,
            directions=data.directions,
            meta=data.meta,
            key=key,
            devices=devices,
        )

    def default_for(want_train: bool) -> Axis:
        from archsearch.metrics import METRICS

        for a in defaults:
            name = parse_label(a.label)[0]
            if (name not in METRICS or METRICS[name].phase == "train") == want_train:
                return a
        return defaults[0]

    xa = resolve(x, "x") if x is not None else default_for(False)
    ya = resolve(y, "y") if y is not None else default_for(True)
    axes = [xa, ya] + ([resolve(z, "z")] if z is not None else [])
    if len({a.label for a in axes}) < len(axes):
        raise UserError(f"the same metric twice on the axes: {[a.label for a in axes]}", key="x")
    return axes, False


def kv_label(data: StudyData, axes: list[Axis]) -> str:
    """The cache/state column: the study's own cache metric, else at the latency context."""
    for label in [a.label for a in axes] + study_labels(data.meta, data.objectives):
        if parse_label(label)[0] == "cache_bytes":
            return label
    context = 2048
    for label in [a.label for a in axes] + data.objectives:
        name, args = parse_label(label)
        if name in ("decode_ms", "memory_bytes") and "context" in args:
            context = int(args["context"])
            break
    return f"cache_bytes[context={context},bits=16,batch=1]"


def analyse(
    data: StudyData,
    device: str,
    axes: list[Axis],
    *,
    reference: list[float] | None = None,
    is_default: bool = True,
) -> Pareto:
    """The front of `data` on `device` over `axes` (see the module docstring). A trial whose
    stored attributes this analysis reads are damaged is left out and named
    (`StudyData.unreadable`)."""
    data.require_trained()
    screen(data, axes)
    data.require_trained()
    predict_axes(
        data.records,
        [a.label for a in axes],
        dict(data.meta.get("train") or {}),
        curves=lambda: data.curves([r.number for r in data.trained]),
    )
    corrected = correct_predicted_axes(data, [a.label for a in axes])
    trained, values, mask = front(data.records, axes, data.objectives)
    noise = seed_noise(trained, values, axes, data.records, data.objectives)
    ties: dict[int, list[int]] = {}
    if noise.replicates:  # training axes at their means over the seeds
        for j, label in enumerate(noise.labels):
            values[:, [a.label for a in axes].index(label)] = noise.means[:, j]
        mask, tied = noise_aware_front(values, axes, noise)
        ties = {trained[b].number: [trained[a].number for a in by] for b, by in tied.items()}
    finite = np.isfinite(values).all(axis=1)
    if not finite.any():
        raise UserError(
            "no fully trained trial has a value for every axis "
            f"({', '.join(a.label for a in axes)})",
            key="x",
        )
    ref, source = _reference(data, axes, values, reference)
    others = _others(data.records, trained)
    return Pareto(
        study=data,
        device=device,
        axes=axes,
        trained=trained,
        values=values,
        on_front=mask,
        others=others,
        other_values=points(others, axes, data.objectives),
        reference=ref,
        reference_source=source,
        hypervolume=hypervolume(values, axes, ref),
        history=hypervolume_history(data.records, axes, data.objectives, ref, values=values),
        kv_label=kv_label(data, axes),
        default_axes=is_default,
        noise=noise,
        ties=ties,
        corrected=corrected,
    )


def _reference(
    data: StudyData, axes: list[Axis], values: np.ndarray, reference: list[float] | None
) -> tuple[np.ndarray, str]:
    """The hypervolume's reference point and where it came from: `reference=` (one value per
    axis), the study's stored point where it names every axis, else the data's."""
    if reference:
        if len(reference) != len(axes):
            raise UserError(
                f"give one value per axis ({len(axes)}), got {len(reference)}", key="reference"
            )
        return np.array(reference, dtype=float), "reference="
    stored = dict(zip(data.objectives, data.meta.get("reference") or []))
    if all(a.label in stored for a in axes):
        return np.array([stored[a.label] for a in axes], dtype=float), "study"
    # a study written before schema 2, or other axes: the worst trained value + 10%
    return reference_point(values, axes), "data"


def _others(records: list, trained: list) -> list:
    """The trials not fully trained that the plots show: not a retraining or a duplicate, and
    of no architecture a trained trial has."""
    seen = {r.attrs.get("arch_hash") for r in trained}
    return [
        r
        for r in records
        if not r.fully_trained
        and r.status not in ("duplicate", "replicate", "confirmation")
        and r.attrs.get("arch_hash") not in seen
    ]


# what each kind of trial must store for the analysis to use it (a trained trial's `arch` is
# optional: studies may store values alone; where stored, it is checked like the rest)
REQUIRED = {
    "replicate": ("replicate_of",),
    "confirmation": ("confirms", "budget_factor", "seed", "confirm_values"),
}
READ = (
    "arch",
    "costs",
    "metrics",
    "predicted",
    "budget",
    "probes",
    "replicate_values",
    "confirm_train",
)


def screen(data: StudyData, axes: list[Axis]) -> None:
    """Leave out of `data` the trials whose stored attributes the analysis reads (`READ`)
    are damaged or, where it needs them (`REQUIRED`), missing: each one's attributes are
    decoded and checked now (`archsearch.study.schema.ATTR_KINDS`), and its value on every
    axis taken, before anything is written."""

    def use(r: TrialRecord) -> None:
        kind = "trained" if r.fully_trained else r.status
        needed = REQUIRED.get(kind, ())
        if kind == "failed" and "confirms" in r.attrs:  # a confirmation that failed
            kind, needed = "confirmation", REQUIRED["confirmation"][:-1]
        missing = [key for key in needed if r.attrs.get(key) is None]
        if missing:
            raise DamagedAttribute(r.number, missing[0], "missing")
        for key in READ:
            r.attrs.get(key)
        arch = r.attrs.get("arch")
        if kind == "trained" and arch is not None:
            text = json.dumps(arch, sort_keys=True)
            if text not in readable:
                readable[text] = _arch_problem(arch)
            if readable[text]:
                raise DamagedAttribute(r.number, "arch", readable[text])
        if kind not in ("duplicate", "replicate", "confirmation"):
            for a in axes:
                value_of(r, a.label, data.objectives)

    readable: dict[str, str] = {}  # an architecture's JSON -> what is wrong with it ("")
    data.screen(use)


def _arch_problem(arch: dict[str, Any]) -> str:
    """'' when a stored architecture reads as an `ArchConfig`, else what is wrong."""
    from archsearch.arch import ArchConfig

    try:
        ArchConfig.from_dict(arch)
    except UserError as err:
        return f"not an architecture ({err})"
    return ""


def _number(x: float) -> float | None:
    return None if not np.isfinite(x) else float(x)
