"""Main effects and two-way interactions of a study's factors on one objective, each with a
bootstrap interval.

**The model.** The objective (its log for a size or a time, whose effects are relative: -31%)
is fitted by least squares on every factor at once, in reference coding: an intercept, one
indicator per level but the reference (0 where the parameter is inactive), one centred
regressor per slope. A level's coefficient is its effect against the reference with the other
factors held fixed, so an effect is not what another factor that came with it did (a sampler
that sent every MLA trial to width 128 leaves `attention.kind` and `d_model` confounded: such a
coefficient is not identified by the trials, and is said to be). For a conditional parameter
the effect is among the trials where it is active; the effect of the level of its parent that
activates it is at its reference (`layers.mixer=linear` at `linear.family`'s reference).

A main effect is an average over the trials' levels of the other factors: where two factors
interact, it is the effect at each level of the other weighted by how many trials that level
has, and the interaction says how it varies.

**Interactions.** For two factors A and B, one model more, fitted on the trials where both
are active (a trial where B is inactive is not at B's base level), with, per pair of levels
(a, b), the product of their indicators: its coefficient is the difference-in-differences (a
vs A's base at B=b) - (a vs A's base at B's base), the bases being the first levels (the
reference first) at which the other factor is active: for `layers.attention_share` (active
for linear mixers and MCSD) against `layers.mixer`, the share's effect at `mcsd` minus its
effect at `linear`.

**Intervals** are percentile intervals (95%) over `RESAMPLES` bootstrap resamples: the trials
drawn with replacement (each resample refitted); within a trial its seeds drawn with
replacement where it has replicates (so replicates narrow the intervals as they should), and a
predicted loss moved by a normal draw of its own 1-sigma error. The resampled coefficients'
spread around the estimate is widened by sqrt(n / (n - p)) for a model of p coefficients on n
trials, the degrees of freedom the fit used up (HC1's correction of a sandwich variance; the
coverage on planted studies is in `benchmarks/bench_insights.py`'s results). A coefficient a
resample cannot identify (its level was not drawn) is left out of that resample; one
identified in fewer than half of them is "too few trials". An effect is resolved when its
interval excludes 0, else it is "not resolved at this budget". A level with fewer than
`design.MIN_TRIALS` trained trials is never an effect ("too few trained trials").
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from archsearch.analysis.design import MIN_TRIALS, Design, Factor, Observed

__all__ = [
    "LEVEL",
    "RESAMPLES",
    "Effect",
    "Interaction",
    "Interval",
    "interactions",
    "main_effects",
    "model_size",
]

RESAMPLES = 400  # bootstrap resamples of the trials
LEVEL = 0.95  # the intervals' coverage
IDENTIFIED = 0.5  # least share of resamples that must identify a coefficient
TOL = 1e-9  # relative singular-value tolerance of the least-squares fits


@dataclass(frozen=True)
class Interval:
    """An estimate with its bootstrap interval, in the objective's unit or in % (relative)."""

    estimate: float
    low: float
    high: float

    @property
    def resolved(self) -> bool:
        return self.low > 0 or self.high < 0

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


@dataclass(frozen=True)
class Effect:
    """One level's main effect on one objective, against the factor's reference level."""

    objective: str
    factor: str
    level: Any  # the level, or "per doubling" / "per unit" for a slope
    reference: Any
    n: int  # trained trials at the level (a slope: its active trials in the model)
    n_reference: int  # trained trials at the reference level
    unit: str  # "%" for a relative effect, else the objective's unit
    status: str  # "estimated", "too few trained trials", "too few trials", "confounded"
    # (level, reference) trials in the model: a trial at a level trained once is left out
    modelled: tuple[int, int] = (0, 0)
    interval: Interval | None = None
    given: str = ""  # what the effect is conditional on (a nested factor's reference)
    note: str = ""  # for a confounded effect: the columns it moves with

    @property
    def resolved(self) -> bool:
        return self.interval is not None and self.interval.resolved


