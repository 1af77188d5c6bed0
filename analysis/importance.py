"""How much each searched parameter matters to one objective: Optuna's fANOVA importance
(`optuna.importance.FanovaImportanceEvaluator`), with an interval over bootstrap resamples.

**Why fANOVA.** It answers the question asked of a study, the share of an objective's variance
over the space that each parameter's main effect explains, in the same currency for a loss, an
accuracy and a latency; it is the evaluator optuna-dashboard shows, so a plain study reads the
same in both. PED-ANOVA (`PedAnovaImportanceEvaluator`) answers another question, what separates
the best `1 - quantile` of the trials from the rest: a sandbox study of 20 trained trials has
two in its top tenth. Mean decrease in impurity favours parameters of many levels.

**Several objectives.** An importance is computed per objective: Optuna's `target=` picks one
value of a multi-objective trial. Here each objective's values are read as the effects are
(`design.observe`: the mean over a trial's seeds, a predicted loss with its error, a size or a
time on the log scale), and handed to the evaluator as a single-objective in-memory study.

**Conditional parameters.** Optuna's evaluators keep the parameters every trial has (its
intersection search space), or, given `params=`, only the trials that have them all: a
parameter active for linear mixers only would be dropped, or would drop every other trial.
Here an inactive parameter takes a level of its own (`design.INACTIVE`, "-"), so every trained
trial counts for every parameter. Its "-" level says the same as the parent's levels that
deactivate it (`linear.family` is "-" exactly where `layers.mixer` is not `linear`): the forest
may credit that part of the variance to either, so the two shares are read together; the
intervals show how stable the split is.

**Enough trials.** The trials separate the factors' main effects only when they outnumber the
terms of a main-effects model: an intercept and, per factor, one term per active level beyond
the first (one for a number of many values). A conditional parameter's inactive level adds no
term: it is its parents' levels that deactivate it. With fewer trials any split of the variance
fits them, and the forest reports whichever its trees happened to draw. Below that the
importances are not computed (`Support.separable`), and the statements say how many trials it
takes at least (the levels trained so far; a level trained later adds its term).

**Intervals**: the 2.5 and 97.5 percentiles of the normalised importance over `RESAMPLES`
resamples of the trials (with replacement; a trial's seeds resampled too), each evaluated by a
forest of `TREES` trees with its own seed: the interval covers both the data and the forest. A
study of more than `MAX_TRIALS` trained trials is sampled down to that many first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from archsearch.analysis.design import INACTIVE, Design, Observed

__all__ = ["RESAMPLES", "TREES", "Importance", "Support", "importances", "level_key", "support"]

RESAMPLES = 30  # bootstrap resamples (each a fANOVA fit of TREES trees)
TREES = 16  # trees per fit (Optuna's default is 64: the resamples average the forest out)
MAX_TRIALS = 2000  # a larger study's importances are those of a seeded sample of its trials


@dataclass(frozen=True)
class Importance:
    """One parameter's fANOVA importance for one objective (a share of 1 over parameters)."""

    objective: str
    factor: str
    share: float  # on all the trials
    low: float
    high: float
    levels: int  # distinct trained levels (with "-" where inactive)


@dataclass(frozen=True)
class Support:
    """What an objective's importances stand on: its trials with a value, and the terms of a
    main-effects model of the factors' levels among them (the intercept not counted)."""

    trials: int
    terms: int

    @property
    def needed(self) -> int:
        """The fewest trials that separate the terms: more than the terms and the intercept."""
        return self.terms + 2

    @property
    def separable(self) -> bool:
        return self.terms > 0 and self.trials >= self.needed


def support(d: Design, obs: Observed) -> Support:
    """The trials of `obs` and the main-effect terms of the factors' active levels among them."""
    rows = np.flatnonzero(obs.has_value)
    terms = 0
    for f in d.factors:
        active = {level_key(f.values[i]) for i in rows if f.values[i] is not None}
        beyond_first = max(len(active) - 1, 0)
        terms += min(beyond_first, 1) if f.slope else beyond_first  # a slope: one term
    return Support(len(rows), terms)


