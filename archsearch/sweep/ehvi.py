"""A sampler that knows the cost model's objectives (`sampler=ehvi`): expected hypervolume
improvement over the space's feasible candidates.

Every objective of an archsearch study but the loss is known before a candidate trains: its
latency, parameters and memory come from the cost model. TPE, NSGA-II and random sampling
learn them from finished trials like anything else, and TPE's first trials are random draws;
on `benchmarks/spaces/search_small.yaml` a quarter of the exhaustive compute is ten trials,
about what those samplers spend before they model anything. This sampler spends them on the
one unknown:

1. **The pool**: the space's assignments (all of them, up to `POOL`; a larger or continuous
   space: a seeded sample of `POOL` draws, `space.draws`), built and priced once, together
   (`pricing.assess_all`); the feasible ones, one per architecture hash, are the candidates,
   each with its known objective values.
2. **The surrogate** of the trained objective (the loss): a Bayesian linear model
   (scikit-learn's `BayesianRidge`, which fits its own prior and noise precisions, so its
   predictive std widens where the data say little) on the trials trained so far. Features,
   standardised over the pool: one indicator per value of each categorical parameter (0 when
   inactive), the log of a numeric one (depth, width, channels; its value when not positive,
   0 when inactive), and the log of the parameter count and of each known objective. Linear,
   because two to ten observations can fit no more; the size terms carry what one trial says
   about its neighbours (a wider model of the same kind learns faster per token, or not).
3. **The pick**: the untried candidate of largest expected hypervolume improvement. With one
   uncertain objective y and known ones k (all minimised), adding a point (k_c, Y) improves the
   hypervolume by the integral over the box [k_c, ref_k] of max(0, g(x) - Y), where g(x) is the best
   y among the front's points with k <= x (capped at the reference). g is constant on the grid cells
   cut by the front's k values, so with Y ~ N(mu, sd^2) the expectation is exact: sum over cells of
   (cell volume inside the box) x EI(g_cell), EI(g) = (g - mu) Phi(z) + sd phi(z), z = (g - mu) / sd
   (the single-objective expected improvement of [EI]; its use per cell of a two-objective front
   follows [EHVI]). Trials still in flight count at their predicted mean ([KrigingBeliever]), so
   concurrent trials spread over the front instead of piling onto one region.
4. **The start**: until every value of every categorical parameter (among the feasible
   candidates) has been tried and `N_STARTUP` trials are trained, each pick is a candidate
   showing the most values not tried yet (a seeded random one of those). A value no trial has
   shown has no data behind its coefficient, and the model, fitted to the families it has
   seen, ranks an unseen one as average: on a test space where one unseen family was best,
   random starts left it unexplored for a quarter of the budget in 1 of 4 seeds. When no
   candidate can improve the front (every expected improvement is 0), a random untried
   candidate; when none is left, Optuna's random sampler (the sweep then sees duplicates and
   ends).

Its search efficiency against TPE and random search is measured by
`benchmarks/bench_search_efficiency.py` (the documentation's benchmarks page). The sampler needs
exactly one objective that training measures; the sweep refuses it otherwise (exit 2) before
anything runs.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna

from archsearch.errors import UserError
from archsearch.space import SearchSpace, draws
from archsearch.sweep.pricing import Assessed, assess, assess_all

__all__ = ["N_STARTUP", "POOL", "EHVISampler", "expected_improvement", "trained_objective"]

POOL = 2048  # assignments priced into the pool (all of a space this small; ~10 ms each)
N_STARTUP = 2  # trained trials before the surrogate picks
CELLS_AT_ONCE = 1 << 21  # candidates x grid cells scored at once (memory: 8 bytes each, x4)


def trained_objective(space: SearchSpace) -> int:
    """The index of the space's one objective that training measures (UserError otherwise)."""
    trained = [i for i, o in enumerate(space.objectives) if o.spec.phase != "cost"]
    if len(trained) != 1:
        names = [space.objectives[i].spec.label for i in trained]
        raise UserError(
            "ehvi models exactly one objective that training measures; this space has "
            f"{len(trained)} ({', '.join(names) or 'none'}): use sampler=tpe",
            key="sampler",
        )
    return trained[0]


