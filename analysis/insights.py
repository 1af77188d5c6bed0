"""What a study learned: for every objective the importance of each searched parameter, the
main effects of its levels and the notable two-way interactions, each with its interval and
the trials behind it; the front's composition by factor on each device and what changes
between devices; which front neighbour is faster, with what confidence; and all of it as plain
statements (`archsearch insights`, the report's "What the study learned", the dashboard).

The parts: `design` (the trials used, the factors, each objective's observations),
`importance` (fANOVA with bootstrap intervals), `effects` (main effects and interactions with
bootstrap intervals), `archsearch.latency.order` (pairwise order confidence of a profile). Here
they are put together and worded; `insight_plots` draws them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from archsearch.analysis.confirm import correct_predicted_axes
from archsearch.analysis.design import MIN_TRIALS, Design, Factor, Observed, design, observe
from archsearch.analysis.effects import (
    RESAMPLES,
    Effect,
    Interaction,
    Interval,
    main_effects,
    model_size,
)
from archsearch.analysis.effects import interactions as find_interactions
from archsearch.analysis.front import (
    LATENCIES,
    default_axes,
    for_device,
    predict_axes,
    resolve_axis,
)
from archsearch.analysis.importance import RESAMPLES as IMPORTANCE_RESAMPLES
from archsearch.analysis.importance import Importance, Support, importances, support
from archsearch.analysis.noise import NOT_MEASURED
from archsearch.analysis.pareto import Pareto, analyse
from archsearch.errors import UserError
from archsearch.metrics import MetricSpec, parse_label
from archsearch.study import StudyData, redact

__all__ = [
    "Composition",
    "Insights",
    "ObjectiveInsights",
    "Ordered",
    "fmt_interval",
    "insights",
    "short_label",
]

SHOWN_INTERACTIONS = 3  # notable interactions stated per objective


@dataclass
class ObjectiveInsights:
    """What the study says of one objective."""

    observed: Observed
    importance: list[Importance]
    effects: list[Effect]
    interactions: list[Interaction]  # every contrast tested
    size: tuple[int, int] = (0, 0)  # the effects model's (coefficients, trials)
    support: Support = field(default_factory=lambda: Support(0, 0))  # what importances stand on

    @property
    def label(self) -> str:
        return self.observed.label

    @property
    def notable(self) -> list[Interaction]:
        """Interactions whose interval excludes 0, the clearest first."""
        got = [i for i in self.interactions if i.notable]
        return sorted(
            got, key=lambda i: -abs(i.interval.estimate) / max(i.interval.half_width, 1e-12)
        )

    def noise_note(self) -> str:
        """The seed noise beside the effects of a trained objective."""
        o = self.observed
        if o.kind == "cost":
            return "exact for each architecture (cost model): the intervals are the design's spread"
        if o.kind == "predicted":
            return "predicted values: each trial's 1-sigma error is drawn into the intervals"
        if o.noise is not None:
            return (
                f"pooled seed std {o.noise.std:.3g} {o.unit} ({o.noise.dof} dof from "
                f"{o.noise.architectures} replicated architectures): the intervals resample seeds"
            )
        return (
            f"{NOT_MEASURED}: the intervals resample trials only, whose spread holds the seed "
            "noise unseparated; `replicates=` measures it"
        )


@dataclass
class Composition:
    """A device's front, by factor: per level (trials on the front, trained trials)."""

    device: str
    front: list[int]  # trial numbers on the front
    trained: int
    counts: dict[str, dict[str, tuple[int, int]]]

    def level_share(self, factor: str, level: str) -> tuple[int, int]:
        return self.counts.get(factor, {}).get(level, (0, 0))


@dataclass(frozen=True)
class Ordered:
    """Two neighbours of a device's front on a latency axis: the faster one, how sure."""

    device: str
    label: str
    faster: int
    slower: int
    values: tuple[float, float]  # their predicted latencies
    errors: tuple[float, float]  # each one's relative +- (nan: unknown)
    confidence: float
    pairs: int


