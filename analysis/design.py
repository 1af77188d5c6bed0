"""A study read as a designed experiment: which trials an analysis of effects may use, the
factors (the searched parameters) and their trained levels, and each objective's observations
with the noise they carry.

- **Trials**: the ones a front uses (`front.candidates`): fully trained, feasible, one per
  architecture. Trials stopped early (their loss is an under-trained one), failed, interrupted,
  infeasible or invalid (never trained) and duplicates (an architecture already counted) are
  left out and counted; replicates and confirmations are not points of their own: a trained
  trial's replicates are its other seeds, confirmations correct a predicted loss
  (`confirm.correct_predicted_axes`), as on the front.
- **Factors**: every searched parameter a trained trial has. A conditional parameter (a space's
  `when:`) is inactive where its condition does not hold: it has no level there, and its
  effects are among the trials where it is active (`Factor.given` names the condition as the
  data show it). A numeric parameter with more than `MAX_LEVELS` trained values is a slope (per
  doubling when every value is positive) rather than levels.
- **Reference level**: the first value the space lists for the parameter (Optuna stores each
  trial's distribution: `choice(0.0, 0.5)` -> 0.0, `choice(attention, linear, mcsd)` ->
  attention), else the smallest number or the level most trials have. A reference with fewer
  than `MIN_TRIALS` trained trials gives way to the level with the most, and says so.
- **Observations** of an objective, per trial: its seeds (the trial's own value and those of its
  replicates), and for a loss predicted at another budget its 1-sigma error, which the
  intervals carry. Cost metrics are exact for an architecture: one value, no noise.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from archsearch.analysis.front import RATIO_UNITS, candidates, display_scale, value_of
from archsearch.analysis.noise import Pooled, pooled_std, replicate_value
from archsearch.metrics import METRICS, MetricSpec, parse_label
from archsearch.study import Status, StudyData, TrialRecord

__all__ = [
    "INACTIVE",
    "MAX_LEVELS",
    "MIN_TRIALS",
    "Design",
    "Factor",
    "Observed",
    "design",
    "observe",
]

MIN_TRIALS = 2  # trained trials a level needs before it has an effect of its own
MAX_LEVELS = 8  # a numeric parameter with more trained values is read as a slope
INACTIVE = "-"  # the level a conditional parameter shows where its condition does not hold


@dataclass(frozen=True)
class Factor:
    """One searched parameter over the design's trials."""

    name: str
    values: tuple[Any, ...]  # per trial: its value, None where the parameter is inactive
    levels: tuple[Any, ...]  # the trained levels, the reference first (a slope: its values)
    slope: str = ""  # "log2" (per doubling) or "unit" for a numeric parameter of many values
    reference_from: str = ""  # how the reference level was chosen
    given: str = ""  # where a conditional parameter is active, as the data show it

    @property
    def reference(self) -> Any:
        return self.levels[0]

    @property
    def active(self) -> np.ndarray:
        return np.array([v is not None for v in self.values])

    def count(self, level: Any) -> int:
        return sum(1 for v in self.values if v is not None and _same(v, level))

    def estimable(self, level: Any) -> bool:
        return self.count(level) >= MIN_TRIALS

    @property
    def resolvable(self) -> bool:
        """Whether the trained trials can say anything of it: two levels with `MIN_TRIALS`
        each (a slope: three distinct values)."""
        if self.slope:
            return len(self.levels) >= 3
        return sum(self.estimable(v) for v in self.levels) >= 2

    def indicator(self, level: Any) -> np.ndarray:
        """1.0 where a trial has this level (0 where it has another, or is inactive)."""
        return np.array([float(v is not None and _same(v, level)) for v in self.values])

    def numeric(self) -> np.ndarray:
        """A slope's regressor: log2 (or the value), centred over the active trials; 0 where
        inactive."""
        x = np.array([np.nan if v is None else float(v) for v in self.values])
        if self.slope == "log2":
            x = np.log2(x)
        active = np.isfinite(x)
        x[active] -= x[active].mean()
        x[~active] = 0.0
        return x

    def level_text(self, level: Any) -> str:
        return _text(level)

    def describe(self) -> str:
        """'layers.mixer: attention (reference, n=7), linear (n=9), mcsd (n=4)'."""
        if self.slope:
            lo, hi = min(self.levels), max(self.levels)
            per = "per doubling" if self.slope == "log2" else "per unit"
            return (
                f"{self.name}: {len(self.levels)} values from {_text(lo)} to {_text(hi)} "
                f"(a slope {per}; n={int(self.active.sum())})"
            )
        parts = [
            f"{_text(v)} ({'reference, ' if i == 0 else ''}n={self.count(v)})"
            for i, v in enumerate(self.levels)
        ]
        inactive = len(self.values) - int(self.active.sum())
        tail = f"; inactive in {inactive} ({self.given or 'conditional'})" if inactive else ""
        return f"{self.name}: {', '.join(parts)}{tail}"