def expected_improvement(
    known: np.ndarray,
    mu: np.ndarray,
    sd: np.ndarray,
    front_known: np.ndarray,
    front_y: np.ndarray,
    ref_known: np.ndarray,
    ref_y: float,
) -> np.ndarray:
    """The expected hypervolume improvement of each candidate (all objectives minimised).

    `known` [n, m]: the candidates' known objectives; `mu`, `sd` [n]: the predicted
    uncertain objective; `front_known` [f, m], `front_y` [f]: the points so far (dominated
    ones change nothing); `ref_known` [m], `ref_y`: the reference point."""
    import moocore
    from scipy.stats import norm

    known = np.atleast_2d(np.asarray(known, float))
    n, m = known.shape
    pts = np.column_stack([front_y, front_known]).reshape(-1, m + 1)
    pts = pts[np.all(pts < np.append(ref_y, ref_known), axis=1)]
    # a dominated point never sets g: only the non-dominated ones cut cells (moocore, as the
    # analysis layer's filter: identical points all kept)
    pts = pts[moocore.is_nondominated(pts, keep_weakly=True)]
    fy, fk = pts[:, 0], pts[:, 1:]
    # per axis, the cells' edges: -inf, the front's values below the reference, the reference
    edges = [np.concatenate([[-np.inf], np.unique(fk[:, a]), [ref_known[a]]]) for a in range(m)]
    lows = np.meshgrid(*[e[:-1] for e in edges], indexing="ij")
    corner = np.stack([lo.ravel() for lo in lows], axis=1) if m else np.zeros((1, 0))  # [cells, m]
    below = np.all(fk[None, :, :] <= corner[:, None, :], axis=2)  # [cells, f]
    g = np.min(np.where(below, fy[None, :], ref_y), axis=1, initial=ref_y)  # [cells]
    out = np.zeros(n)
    chunk = max(1, CELLS_AT_ONCE // len(corner))
    for start in range(0, n, chunk):
        k = known[start : start + chunk]
        vol = np.ones((len(k), len(corner)))
        for a in range(m):  # each cell's extent inside the candidate's box, per axis
            lo = np.maximum(edges[a][:-1][None, :], k[:, a : a + 1])
            width = np.clip(edges[a][1:][None, :] - lo, 0.0, None)  # [c, J_a]
            shape = [1] * m
            shape[a] = len(edges[a]) - 1
            vol *= np.broadcast_to(
                width.reshape(len(k), *shape), (len(k), *[len(e) - 1 for e in edges])
            ).reshape(len(k), -1)
        s = np.maximum(sd[start : start + chunk], 1e-12)[:, None]
        gain = g[None, :] - mu[start : start + chunk, None]
        z = gain / s
        out[start : start + chunk] = np.sum(vol * (gain * norm.cdf(z) + s * norm.pdf(z)), axis=1)
    return out


@dataclass
class _Candidate:
    assignment: dict[str, Any]
    arch_hash: str
    known: np.ndarray  # known objectives, minimised
    features: np.ndarray
    values: frozenset[tuple[str, str]]  # (parameter, value) of its categorical parameters


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _key(params: dict[str, Any]) -> str:
    """An assignment's identity (1 and 1.0 are the same value)."""
    norm = {k: float(v) if _number(v) else v for k, v in params.items()}
    return json.dumps(norm, sort_keys=True, default=str)


class EHVISampler(optuna.samplers.BaseSampler):
    """An Optuna sampler: picks a whole candidate when a trial starts (`before_trial`), then
    answers each of its parameter suggestions from it."""

    def __init__(self, space: SearchSpace, device: str, seed: int = 0) -> None:
        self.space, self.device = space, device
        self.target = trained_objective(space)
        self.sign = np.array([1.0 if o.direction == "minimize" else -1.0 for o in space.objectives])
        self.known_index = [i for i in range(len(space.objectives)) if i != self.target]
        self._rng = random.Random(seed)
        self._fallback = optuna.samplers.RandomSampler(seed=seed)
        self._chosen: dict[int, dict[str, Any]] = {}
        self._pool: dict[str, _Candidate] | None = None  # by arch hash
        self._by_key: dict[str, str | None] = {}  # assignment key -> arch hash (None: not one)
        self._columns: list[tuple[str, Any]] = []
        self._scale: tuple[Any, Any] = (0.0, 1.0)  # the features' mean and std over the pool

    # -- the pool -------------------------------------------------------------------------------

    def _build_pool(self) -> dict[str, _Candidate]:
        for p in self.space.params:  # a categorical parameter: one column per value
            values = p.domain.values() if p.domain.finite else []
            if values and not all(_number(v) for v in values):
                self._columns += [(p.name, v) for v in values]
            else:  # a number, finite or not: one column, its log when positive
                self._columns.append((p.name, None))
        pool: dict[str, _Candidate] = {}
        drawn = list(draws(self.space, POOL))
        for a, got in zip(drawn, assess_all(self.space, [], self.device, drawn)):
            c = self._candidate(a, got)
            if c is not None:
                pool.setdefault(c.arch_hash, c)
        if pool:  # standardise the features over the pool
            x = np.stack([c.features for c in pool.values()])
            mean, std = x.mean(axis=0), x.std(axis=0)
            self._scale = (mean, np.where(std > 0, std, 1.0))
        return pool

    def _candidate(self, assignment: dict[str, Any], got: Assessed) -> _Candidate | None:
        """A feasible assignment, `got` its `assess`, as a pool candidate (None: invalid or
        infeasible)."""
        key = _key(assignment)
        if got.status is not None or got.priced is None:
            self._by_key[key] = None
            return None
        priced = got.priced
        values = [priced.value(o.spec, self.device) for o in self.space.objectives]
        known = np.array([self.sign[i] * float(values[i]) for i in self.known_index])
        feats, shown = [], set()
        for name, value in self._columns:
            v = assignment.get(name)
            if value is not None:
                feats.append(1.0 if name in assignment and v == value else 0.0)
                if feats[-1]:
                    shown.add((name, _key({"v": value})))
            elif _number(v):
                feats.append(math.log(v) if v > 0 else float(v))
            else:
                feats.append(0.0)  # inactive
        sizes = [priced.costs["params"], *(abs(float(values[i])) for i in self.known_index)]
        feats += [math.log(s) if s > 0 else 0.0 for s in sizes]
        self._by_key[key] = priced.arch.arch_hash
        return _Candidate(
            dict(assignment), priced.arch.arch_hash, known, np.array(feats), frozenset(shown)
        )

    def _hash_of(self, params: dict[str, Any]) -> str | None:
        key = _key(params)
        if key not in self._by_key:  # a trial from outside the pool (an earlier run's sampler)
            c = self._candidate(params, assess(self.space, [], self.device, params))
            if c is not None and self._pool is not None:
                self._pool.setdefault(c.arch_hash, c)
        return self._by_key.get(key)

    # -- picking --------------------------------------------------------------------------------

    def _history(self, study) -> tuple[dict[str, list[float]], set[str], set[str]]:
        """From the study's trials: each pool candidate's trained values of the target (signed
        to be minimised), the candidates tried (any state) and those in flight."""
        from optuna.trial import TrialState

        if self._pool is None:
            self._pool = self._build_pool()
        trained: dict[str, list[float]] = {}
        tried: set[str] = set()
        pending: set[str] = set()
        for t in study.get_trials(deepcopy=False):
            if not t.params:
                continue
            h = self._hash_of(t.params)
            if h is None:
                continue
            tried.add(h)
            if t.state == TrialState.COMPLETE and t.values is not None and h in self._pool:
                trained.setdefault(h, []).append(self.sign[self.target] * t.values[self.target])
            elif t.state in (TrialState.RUNNING, TrialState.WAITING):
                pending.add(h)
        return trained, tried, pending

    def exhausted(self, study) -> bool:
        """Whether nothing is left to ask of `study`: every feasible candidate of the pool was
        tried and no trial waits to run (an interrupted one enqueued again). The searcher then
        stops asking, instead of recording the duplicates a fallback would draw."""
        from optuna.trial import TrialState

        if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return False
        _, tried, _ = self._history(study)
        assert self._pool is not None
        return all(h in tried for h in self._pool)

    def pick(self, study) -> dict[str, Any] | None:
        """The next candidate's assignment, from the study's trials so far (None: none left)."""
        trained, tried, pending = self._history(study)
        assert self._pool is not None
        left = [h for h in self._pool if h not in tried]
        if not left:
            return None
        seen = set().union(*(self._pool[h].values for h in tried if h in self._pool))
        unseen = set().union(*(c.values for c in self._pool.values())) - seen
        if unseen or len(trained) < N_STARTUP:
            return self._pool[self._start(left, unseen)].assignment
        return self._pool[self._best(trained, pending - trained.keys(), left, study)].assignment

    def _start(self, left: list[str], unseen: set[tuple[str, str]]) -> str:
        """A start pick: one showing the most parameter values no trial has had yet (a random one
        of them, seeded), so that no value's coefficient is fitted without data."""
        most = max(len(self._pool[h].values & unseen) for h in left)
        return self._rng.choice([h for h in left if len(self._pool[h].values & unseen) == most])

    def _best(self, trained: dict[str, list[float]], pending: set[str], left: list[str], study):
        from sklearn.linear_model import BayesianRidge

        from archsearch.study import StudyMeta

        mean, scale = self._scale

        def x(hashes: list[str]) -> np.ndarray:
            return (np.stack([self._pool[h].features for h in hashes]) - mean) / scale

        seen = list(trained)
        y = np.array([float(np.mean(trained[h])) for h in seen])
        model = BayesianRidge().fit(x(seen), y)
        mu, sd = model.predict(x(left), return_std=True)
        believed = sorted(pending)
        front_y = np.concatenate([y, model.predict(x(believed)) if believed else []])
        front_known = np.stack([self._pool[h].known for h in seen + believed])
        meta = StudyMeta.from_study(study)
        ref = meta.reference if meta is not None else None
        if ref:
            ref_signed = self.sign * np.asarray(ref, float)
        else:  # no stored reference: just beyond the worst of the pool and of the losses seen
            worst = np.max(np.stack([c.known for c in self._pool.values()]), axis=0)
            ref_signed = np.insert(worst + 0.1 * np.abs(worst), self.target, y.max() + 1.0)
        ref_known = np.delete(ref_signed, self.target)
        gain = expected_improvement(
            np.stack([self._pool[h].known for h in left]),
            mu,
            sd,
            front_known,
            front_y,
            ref_known,
            float(ref_signed[self.target]),
        )
        if not np.any(gain > 0):
            return self._rng.choice(left)
        return left[int(np.argmax(gain))]

    # -- Optuna's sampler interface -------------------------------------------------------------

    def infer_relative_search_space(self, study, trial) -> dict:
        return {}

    def sample_relative(self, study, trial, search_space) -> dict:
        return {}

    def before_trial(self, study, trial) -> None:
        chosen = self.pick(study)
        if chosen is not None:
            self._chosen[trial.number] = chosen

    def sample_independent(self, study, trial, param_name: str, param_distribution) -> Any:
        chosen = self._chosen.get(trial.number, {})
        if param_name in chosen:
            return chosen[param_name]
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study, trial, state, values) -> None:
        self._chosen.pop(trial.number, None)

    def reseed_rng(self) -> None:
        self._fallback.reseed_rng()