@dataclass
class Insights:
    design: Design
    devices: list[str]  # the devices of the objectives' latency and memory axes
    objectives: list[ObjectiveInsights]
    fronts: list[Composition]
    ordering: list[Ordered]
    resamples: int
    notes: list[str] = field(default_factory=list)

    @property
    def data(self) -> StudyData:
        return self.design.data

    def objective(self, label: str) -> ObjectiveInsights:
        return next(o for o in self.objectives if o.label == label)

    def statements(self) -> list[str]:
        """Every finding in words, each with its interval and the trials behind it."""
        return [line for _, lines in self.sections() for line in lines]

    def sections(self) -> list[tuple[str, list[str]]]:
        """(title, statements) in the order they are read."""
        out = [("What the analysis stands on", [self.design.describe(), *self.notes])]
        for o in self.objectives:
            out.append((short_label(o.label), objective_lines(o, self.design)))
        out.append(("The front by factor", composition_lines(self)))
        if self.ordering:
            out.append(("Which is faster", ordering_lines(self.ordering)))
        return out

    def summary(self) -> dict[str, Any]:
        """Everything as plain data (format=json, insights.json)."""
        return {
            "study": self.data.name,
            "storage": redact(self.data.url),
            "devices": self.devices,
            "trials": len(self.design.trials),
            "left_out": self.design.left_out,
            "replicates": sum(len(v) for v in self.design.replicates.values()),
            "resamples": self.resamples,
            "factors": [factor_summary(f) for f in self.design.factors],
            "objectives": [objective_summary(o) for o in self.objectives],
            "fronts": [
                {"device": c.device, "front": c.front, "trained": c.trained, "by_factor": c.counts}
                for c in self.fronts
            ],
            "faster": [
                {
                    "device": o.device,
                    "axis": o.label,
                    "faster": o.faster,
                    "slower": o.slower,
                    "values": list(o.values),
                    "errors": [_num(e) for e in o.errors],
                    "confidence": o.confidence,
                    "held_out_pairs": o.pairs,
                }
                for o in self.ordering
            ],
            "statements": self.statements(),
        }


# ---- computing -------------------------------------------------------------------------------


def insight_labels(
    data: StudyData, devices: list[str], extra: list[str] = ()
) -> list[tuple[str, str]]:
    """(label, direction) of every objective analysed: the study's, a device-dependent one on
    each of `devices`, then `extra` metrics (any the vocabulary names, completed as `pareto`'s
    axes are: `val_loss@tokens:10M`, `memory_bytes`)."""
    out: list[tuple[str, str]] = []
    for label, direction in zip(data.objectives, data.directions):
        if "device" in parse_label(label)[1]:
            out += [(for_device(label, d), direction) for d in devices]
        else:
            out.append((label, direction))
    for spec in extra:
        axis = resolve_axis(
            spec,
            device=devices[0],
            objectives=data.objectives,
            directions=data.directions,
            meta=data.meta,
            key="metrics",
        )
        if axis.label not in {label for label, _ in out}:
            out.append((axis.label, axis.direction))
    return out


def insights(
    data: StudyData,
    devices: list[str],
    *,
    fronts: list[str] | None = None,
    extra: list[str] = (),
    resamples: int = RESAMPLES,
    importance_resamples: int = IMPORTANCE_RESAMPLES,
    seed: int = 0,
) -> Insights:
    """What `data` learned (see the module docstring): objectives on `devices`, fronts on
    `fronts` (default: the same devices), which front neighbour is faster on those of
    `fronts` that are in `devices`."""
    data.require_trained()
    d = design(data)
    if not d.factors:
        raise UserError(
            f"study {data.name!r} stores no searched parameters: nothing to attribute effects to",
            key="study",
        )
    labels = insight_labels(data, devices, list(extra))
    names = [label for label, _ in labels]
    predict_axes(
        data.records,
        names,
        dict(data.meta.get("train") or {}),
        curves=lambda: data.curves([r.number for r in data.trained]),
    )
    corrected = correct_predicted_axes(data, names)
    objectives = []
    for label, direction in labels:
        obs = observe(d, label, direction, corrected.get(label, ""))
        if not obs.has_value.any():
            continue
        kw = {"resamples": resamples, "seed": seed}
        objectives.append(
            ObjectiveInsights(
                obs,
                importances(d, obs, resamples=importance_resamples, seed=seed),
                main_effects(d, obs, **kw),
                find_interactions(d, obs, **kw),
                model_size(d, obs),
                support(d, obs),
            )
        )
    comps, ordering = [], []
    for device in fronts or devices:
        axes = default_axes(data.objectives, data.directions, device)
        p = analyse(data, device, axes)
        comps.append(composition(d, p))
        if device in devices:  # the front's order on the devices the objectives are read on
            ordering += sorted(ordered(p), key=lambda o: (o.label, o.values[0]))
    notes = []
    if corrected:
        notes += [f"{label}: {how}" for label, how in corrected.items()]
    return Insights(d, devices, objectives, comps, ordering, resamples, notes)