@dataclass
class Design:
    """The trials an analysis of effects uses, and its factors."""

    data: StudyData
    trials: list[TrialRecord]
    factors: list[Factor]
    left_out: dict[str, int]  # status -> trials not used
    replicates: dict[int, list[TrialRecord]] = field(default_factory=dict)  # by trial number

    def factor(self, name: str) -> Factor:
        return next(f for f in self.factors if f.name == name)

    def describe(self) -> str:
        """What the analysis stands on, in one line."""
        reps = sum(len(v) for v in self.replicates.values())
        seeds = f"; {reps} replicates fold into their trials' means" if reps else ""
        left = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(self.left_out.items()))
        return (
            f"{len(self.trials)} fully trained feasible architectures (one trial each, as on the "
            f"front){seeds}; left out: {left or 'nothing'}"
        )


def design(data: StudyData) -> Design:
    """The design of a study (see the module docstring)."""
    trials = candidates(data.records)
    used = {r.number for r in trials}
    left: Counter[str] = Counter()
    reps: dict[int, list[TrialRecord]] = {}
    for r in data.records:
        if r.number in used:
            continue
        if r.status == Status.REPLICATE and r.attrs.get("replicate_of") is not None:
            reps.setdefault(int(r.attrs["replicate_of"]), []).append(r)
            continue
        if r.status == Status.CONFIRMATION:
            continue
        left[_left_out_as(r)] += 1
    reps = {n: v for n, v in reps.items() if n in used}
    choices = _stored_choices(data, trials)
    names = list(dict.fromkeys(k for r in trials for k in r.params))
    factors = [_factor(name, trials, choices.get(name)) for name in names]
    factors = [_with_condition(f, factors) for f in factors]
    return Design(data, trials, factors, dict(left), reps)


def _left_out_as(r: TrialRecord) -> str:
    if r.status == Status.TRAINED and not r.feasible:
        return "infeasible"
    if r.status == Status.TRAINED:  # a later trial of an architecture already counted
        return "duplicate"
    return r.status or r.state.lower()


def _same(a: Any, b: Any) -> bool:
    if _is_number(a) and _is_number(b):
        return float(a) == float(b)
    return a == b


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _text(v: Any) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return f"{v:g}"
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _stored_choices(data: StudyData, trials: list[TrialRecord]) -> dict[str, tuple]:
    """Each categorical parameter's choices in the order the space lists them, from one
    trial's stored distribution (Optuna's public storage API; {} where it cannot be read)."""
    storage = data.storage
    if storage is None:
        return {}
    out: dict[str, tuple] = {}
    try:
        study_id = storage.get_study_id_from_name(data.name)
        for r in trials:
            if not set(r.params) - set(out):
                continue
            tid = storage.get_trial_id_from_study_id_trial_number(study_id, r.number)
            for name, dist in storage.get_trial(tid).distributions.items():
                if hasattr(dist, "choices"):
                    out.setdefault(name, tuple(dist.choices))
            if len(out) == len({k for t in trials for k in t.params}):
                break
    except Exception:  # a storage that cannot answer: the fallback references below
        return out
    return out


def _factor(name: str, trials: list[TrialRecord], choices: tuple | None) -> Factor:
    values = tuple(r.params.get(name) for r in trials)
    seen = [v for v in values if v is not None]
    distinct: list[Any] = []
    for v in seen:
        if not any(_same(v, d) for d in distinct):
            distinct.append(v)
    numeric = all(_is_number(v) for v in distinct)
    if numeric and len(distinct) > MAX_LEVELS:
        kind = "log2" if min(distinct) > 0 else "unit"
        return Factor(name, values, tuple(sorted(distinct)), slope=kind)
    counts = {i: sum(1 for v in seen if _same(v, d)) for i, d in enumerate(distinct)}
    if choices:
        order = [d for c in choices for d in distinct if _same(c, d)]
        order += [d for d in distinct if not any(_same(d, o) for o in order)]
        how = "the first value the space lists"
    elif numeric:
        order, how = sorted(distinct), "the smallest value"
    else:
        order = sorted(distinct, key=lambda d: (-counts[distinct.index(d)], str(d)))
        how = "the level most trials have"
    ref = order[0]
    if counts[distinct.index(ref)] < MIN_TRIALS and order:
        best = max(order, key=lambda d: counts[distinct.index(d)])
        if counts[distinct.index(best)] >= MIN_TRIALS:
            how = (
                f"the level most trials have ({_text(ref)}, {how}, has "
                f"{counts[distinct.index(ref)]} trained trial)"
            )
            ref = best
    order = [ref] + [d for d in order if not _same(d, ref)]
    return Factor(name, values, tuple(order), reference_from=how)