@dataclass(frozen=True)
class Interaction:
    """A two-way interaction contrast on one objective (see the module docstring)."""

    objective: str
    factors: tuple[str, str]
    levels: tuple[Any, Any]  # (a, b)
    bases: tuple[Any, Any]  # (A's base, B's base)
    counts: tuple[int, int, int, int]  # trials at (a, b), (a, base B), (base A, b), bases
    unit: str
    interval: Interval  # the difference-in-differences
    at_base: Interval  # a vs A's base at B's base
    at_level: Interval  # a vs A's base at B = b

    @property
    def notable(self) -> bool:
        return self.interval.resolved


@dataclass
class _Fit:
    columns: list[tuple[str, Any]]  # (factor, level) per column after the intercept
    estimate: np.ndarray  # [p] on the full data (nan: not identified)
    draws: np.ndarray  # [resamples, p] (nan where a resample does not identify it)
    identified: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, int))  # the trials fitted


def _response(obs: Observed, seeds: list[np.ndarray]) -> np.ndarray:
    y = np.array([s.mean() if len(s) else np.nan for s in seeds])
    return np.log(y) if obs.ratio else y


def _solve(x: np.ndarray, y: np.ndarray, w: np.ndarray | None = None):
    """Weighted least squares by SVD: (coefficients, identified mask); a coefficient is
    identified when the null space of the weighted design has no component along it."""
    if w is not None:
        keep = w > 0
        s = np.sqrt(w[keep])
        x, y = x[keep] * s[:, None], y[keep] * s
    u, sv, vt = np.linalg.svd(x, full_matrices=True)
    tol = TOL * (sv[0] if len(sv) else 1.0)
    r = int((sv > tol).sum())
    beta = vt[:r].T @ ((u[:, :r].T @ y) / sv[:r])
    null = vt[r:]
    identified = np.sqrt((null**2).sum(axis=0)) < 1e-6 if len(null) else np.ones(x.shape[1], bool)
    return beta, identified


def _fit(
    columns: list[tuple[str, Any]],
    x: np.ndarray,
    obs: Observed,
    resamples: int,
    rng: np.random.Generator,
    among: np.ndarray | None = None,
) -> _Fit:
    """The least-squares fit of `obs` on `x` (an intercept first, then `columns`) on the
    trials with a value (and `among` them, a mask), and its bootstrap draws."""
    rows = np.flatnonzero(obs.has_value & (True if among is None else among))
    if len(rows) < 2:  # nothing to fit, nothing to resample
        none = np.full(x.shape[1], np.nan)
        return _Fit(columns, none, np.full((resamples, x.shape[1]), np.nan), none > 0, rows)
    x = x[rows]
    seeds = [obs.seeds[i] for i in rows]
    std = obs.std[rows]
    beta, ok = _solve(x, _response(obs, seeds))
    estimate = np.where(ok, beta, np.nan)
    n = len(rows)
    draws = np.full((resamples, x.shape[1]), np.nan)
    many = [i for i, s in enumerate(seeds) if len(s) > 1]
    noisy = np.flatnonzero(std > 0)
    for k in range(resamples):
        w = rng.multinomial(n, np.full(n, 1.0 / n)).astype(float)
        drawn = list(seeds)
        for i in many:
            if w[i]:
                drawn[i] = rng.choice(seeds[i], size=len(seeds[i]))
        y = _response(obs, drawn)
        if len(noisy):
            moved = np.array([s.mean() for s in drawn])[noisy] + rng.normal(0.0, std[noisy])
            y[noisy] = np.log(np.maximum(moved, 1e-300)) if obs.ratio else moved
        b, got = _solve(x, y, w)
        draws[k, got] = b[got]
    # resampled fits spread as the residuals do, which a fit of p coefficients to n trials
    # shrinks by sqrt((n - p) / n): undone as HC1 undoes it for a sandwich variance
    inflate = np.sqrt(n / max(n - np.linalg.matrix_rank(x), 1))
    draws = estimate + (draws - estimate) * inflate
    return _Fit(columns, estimate, draws, ok, rows)


def _interval(obs: Observed, point: float, draws: np.ndarray) -> Interval | None:
    """The estimate and its percentile interval (None: identified in too few resamples);
    relative effects in % (100 (e^b - 1))."""
    d = draws[np.isfinite(draws)]
    if not np.isfinite(point) or len(d) < IDENTIFIED * len(draws) or len(d) < 2:
        return None
    tail = (1 - LEVEL) / 2 * 100
    lo, hi = np.percentile(d, [tail, 100 - tail])
    if obs.ratio:
        return Interval(*(100.0 * np.expm1(v) for v in (point, lo, hi)))
    return Interval(float(point), float(lo), float(hi))