def composition(d: Design, p: Pareto) -> Composition:
    """The front of `p` by the levels of `d`'s factors."""
    on = {r.number for r, _ in p.front}
    index = {r.number: i for i, r in enumerate(d.trials)}
    counts: dict[str, dict[str, tuple[int, int]]] = {}
    for f in d.factors:
        if f.slope:
            continue
        by: dict[str, tuple[int, int]] = {}
        for r in p.trained:
            i = index.get(r.number)
            if i is None:
                continue
            v = f.values[i]
            key = "-" if v is None else f.level_text(v)
            front_n, all_n = by.get(key, (0, 0))
            by[key] = (front_n + (r.number in on), all_n + 1)
        counts[f.name] = by
    return Composition(p.device, sorted(on), len(p.trained), counts)


def ordered(p: Pareto) -> list[Ordered]:
    """The front's neighbours on each latency axis with a pairwise confidence."""
    from archsearch.latency.order import spec_ordering

    out = []
    by_number = {r.number: i for i, r in enumerate(p.trained)}
    for label, (nxt, odds) in p.faster_than_next.items():
        k = [a.label for a in p.axes].index(label)
        errors = p.axis_errors.get(label)
        pairs = spec_ordering(MetricSpec.parse(label)).pairs
        for i in np.flatnonzero(nxt >= 0):
            j = by_number[int(nxt[i])]
            out.append(
                Ordered(
                    p.device,
                    label,
                    p.trained[i].number,
                    int(nxt[i]),
                    (float(p.values[i, k]), float(p.values[j, k])),
                    (
                        float(errors[i]) if errors is not None else math.nan,
                        float(errors[j]) if errors is not None else math.nan,
                    ),
                    float(odds[i]),
                    pairs,
                )
            )
    return out


# ---- words -----------------------------------------------------------------------------------


def short_label(label: str) -> str:
    """A label as statements show it: `decode_ms@rpi5` for a device's latency at the study's
    setting, the full label otherwise."""
    name, args = parse_label(label)
    if "device" in args and name in (*LATENCIES, "memory_bytes"):
        return f"{name}@{args['device']}"
    return label


def fmt_interval(i: Interval, unit: str) -> str:
    """'+0.080 +- 0.030 nats/token', '-31% +- 2%': the estimate and the half-width of its 95%
    interval, to the digits the half-width warrants."""
    digits = _digits(i.half_width)
    if unit == "%":
        d = max(0, min(digits, 1))
        return f"{i.estimate:+.{d}f}% +- {i.half_width:.{d}f}%"
    tail = f" {unit}" if unit else ""
    return f"{i.estimate:+.{digits}f} +- {i.half_width:.{digits}f}{tail}"


def fmt_range(i: Interval, unit: str) -> str:
    """'95% interval -0.012..+0.020' (in % for a relative effect)."""
    digits = max(0, min(_digits(i.half_width), 1)) if unit == "%" else _digits(i.half_width)
    pct = "%" if unit == "%" else ""
    return f"95% interval {i.low:+.{digits}f}{pct}..{i.high:+.{digits}f}{pct}"


def _digits(half_width: float) -> int:
    if not math.isfinite(half_width) or half_width <= 0:
        return 3
    return max(0, min(6, 1 - math.floor(math.log10(half_width))))


def effect_line(e: Effect, f: Factor) -> str:
    """One main effect as a statement."""
    where = short_label(e.objective)
    given = f" (at {e.given})" if e.given else ""
    if f.slope:
        what = f"{e.factor} {e.level}"
        count = f"n={e.n}"
    else:
        what = f"{e.factor} {f.level_text(e.level)} vs {f.level_text(e.reference)}"
        count = f"n={e.n} vs {e.n_reference}"
    # the model's own counts, where trials at levels trained once were left out of it
    in_model = "" if f.slope or e.modelled == (e.n, e.n_reference) else " in the model"
    if in_model:
        count += f", {e.modelled[0]} vs {e.modelled[1]}{in_model}"
    if e.status == "too few trained trials":
        return (
            f"{what}: too few trained trials for an effect on {where} ({count}; needs "
            f"{MIN_TRIALS} each{in_model})"
        )
    if e.status == "confounded":
        return (
            f"{what}{given}: moves with {e.note or 'another factor'} in these trials, not "
            f"separable on {where} ({count})"
        )
    if e.status == "too few trials":
        return f"{what}{given}: too few trials to resolve on {where} ({count})"
    assert e.interval is not None
    if not e.resolved:
        return (
            f"{what}{given}: not resolved at this budget on {where} "
            f"({fmt_interval(e.interval, e.unit)}, {fmt_range(e.interval, e.unit)}; {count})"
        )
    return f"{what}{given}: {fmt_interval(e.interval, e.unit)} on {where} ({count})"