def _with_condition(f: Factor, factors: list[Factor]) -> Factor:
    """Name where a conditional factor is active: the other factors active wherever it is,
    and the levels of theirs it is active at, when those are fewer than all of them."""
    active = f.active
    if active.all():
        return f
    where = []
    for g in factors:
        if g.name == f.name or g.slope or not g.active[active].all():
            continue
        here = np.array(g.values, object)[active]
        at = [lv for lv in g.levels if any(_same(v, lv) for v in here)]
        if len(at) < len(g.levels):
            where.append(f"{g.name}={'|'.join(_text(v) for v in at)}")
    given = f"active where {', '.join(where)}" if where else "conditional"
    return Factor(f.name, f.values, f.levels, f.slope, f.reference_from, given)


# ---- observations --------------------------------------------------------------------------------


@dataclass
class Observed:
    """One objective's observations over a design's trials."""

    label: str
    direction: str
    seeds: list[np.ndarray]  # per trial: its finite seed values (empty: no value)
    std: np.ndarray  # per trial: 1-sigma of a predicted value (0: measured or exact)
    kind: str  # "trained" (seed noise), "cost" (exact for an architecture), "predicted"
    how: str  # how the values were obtained, in words
    noise: Pooled | None = None  # the study's pooled seed noise on it (replicates)

    @property
    def values(self) -> np.ndarray:
        return np.array([s.mean() if len(s) else np.nan for s in self.seeds])

    @property
    def has_value(self) -> np.ndarray:
        return np.array([len(s) > 0 for s in self.seeds])

    @property
    def ratio(self) -> bool:
        """Whether effects are relative (a size or a time: -31%), on the log scale; else in
        the objective's own unit (nats/token, accuracy)."""
        name = parse_label(self.label)[0]
        unit = METRICS[name].unit if name in METRICS else ""
        values = np.concatenate([s for s in self.seeds if len(s)] or [np.zeros(0)])
        return unit in (*RATIO_UNITS, "ppl") and len(values) > 0 and bool(np.all(values > 0))

    @property
    def unit(self) -> str:
        """The unit effects are stated in: '%' for a relative effect, else the objective's."""
        if self.ratio:
            return "%"
        unit = display_scale(self.label)[1]
        return "nats/token" if unit == "nats/token" else unit


def observe(d: Design, label: str, direction: str, how_predicted: str = "") -> Observed:
    """The observations of objective `label` over `d`'s trials (see the module docstring);
    a predicted loss reads `attrs["predicted"]` as `front.predict_axes` and
    `confirm.correct_predicted_axes` leave it (`how_predicted`: what the latter said)."""
    objectives = d.data.objectives
    spec = _spec(label)
    predicted = spec is not None and spec.predicted_at is not None
    cost = spec is not None and spec.phase == "cost"
    seeds, std = [], np.zeros(len(d.trials))
    for i, r in enumerate(d.trials):
        if predicted:
            got = (r.attrs.get("predicted") or {}).get(label)
            ok = isinstance(got, dict) and _finite(got.get("value")) is not None
            seeds.append(np.array([float(got["value"])]) if ok else np.zeros(0))
            std[i] = float(got.get("std") or 0.0) if ok else 0.0
            continue
        own = _finite(value_of(r, label, objectives))
        values = [] if own is None else [own]
        if not cost and own is not None:
            for rep in d.replicates.get(r.number, []):
                v = _finite(replicate_value(rep, label, objectives))
                if v is not None:
                    values.append(v)
        seeds.append(np.array(values, dtype=float))
    if predicted:
        kind = "predicted"
        how = how_predicted or (
            "predicted: each trial's sandbox loss curve extrapolated by the annealing law; its "
            "1-sigma error enters the intervals"
        )
    elif cost:
        kind, how = "cost", "the cost model's value for each architecture (exact, no seed noise)"
    else:
        kind, how = "trained", "measured by the sandbox trial"
    noise = None
    if kind == "trained":
        groups = [s for s in seeds if len(s) > 1]
        pooled = pooled_std(groups)
        noise = pooled if pooled.measured else None
    return Observed(label, direction, seeds, std, kind, how, noise)


def _spec(label: str) -> MetricSpec | None:
    try:
        return MetricSpec.parse(label)
    except ValueError:
        return None


def _finite(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None