def _columns(d: Design, has: np.ndarray, extra: list[tuple[tuple, np.ndarray]] = ()):
    """(column keys, design matrix with an intercept first, the trials modelled) of every
    factor's main-effect columns, then `extra` (key, column). A level with fewer than
    `MIN_TRIALS` trials (among `has`) has no column and its trials are left out: its one
    trial would be fitted exactly by a column of its own and say nothing of the others, while
    the column would cost every resample a coefficient."""
    rare = np.zeros(len(d.trials), bool)
    for f in d.factors:
        for level in [] if f.slope else f.levels:
            if 0 < int((f.indicator(level) * has).sum()) < MIN_TRIALS:
                rare |= f.indicator(level) > 0
    keep = has & ~rare
    keys: list[tuple[str, Any]] = []
    cols = [np.ones(len(d.trials))]
    for f in d.factors:
        if f.slope:
            keys.append((f.name, None))
            cols.append(f.numeric())
            continue
        for level in f.levels[1:]:
            if (f.indicator(level) * keep).sum() >= MIN_TRIALS:
                keys.append((f.name, level))
                cols.append(f.indicator(level))
    for key, col in extra:
        keys.append(key)
        cols.append(col)
    return keys, np.column_stack(cols), keep


def _nested_reference(d: Design, f: Factor, level: Any) -> str:
    """For a level that activates other (conditional) factors: 'at <their references>'. A
    factor counts as activated by `f` when its activity follows `f`'s level in every trial
    (active at all trials of a level, or at none), as a `when:` on `f` makes it."""
    on = f.indicator(level) > 0
    if f.slope or not on.any():
        return ""

    def follows(g: Factor) -> bool:
        return all(len(set(g.active[f.indicator(lv) > 0].tolist())) <= 1 for lv in f.levels)

    under = [
        g
        for g in d.factors
        if g.name != f.name
        and not g.slope
        and not g.active.all()
        and g.active[on].all()
        and follows(g)
    ]
    return ", ".join(f"{g.name}={g.level_text(g.reference)}" for g in under)


def main_effects(
    d: Design, obs: Observed, resamples: int = RESAMPLES, seed: int = 0
) -> list[Effect]:
    """Every level's (or slope's) effect on `obs`, with its interval and status."""
    has = obs.has_value
    keys, x, keep = _columns(d, has)
    fit = _fit(keys, x, obs, resamples, np.random.default_rng(seed), among=keep)
    out = []
    for f in d.factors:
        n_ref = int((f.indicator(f.reference) * has).sum()) if not f.slope else 0
        modelled_ref = int((f.indicator(f.reference) * keep).sum()) if not f.slope else 0
        shown = [None] if f.slope else list(f.levels[1:])
        for level in shown:
            if f.slope:
                level_shown = "per doubling" if f.slope == "log2" else "per unit"
                n = modelled = int((f.active & keep).sum())
                enough = len(f.levels) >= 3 and n >= 3
            else:
                level_shown = level
                n = int((f.indicator(level) * has).sum())
                modelled = int((f.indicator(level) * keep).sum())
                enough = n >= MIN_TRIALS and modelled_ref >= MIN_TRIALS
            j = keys.index((f.name, level)) + 1 if (f.name, level) in keys else None
            interval = _interval(obs, fit.estimate[j], fit.draws[:, j]) if enough and j else None
            note = ""
            if not enough or j is None:
                status = "too few trained trials"
            elif not fit.identified[j]:
                status = "confounded"
                note = ", ".join(_partners(keys, x[fit.rows], j))
            elif interval is None:
                status = "too few trials"
            else:
                status = "estimated"
            out.append(
                Effect(
                    objective=obs.label,
                    factor=f.name,
                    level=level_shown,
                    reference=None if f.slope else f.reference,
                    n=n,
                    n_reference=n_ref,
                    modelled=(modelled, modelled_ref),
                    unit=obs.unit,
                    status=status,
                    interval=interval if status == "estimated" else None,
                    given="" if f.slope else _nested_reference(d, f, level),
                    note=note,
                )
            )
    return out


