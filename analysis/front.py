"""Pareto fronts of a stored study, for any device and any pair or triple of objectives.

Only fully trained, feasible trials count (a trial stopped early, failed, infeasible or a
repeat of an architecture is never on a front). Objective values that depend on a device are
re-read from each trial's stored cost numbers for the device asked for, so one sweep answers
for every device profile without retraining. Duplicated architectures (the same canonical hash)
count once; trials with identical objective values are all kept on the front (none dominates
the other).
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from archsearch.analysis.hypervolume import hypervolume as exact_hypervolume
from archsearch.analysis.hypervolume import non_dominated_minimised, prefix_hypervolumes
from archsearch.errors import UserError
from archsearch.metrics import METRICS, MetricSpec, check_argument, parse_label, typed_value
from archsearch.study import TrialRecord
from archsearch.units import scale_for, spans_decades


@dataclass(frozen=True)
class Axis:
    """One objective of a front: a label as stored in the study, and its direction."""

    label: str
    direction: str = "minimize"

    @property
    def sign(self) -> float:
        return 1.0 if self.direction == "minimize" else -1.0


def for_device(label: str, device: str) -> str:
    """The same metric label on another device (labels that are not metrics stay as they
    are)."""
    try:
        return MetricSpec.parse(label).on_device(device).label
    except ValueError:
        return label


def value_of(record: TrialRecord, label: str, objectives: list[str]) -> float | None:
    """A trial's value of an objective label: a predicted loss as `predict_axes` and
    `confirm.correct_predicted_axes` left it in `attrs["predicted"]` first, then stored
    objective values, then the stored
    device-dependent and device-independent cost numbers, then the stored training results
    (probe accuracies; perplexity from the loss), and last the cost model on the stored
    architecture (for a metric or device the sweep did not price)."""
    name, args = parse_label(label)
    if name == "val_loss" and args.get("tokens"):  # a predicted loss, as `predict_axes` left it
        predicted = (record.attrs.get("predicted") or {}).get(label)
        if isinstance(predicted, dict) and predicted.get("value") is not None:
            return float(predicted["value"])
    if label in objectives and record.values is not None:
        return float(record.values[objectives.index(label)])
    if "device" in args:
        v = record.attrs.get("device_costs", {}).get(args["device"], {}).get(label)
        if v is not None:
            return float(v)
    costs = record.attrs.get("costs", {})
    if label in costs:
        return float(costs[label])
    metrics = record.attrs.get("metrics", {})
    if label in metrics:
        return float(metrics[label])
    if name not in METRICS:
        return None
    if METRICS[name].phase == "train":
        return _training_value(record, name, args, objectives)
    return _cost_model_value(record, label)


def _training_value(
    record: TrialRecord, name: str, args: dict[str, str], objectives: list[str]
) -> float | None:
    if name == "probe_acc":
        probe = record.attrs.get("probes", {}).get(args.get("task", "recall"))
        return float(probe["acc"]) if isinstance(probe, dict) and "acc" in probe else None
    if name == "val_ppl":
        loss = value_of(record, "val_loss", objectives)
        return math.exp(loss) if loss is not None else None
    if name == "val_loss" and args.get("tokens"):  # predicted: stored, or `predict_axes`
        label = MetricSpec.parse(f"val_loss[tokens={args['tokens']}]").label
        got = (record.attrs.get("predicted") or {}).get(label)
        return float(got["value"]) if isinstance(got, dict) else None
    return None


def predict_axes(records: list[TrialRecord], labels: list[str], train: dict, curves=None) -> None:
    """Fill in `attrs["predicted"]` for the trained trials that lack a predicted loss asked for
    as an axis (`val_loss[tokens=100M]` on a study that did not optimise it), from their
    stored curves (`curves()`: trial number -> curve, read only when needed) and the study's
    training settings. A curve that cannot be fitted leaves the trial without a value on that
    axis."""
    wanted = []
    for label in labels:
        try:
            spec = MetricSpec.parse(label)
        except ValueError:
            continue
        if spec.predicted_at is not None:
            wanted.append(spec)
    todo = [
        r
        for r in records
        if r.fully_trained and any(s.label not in (r.attrs.get("predicted") or {}) for s in wanted)
    ]
    if not todo or not train:
        return
    from archsearch.trainers.extrapolate import predict_loss

    stored_curves = curves() if curves is not None else {}
    for r in todo:
        stored = dict(r.attrs.get("predicted") or {})
        curve = stored_curves.get(r.number) or r.attrs.get("curve")
        for spec in wanted if isinstance(curve, dict) else []:
            if spec.label in stored:
                continue
            try:
                got = predict_loss(curve, train, spec.predicted_at, params=r.attrs.get("params"))
            except ValueError:
                continue
            stored[spec.label] = {"value": got.value, "std": got.std, "law": got.law}
        r.attrs["predicted"] = stored


_COST_CACHE: dict[tuple[str, str], float] = {}


def _cost_model_value(record: TrialRecord, label: str) -> float | None:
    """The cost model's value of a cost metric for the trial's stored architecture."""
    arch = record.attrs.get("arch")
    if not isinstance(arch, dict):
        return None
    key = (json.dumps(arch, sort_keys=True), label)
    if key not in _COST_CACHE:
        from archsearch.arch import ArchConfig
        from archsearch.latency import metric_value

        _COST_CACHE[key] = metric_value(ArchConfig.from_dict(arch), MetricSpec.parse(label))
    return _COST_CACHE[key]


LATENCIES = ("ttft_ms", "decode_ms", "e2e_ms")  # predicted latencies: shown with their error


def latency_errors(records: list[TrialRecord], label: str) -> np.ndarray | None:
    """The relative error a predicted latency (`decode_ms[local,...]`) carries for each trial's
    stored architecture: its device profile's held-out error in the band of the working set
    (`archsearch.latency.spec_errors`), the profile's one figure for a trial that stores no
    architecture, nan where the profile states none; None for other metrics."""
    from archsearch.latency import spec_error

    try:
        spec = MetricSpec.parse(label)
    except ValueError:
        return None
    if spec.metric not in LATENCIES:
        return None
    one = spec_error(spec)  # None also where the profile does not load
    out = np.full(len(records), np.nan if one is None else one)
    stored = [i for i, r in enumerate(records) if isinstance(r.attrs.get("arch"), dict)]
    if one is not None and stored:
        from archsearch.arch import ArchConfig
        from archsearch.cost.ops import Columns
        from archsearch.latency import spec_errors

        archs = [ArchConfig.from_dict(records[i].attrs["arch"]) for i in stored]
        out[stored] = spec_errors(Columns.from_archs(archs), spec)
    return out


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
    """Mask of the rows no other row dominates (all finite; ties are kept), in O(n log n) for
    two and three axes (`archsearch.analysis.hypervolume`: moocore)."""
    signed = np.asarray(values, dtype=float).reshape(-1, len(axes)) * np.array(
        [a.sign for a in axes]
    )
    return non_dominated_minimised(signed)


def front(records: list[TrialRecord], axes: list[Axis], objectives: list[str]):
    """(the fully trained feasible trials, one per architecture; their values; the front
    mask)."""
    cands = candidates(records)
    values = points(cands, axes, objectives)
    mask = non_dominated(values, axes)
    return cands, values, mask


def hypervolume(values: np.ndarray, axes: list[Axis], reference: np.ndarray) -> float:
    """Hypervolume dominated by `values` up to `reference` (minimisation after flipping the
    maximised axes); 0 when no point beats the reference."""
    signs = np.array([a.sign for a in axes])
    pts = values * signs
    ref = reference * signs
    pts = pts[np.isfinite(pts).all(axis=1) & np.all(pts < ref, axis=1)]
    if len(pts) == 0:
        return 0.0
    return exact_hypervolume(pts, ref)


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
    records: list[TrialRecord],
    axes: list[Axis],
    objectives: list[str],
    reference: np.ndarray,
    max_points: int = 200,
    values: np.ndarray | None = None,
) -> list[tuple[int, float]]:
    """Hypervolume of the fully trained feasible trials after each trial number; for a long
    study after at most `max_points` trials evenly spread over it (the last one included).
    The front so far is updated as trials arrive, not recomputed for each
    (`archsearch.analysis.hypervolume.prefix_hypervolumes`). `values`: the candidates' values
    when not their stored ones (means over seeds), in `candidates` order."""
    cands = candidates(records)  # in trial-number order
    n = len(cands)
    if n == 0:
        return []
    signs = np.array([a.sign for a in axes])
    values = (points(cands, axes, objectives) if values is None else values) * signs
    at = sorted(set(np.linspace(0, n - 1, min(n, max_points)).round().astype(int).tolist()))
    hvs = prefix_hypervolumes(values, reference * signs, at)
    return [(cands[k].number, hv) for k, hv in zip(at, hvs)]


# ---- axes from the command line -----------------------------------------------------------------


def study_labels(meta: dict[str, Any], objectives: list[str]) -> list[str]:
    """Every metric label the study names: objectives, then constraints."""
    labels = list(objectives)
    for text in meta.get("constraints", []):
        labels.append(str(text).split(" ", 1)[0])
    return labels


def resolve_axis(
    spec: str,
    *,
    device: str,
    objectives: list[str],
    directions: list[str],
    meta: dict[str, Any],
    key: str,
    devices: Collection[str] | None = None,
) -> Axis:
    """An axis named on the command line, completed to a full label: arguments not given are
    taken from the study's own use of the metric (its objective or constraint), else the
    metric's defaults; the device is the one asked for (with `devices`, one of them, by
    name). The direction is the study's for its objectives, else the metric's natural one."""
    name, given = parse_label(spec)
    if name not in METRICS:
        raise UserError(
            f"unknown metric {name!r} in {spec!r} (known: {', '.join(METRICS)})", key=key
        )
    mdef = METRICS[name]
    unknown = sorted(set(given) - set(mdef.args))
    if unknown:
        raise UserError(
            f"metric {name!r} takes no argument {unknown[0]!r} "
            f"(it takes: {', '.join(mdef.args) or 'none'})",
            key=key,
        )
    args: dict[str, Any] = dict(mdef.args)
    for label in study_labels(meta, objectives):
        other, other_args = parse_label(label)
        if other == name:
            args.update({k: typed_value(v) for k, v in other_args.items() if k in args})
            break
    args.update({k: typed_value(v) for k, v in given.items()})
    if "device" in args:
        args["device"] = given.get("device", device)
    for arg, value in args.items():
        if arg == "device":
            from archsearch.latency import load_device

            if devices is not None and str(value) not in devices:
                raise UserError(
                    f"unknown device {str(value)!r} in {spec!r} (known: {', '.join(devices)})",
                    key=key,
                )
            load_device(str(value), key=key)
        else:
            check_argument(arg, value, key=key)
    label = MetricSpec(name, tuple(args.items())).label
    direction = mdef.direction
    for obj, d in zip(objectives, directions):
        if for_device(obj, str(args.get("device", device))) == label:
            direction = d
    return Axis(label, direction)


def default_axes(objectives: list[str], directions: list[str], device: str) -> list[Axis]:
    """The study's objectives on `device`, cost metrics first (x), training metrics after (y)."""
    axes = [Axis(for_device(o, device), d) for o, d in zip(objectives, directions)]

    def is_train(a: Axis) -> bool:
        name = parse_label(a.label)[0]
        return name not in METRICS or METRICS[name].phase == "train"

    return sorted(axes, key=is_train)