def importances(
    d: Design, obs: Observed, resamples: int = RESAMPLES, seed: int = 0
) -> list[Importance]:
    """Each factor's importance for `obs`, largest first; [] where the trials cannot separate
    the factors (`support`)."""
    if not support(d, obs).separable:
        return []
    rows = np.flatnonzero(obs.has_value)
    if len(rows) > MAX_TRIALS:  # a forest per resample: a seeded sample of a large study
        rows = np.sort(np.random.default_rng(seed).choice(rows, MAX_TRIALS, replace=False))
    factors = [f for f in d.factors if len({level_key(f.values[i]) for i in rows}) > 1]
    if not factors:
        return []
    dists, params = _trials_of(factors, rows)
    seeds = [obs.seeds[i] for i in rows]
    std = obs.std[rows]
    rng = np.random.default_rng(seed)

    def evaluate(pick: np.ndarray, values: np.ndarray, forest_seed: int) -> dict[str, float]:
        return _fanova([params[i] for i in pick], dists, values, forest_seed)

    def response(values: np.ndarray) -> np.ndarray:
        return np.log(values) if obs.ratio else values

    n = len(rows)
    point = evaluate(np.arange(n), response(np.array([s.mean() for s in seeds])), seed)
    draws = {f.name: [] for f in factors}
    for k in range(resamples):
        pick = rng.integers(0, n, n)
        values = np.array(
            [
                rng.choice(seeds[i], len(seeds[i])).mean() if len(seeds[i]) > 1 else seeds[i][0]
                for i in pick
            ]
        )
        if (std[pick] > 0).any():
            values = values + rng.normal(0.0, std[pick])
        got = evaluate(
            pick, response(np.maximum(values, 1e-300) if obs.ratio else values), seed + k + 1
        )
        if got:
            for f in factors:
                draws[f.name].append(got.get(f.name, 0.0))
    out = []
    for f in factors:
        d_ = np.array(draws[f.name]) if draws[f.name] else np.array([np.nan])
        lo, hi = np.nanpercentile(d_, [2.5, 97.5]) if np.isfinite(d_).any() else (np.nan, np.nan)
        levels = len({level_key(f.values[i]) for i in rows})
        out.append(
            Importance(obs.label, f.name, point.get(f.name, 0.0), float(lo), float(hi), levels)
        )
    return sorted(out, key=lambda i: -i.share)


def _trials_of(factors: list, rows: np.ndarray) -> tuple[dict, list[dict]]:
    """Optuna's view of the trials `rows`: each factor's distribution (a number of many values
    as a float range, inactive at its lowest; anything else as categories of `level_key`) and
    each trial's parameters."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    dists, params = {}, [dict() for _ in rows]
    for f in factors:
        shown = [level_key(f.values[i]) for i in rows]
        if f.slope:  # a number of many values: inactive at its lowest
            x = [float(f.values[i]) if f.values[i] is not None else None for i in rows]
            low = min(v for v in x if v is not None)
            high = max(v for v in x if v is not None)
            dists[f.name] = FloatDistribution(low, high, log=f.slope == "log2")
            for p, v in zip(params, x):
                p[f.name] = low if v is None else v
            continue
        dists[f.name] = CategoricalDistribution(sorted(set(shown)))
        for p, v in zip(params, shown):
            p[f.name] = v
    return dists, params


def _fanova(params: list[dict], dists: dict, values: np.ndarray, seed: int) -> dict[str, float]:
    """Optuna's fANOVA importances of trials of these `params` and `values` ({} where they
    cannot be told apart: every value equal, or one level drawn)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    study.add_trials(
        optuna.trial.create_trial(params=p, distributions=dists, value=float(v))
        for p, v in zip(params, values)
    )
    evaluator = optuna.importance.FanovaImportanceEvaluator(n_trees=TREES, seed=seed)
    try:
        got = optuna.importance.get_param_importances(study, evaluator=evaluator)
    except (RuntimeError, ValueError):  # every drawn value equal, or one level drawn
        return {}
    return {name: float(v) for name, v in got.items()}


def level_key(v) -> str:
    """A level as the evaluator sees it (strings; the inactive level "-")."""
    if v is None:
        return INACTIVE
    if isinstance(v, float) and v.is_integer():
        return f"{v:g}"
    return str(v)