def model_size(d: Design, obs: Observed) -> tuple[int, int]:
    """(coefficients, trials) of the main-effects model of `obs`."""
    keys, _, keep = _columns(d, obs.has_value)
    return len(keys) + 1, int(keep.sum())


def _partners(keys: list[tuple[str, Any]], x: np.ndarray, j: int) -> list[str]:
    """The other columns a non-identified column moves with in `x` (its null space)."""
    _, sv, vt = np.linalg.svd(x, full_matrices=True)
    r = int((sv > TOL * sv[0]).sum())
    partners: set[int] = set()
    for v in vt[r:]:
        if abs(v[j]) > 1e-6:
            partners |= {int(k) for k in np.flatnonzero(np.abs(v) > 1e-6) if k not in (0, j)}
    return [f"{keys[k - 1][0]}={_text(keys[k - 1][1])}" for k in sorted(partners)]


def interactions(
    d: Design, obs: Observed, resamples: int = RESAMPLES, seed: int = 0
) -> list[Interaction]:
    """The two-way interaction contrasts of every pair of categorical factors that the trials
    support (each of the four cells of a contrast trained at least once, its own cell
    `MIN_TRIALS` times), each with its interval and the two simple effects it compares."""
    rng = np.random.default_rng(seed + 1)
    has = obs.has_value
    out = []
    factors = [f for f in d.factors if not f.slope and f.resolvable]
    for fa, fb in itertools.combinations(factors, 2):
        pairs = _cells(fa, fb, has)
        if not pairs:
            continue
        extra = [(("x", i), fa.indicator(c[0]) * fb.indicator(c[1])) for i, c in enumerate(pairs)]
        keys, x, keep = _columns(d, has, extra)
        fit = _fit(keys, x, obs, resamples, rng, among=keep & fa.active & fb.active)
        for i, (a, b, base_a, base_b, counts) in enumerate(pairs):
            j = keys.index(("x", i)) + 1
            # a level without a column of its own (the factor's reference, or one the model
            # could not identify) has a coefficient of zero
            plus = [keys.index((fa.name, a)) + 1] if (fa.name, a) in keys else []
            minus = [keys.index((fa.name, base_a)) + 1] if (fa.name, base_a) in keys else []
            diff = _interval(obs, fit.estimate[j], fit.draws[:, j])
            at_base = _combined(obs, fit, plus, minus)
            at_level = _combined(obs, fit, [*plus, j], minus)
            if diff is None or at_base is None or at_level is None:
                continue
            out.append(
                Interaction(
                    obs.label,
                    (fa.name, fb.name),
                    (a, b),
                    (base_a, base_b),
                    counts,
                    obs.unit,
                    diff,
                    at_base,
                    at_level,
                )
            )
    return out


def _combined(obs: Observed, fit: _Fit, plus: list[int], minus: list[int]) -> Interval | None:
    """The interval of a sum of coefficients (`plus`) less others (`minus`)."""
    point = fit.estimate[plus].sum() - fit.estimate[minus].sum()
    draws = fit.draws[:, plus].sum(axis=1) - fit.draws[:, minus].sum(axis=1)
    return _interval(obs, point, draws)


def _cells(fa: Factor, fb: Factor, has: np.ndarray) -> list[tuple]:
    """The (a, b, base_a, base_b, counts) contrasts two factors support."""
    both = fa.active & fb.active & has
    if both.sum() < 4:
        return []

    def count(a, b) -> int:
        return int((fa.indicator(a) * fb.indicator(b) * has).sum())

    levels_a = [a for a in fa.levels if sum(count(a, b) for b in fb.levels) >= MIN_TRIALS]
    levels_b = [b for b in fb.levels if sum(count(a, b) for a in fa.levels) >= MIN_TRIALS]
    if len(levels_a) < 2 or len(levels_b) < 2:
        return []
    base_a, base_b = levels_a[0], levels_b[0]
    out = []
    for a in levels_a[1:]:
        for b in levels_b[1:]:
            counts = (count(a, b), count(a, base_b), count(base_a, b), count(base_a, base_b))
            if min(counts) >= 1 and counts[0] >= MIN_TRIALS:
                out.append((a, b, base_a, base_b, counts))
    return out


def _eq(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


def _text(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return f"{v:g}"
    return str(v)