def interaction_line(i: Interaction, d: Design) -> str:
    fa, fb = d.factor(i.factors[0]), d.factor(i.factors[1])
    a, b = fa.level_text(i.levels[0]), fb.level_text(i.levels[1])
    base_a, base_b = fa.level_text(i.bases[0]), fb.level_text(i.bases[1])
    return (
        f"{fa.name} {a} vs {base_a} on {short_label(i.objective)}: "
        f"{fmt_interval(i.at_level, i.unit)} at {fb.name}={b}, "
        f"{fmt_interval(i.at_base, i.unit)} at {fb.name}={base_b} "
        f"(difference {fmt_interval(i.interval, i.unit)}; n={'/'.join(map(str, i.counts))})"
    )


def objective_lines(o: ObjectiveInsights, d: Design) -> list[str]:
    """The statements of one objective: how its values were obtained, what matters most,
    the resolved effects (clearest first), the unresolved ones, the levels with too little
    data, and the notable interactions."""
    lines = [f"{short_label(o.label)}: {o.observed.how}; {o.noise_note()}"]
    coefficients, trials = o.size
    if coefficients == 1:  # the intercept alone
        lines.append(
            "no effect can be fitted yet: no level but each factor's reference has two trained "
            f"trials among the {trials} the effects model keeps (a trial at a level trained "
            "once is left out); more trials resolve the effects"
        )
    elif coefficients * 2 > trials:
        lines.append(
            f"the effects model has {coefficients} coefficients (an intercept, one per level "
            f"but the reference) for {trials} trials: resamples of so few trials cannot "
            "separate most of them, so many effects stay unresolved; more trials, or fewer "
            "searched parameters, resolve them"
        )
    if not o.support.separable and o.support.terms:
        lines.append(
            f"what matters most for {short_label(o.label)}: not estimated yet: "
            f"{o.support.trials} trials cannot separate the {o.support.terms} main-effect terms "
            "of the levels trained so far (one per active level beyond the first); fANOVA would "
            f"split the variance among them at random; it takes at least {o.support.needed} "
            "trials"
        )
    if o.importance:
        top = [i for i in o.importance if i.share >= 0.05][:3] or o.importance[:1]
        parts = [f"{i.factor} {i.share:.0%} ({i.low:.0%}..{i.high:.0%})" for i in top]
        lines.append(
            f"what matters most for {short_label(o.label)} (fANOVA share of its variance, 95% "
            f"interval; {int(o.observed.has_value.sum())} trials): {', '.join(parts)}"
        )

    def clarity(e: Effect) -> float:
        i = e.interval
        return -abs(i.estimate) / max(i.half_width, 1e-12) if i is not None else 0.0

    estimated = sorted((e for e in o.effects if e.interval is not None), key=clarity)
    resolved = [e for e in estimated if e.resolved]
    rest = [e for e in estimated if not e.resolved]
    rest += [e for e in o.effects if e.interval is None]
    lines += [effect_line(e, d.factor(e.factor)) for e in resolved + rest]
    if o.interactions:
        notable = o.notable
        lines.append(
            f"two-way interactions on {short_label(o.label)}: {len(notable)} of "
            f"{len(o.interactions)} contrasts tested exclude 0 from their 95% interval (about "
            f"{len(o.interactions) / 20:.1f} would by chance)"
        )
        lines += [interaction_line(i, d) for i in notable[:SHOWN_INTERACTIONS]]
    return lines


def composition_lines(ins: Insights) -> list[str]:
    """Each device's front by factor, and what changes between devices."""
    lines = []
    for c in ins.fronts:
        parts = []
        for f in ins.design.factors:
            by = c.counts.get(f.name)
            if not by:
                continue
            on = [(lv, n) for lv, (n, _) in by.items() if n]
            if not on:
                continue
            shown = ", ".join(
                f"{lv} {n} (of {by[lv][1]})" for lv, n in sorted(on, key=lambda t: -t[1])
            )
            parts.append(f"{f.name}: {shown}")
        members = ", ".join(f"#{n}" for n in c.front[:12]) + (" ..." if len(c.front) > 12 else "")
        lines.append(
            f"front on {c.device}: {len(c.front)} of {c.trained} trained ({members}); "
            + "; ".join(parts)
        )
    lines += device_changes(ins.fronts, ins.design)
    return lines