# ---- how an axis is shown ---------------------------------------------------------------------

_UNITS = {
    "bytes": (2.0**20, "MiB"),
    "count": (1e6, "M"),
    "flops": (1e9, "GFLOP"),
    "ms": (1.0, "ms"),
    "nats": (1.0, "nats/token"),
}
RATIO_UNITS = ("bytes", "count", "flops", "ms")  # sizes and times: log axes over decades


def _unit_of(label: str) -> str:
    name, _ = parse_label(label)
    return METRICS[name].unit if name in METRICS else ""


def display_scale(label: str, values: Any = None) -> tuple[float, str]:
    """(divisor, unit) for showing an axis: without `values` bytes in MiB, FLOPs in GFLOP,
    parameter counts in millions; with them the prefix their largest magnitude reaches
    (`archsearch.units.scale_for`: KiB for a 512 KiB cache, GiB for 3 GB of weights)."""
    unit = _unit_of(label)
    if values is not None and unit in ("bytes", "count", "flops"):
        return scale_for(unit, values)
    return _UNITS.get(unit, (1.0, ""))


def log_axis(label: str, values: Any) -> bool:
    """Whether an axis is drawn on a log scale: a size or time whose values span more than
    `archsearch.units.DECADES` powers of ten (never a loss, perplexity or accuracy)."""
    return _unit_of(label) in RATIO_UNITS and spans_decades(values)


def axis_title(label: str, values: Any = None) -> str:
    """`decode_ms[rpi5,context=1024,precision=fp16]` -> 'decode_ms on rpi5 (ms; context=1024,
    precision=fp16)'; the unit as `display_scale(label, values)` shows it."""
    name, args = parse_label(label)
    _, unit = display_scale(label, values)
    where = f" on {args.pop('device')}" if "device" in args else ""
    if "task" in args:
        where += f" ({args.pop('task')})"
    inside = [unit] if unit else []
    inside += [f"{k}={v}" for k, v in args.items()]
    return f"{name}{where}" + (f" ({'; '.join(inside)})" if inside else "")