SHOWN_CHANGES = 5  # levels whose share of the front moves most, per pair of devices


def device_changes(fronts: list[Composition], d: Design) -> list[str]:
    """What changes from the first device to each other: the trials that enter or leave the
    front, and the `SHOWN_CHANGES` levels whose share of the front moves most (front places
    with that level over the front's size; a level that is not a parameter's "-")."""
    if len(fronts) < 2:
        return []
    lines = []
    base = fronts[0]
    for c in fronts[1:]:
        gained = sorted(set(c.front) - set(base.front))
        lost = sorted(set(base.front) - set(c.front))
        if not gained and not lost:
            lines.append(f"{c.device} vs {base.device}: the same front")
            continue
        moved = []
        for f in d.factors:
            for lv in sorted(set(base.counts.get(f.name, {})) | set(c.counts.get(f.name, {}))):
                a, b = base.level_share(f.name, lv)[0], c.level_share(f.name, lv)[0]
                shift = b / max(len(c.front), 1) - a / max(len(base.front), 1)
                if a != b and lv != "-":
                    moved.append(
                        (
                            -abs(shift),
                            f"{f.name}={lv} {a} of {len(base.front)} -> {b} of {len(c.front)}",
                        )
                    )
        shown = [text for _, text in sorted(moved)[:SHOWN_CHANGES]]
        lines.append(
            f"{c.device} vs {base.device}: the front gains {_numbers(gained)} and loses "
            f"{_numbers(lost)}; the levels that move most: {'; '.join(shown) or 'none'}"
        )
    return lines


def _numbers(ns: list[int]) -> str:
    return ", ".join(f"#{n}" for n in ns) if ns else "none"


def ordering_lines(ordering: list[Ordered]) -> list[str]:
    from archsearch.units import fmt_error

    return [
        f"#{o.faster} is faster than #{o.slower} on {short_label(o.label)} "
        f"({o.values[0]:.4g} vs {o.values[1]:.4g} ms, ratio {o.values[0] / o.values[1]:.2f}; "
        f"each {fmt_error(o.errors[0])} / {fmt_error(o.errors[1])}): P = {o.confidence:.2f} "
        f"(from {o.pairs} held-out pairs of its profile)"
        for o in ordering
    ]


# ---- plain data -------------------------------------------------------------------------------


def factor_summary(f: Factor) -> dict[str, Any]:
    return {
        "name": f.name,
        "levels": [f.level_text(v) for v in f.levels],
        "reference": None if f.slope else f.level_text(f.reference),
        "reference_from": f.reference_from,
        "counts": None if f.slope else [f.count(v) for v in f.levels],
        "slope": f.slope or None,
        "condition": f.given or None,
    }


def _interval_dict(i: Interval | None) -> dict[str, float] | None:
    if i is None:
        return None
    return {"estimate": i.estimate, "low": i.low, "high": i.high, "resolved": i.resolved}


def objective_summary(o: ObjectiveInsights) -> dict[str, Any]:
    return {
        "objective": o.label,
        "direction": o.observed.direction,
        "kind": o.observed.kind,
        "unit": o.observed.unit,
        "how": o.observed.how,
        "seed_noise": None
        if o.observed.noise is None
        else {"std": o.observed.noise.std, "dof": o.observed.noise.dof},
        "trials": int(o.observed.has_value.sum()),
        "importance": [
            {"factor": i.factor, "share": i.share, "low": i.low, "high": i.high}
            for i in o.importance
        ],
        "importance_support": {
            "trials": o.support.trials,
            "terms": o.support.terms,
            "needed": o.support.needed,
        },
        "effects": [
            {
                "factor": e.factor,
                "level": e.level if isinstance(e.level, (int, float, str)) else str(e.level),
                "reference": e.reference,
                "n": e.n,
                "n_reference": e.n_reference,
                "modelled": list(e.modelled),
                "status": e.status,
                "given": e.given or None,
                **(_interval_dict(e.interval) or {}),
            }
            for e in o.effects
        ],
        "interactions": [
            {
                "factors": list(i.factors),
                "levels": list(i.levels),
                "bases": list(i.bases),
                "counts": list(i.counts),
                "difference": _interval_dict(i.interval),
                "at_level": _interval_dict(i.at_level),
                "at_base": _interval_dict(i.at_base),
            }
            for i in o.interactions
        ],
    }


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None
