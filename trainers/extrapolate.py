"""Learning-curve extrapolation: the validation loss a recipe would reach at another budget.

The law is the learning-rate-annealing scaling law of [LR-Annealing] (eq. 1):

    L(s) = L0 + A * S1(s)^(-alpha) - C * S2(s)

where, after s optimizer steps with learning rates eta_1..eta_s (in units of the peak rate),
S1(s) = sum_k eta_k is the forward area and S2(s) = sum_k m_k the annealing area, with
m_k = lambda * m_(k-1) + (eta_(k-1) - eta_k) (momentum lambda = 0.999, the paper's value). It
is a law in training steps (tokens, at a fixed batch) that takes the schedule into account: the
eval points of a cosine run part-way through its schedule (high learning rate, no cooldown yet)
and the last point of a longer run (after its cooldown) lie on one curve. A plain power law in
tokens fitted to the eval points of one cosine run would read the cooldown's drop as data
scaling; this is why this law was chosen.

Which parameters are whose (a choice, checked by `benchmarks/bench_loss_axis.py`): a short
sandbox run alone does not identify all four, and its extrapolation to 10x the budget misses
widely. So the shape `(L0, alpha, C)` is shared by the trials of a
study (one recipe, one corpus) and fitted jointly on all their curves, including the curves of
confirmation runs at larger budgets (`archsearch confirm`), which are what pins the shape down
beyond the sandbox; each architecture has its own amplitude `A`. A trial's prediction then
needs only its own eval points and its parameter count. Without a fitted shape the `PRIOR` is
used: the shape fitted on the `search_small` ground truth (byte-level stdlib corpus, cosine
schedule); for the end of a run still training (`predict_final`, Pareto-aware early stopping)
the same ground truth fitted without the size term, `PRIOR_WITHIN_RUN` (why: its comment).

The floor depends on model size (a choice, measured there too): a shared L0 says every
architecture would reach the same loss with unlimited data, yet the capacity term of
data-and-size laws ([Chinchilla] eq. 2: L(N, D) = E + A/N^a + B/D^b) puts smaller models'
floors higher. The floor is therefore L0 + k ln(N / 1M), N the trial's parameters, k shared: the
capacity term linearised in ln N over the study's range of sizes (a power N^-g fitted the
`search_small` ground truth no better for any g in 0.1-1). The sandbox alone hardly sees this
term (in a short run the data term dominates); confirmation runs pin it down, and with them the
term lowers the error of the unconfirmed architectures' extrapolated loss
(`benchmarks/bench_loss_axis.py`). Runs without a parameter count are fitted without the term
(k = 0).

Every prediction carries a 1-sigma error: the shape's measured relative error times the value,
combined with the trial's own fit residual. Across budgets the error is measured leave-one-out
(a confirmation run's final loss predicted from the other runs); within a run it depends on how
much of the run has been seen, so it is measured per share seen (each trained run's final loss
predicted from its eval points up to each earlier one, the RMS per quarter of the run) and
interpolated: a run's end predicted from its first quarter misses by more than from its third,
and one error for all shares would put too many runs' ends beyond 2 sigma of an early
prediction.
Eval points before 20% of a run are left out (the warm-up transient is not on the law).

Where a study holds confirmations at the target budget, `archsearch.trainers.transfer` corrects
this law's predictions across architectures (on `search_small`: 6.2% -> 2.6% for the 28
architectures a `confirm n=4` leaves unconfirmed).
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from archsearch.trainers.config import TrainConfig, parse_budget

__all__ = [
    "MIN_FRACTION",
    "PRIOR",
    "PRIOR_WITHIN_RUN",
    "CurveShape",
    "Prediction",
    "Run",
    "fit_shape",
    "planned_steps",
    "predict_final",
    "predict_loss",
]

MOMENTUM = 0.999  # lambda of the annealing area ([LR-Annealing])
MIN_FRACTION = 0.2  # eval points before this share of a run are not fitted
ALPHAS = np.linspace(0.02, 1.5, 75)  # the exponent's grid (the rest is linear given alpha)
MAX_RUNS = 400  # runs a shape is fitted on (a seeded sample of larger studies)
SIZE_REF = 1e6  # parameters of the model whose floor is `CurveShape.floor`
SHARE_BINS = (0.2, 0.375, 0.625, 0.875, 1.0)  # shares of a run seen, the within-run error's bins
MIN_PER_BIN = 3  # predictions a bin needs to have its error measured


@dataclass(frozen=True)
class Prediction:
    value: float  # predicted validation loss, nats/token
    std: float  # its 1-sigma error, nats/token
    law: str  # the fitted law, named


@dataclass(frozen=True)
class CurveShape:
    """The part of the law a study's trials share, and how well it predicts."""

    floor: float  # L0 of a model of SIZE_REF parameters, nats/token
    alpha: float
    anneal: float  # C
    across_budgets: float  # relative 1-sigma error predicting a larger budget
    # relative 1-sigma error predicting the end of a run from its eval points so far: (share of
    # the run seen, error) by rising share
    within_run: tuple[tuple[float, float], ...]
    source: str  # what it was fitted on
    size_slope: float = 0.0  # k: the floor's change per e-fold of parameters, nats/token

    def within(self, seen: float) -> float:
        """The relative 1-sigma error of a run's end predicted from its eval points up to
        `seen` (the last one's step over the run's planned steps): interpolated linearly in
        the measured table, flat beyond its ends."""
        shares, errors = zip(*self.within_run)
        return float(np.interp(seen, shares, errors))


# fitted on benchmarks/results/loss_axis_truth.jsonl + search_truth.json (search_small: 40
# architectures at 160K tokens, and at 1.6M) with each run's parameter count; its errors are
# measured as `fit_shape` measures them (`benchmarks/bench_loss_axis.py` prints them)
PRIOR = CurveShape(
    floor=0.43,
    alpha=0.28,
    anneal=0.00076,
    across_budgets=0.063,
    within_run=((0.254, 0.042), (0.5, 0.034), (0.753, 0.029)),
    source="prior: search_small ground truth (byte-level stdlib corpus, cosine schedule)",
    size_slope=-0.172,
)
# the same ground truth fitted without the size term: the default of `predict_final` (the end of
# the run being trained, as Pareto-aware early stopping asks). Kept because the rule's margins
# were set with it: with PRIOR the rule predicts a run's end from an early eval point with less
# bias, so it stops fewer trials and the search reaches the front later
# (`benchmarks/bench_search_efficiency.py` compares the two)
PRIOR_WITHIN_RUN = CurveShape(
    floor=0.054,
    alpha=0.20,
    anneal=0.00065,
    across_budgets=0.085,
    within_run=((0.254, 0.049), (0.5, 0.039), (0.753, 0.031)),
    source="prior: search_small ground truth, no size term",
)


@dataclass(frozen=True)
class Run:
    """One training run's validation points, for fitting: `key` names the architecture (its
    runs at several budgets share an amplitude)."""

    key: str
    steps: np.ndarray  # optimizer steps of the eval points
    losses: np.ndarray  # validation loss there, nats/token
    total: int  # planned steps of the run
    train: TrainConfig
    size: float = math.nan  # ln(parameters / SIZE_REF); NaN: unknown

    @classmethod
    def of(
        cls,
        key: str,
        evals: Sequence[Mapping[str, Any]],
        train: Any,
        params: float | None = None,
    ) -> Run:
        """A run from eval points (dicts with `step` and `val_loss`, as a trial reports and
        stores them), its training settings (a TrainConfig or its dict) and the model's
        parameter count (None: unknown)."""
        cfg = train if isinstance(train, TrainConfig) else _config(train)
        total = planned_steps(cfg, evals)
        pts = [
            (int(e["step"]), float(e["val_loss"]))
            for e in evals
            if e.get("val_loss") is not None
            and math.isfinite(float(e["val_loss"]))
            and 0 < int(e["step"]) <= total
        ]
        kept = [p for p in pts if p[0] >= MIN_FRACTION * total] or pts[-1:]
        if not kept:
            raise ValueError("no finite validation point to fit")
        steps, losses = zip(*sorted(kept))
        return cls(key, np.array(steps), np.array(losses), total, cfg, _size(params))


def _size(params: Any) -> float:
    """ln(params / SIZE_REF); NaN for None. ValueError for anything but a positive finite
    number (a count read from a stored study may be anything)."""
    if params is None:
        return math.nan
    ok = isinstance(params, numbers.Real) and not isinstance(params, bool)
    if not (ok and math.isfinite(params) and params > 0):
        raise ValueError(f"a parameter count must be a positive number, got {params!r}")
    return math.log(float(params) / SIZE_REF)


@functools.lru_cache(maxsize=64)
def _config_of(text: str) -> TrainConfig:
    return TrainConfig.from_dict(json.loads(text))


def _config(train: Mapping[str, Any]) -> TrainConfig:
    """A TrainConfig of a dict (a study's trials share one: built once)."""
    return _config_of(json.dumps(dict(train), sort_keys=True, default=str))


def planned_steps(train: TrainConfig, evals: Sequence[Mapping[str, Any]] = ()) -> int:
    """Optimizer steps a run of `train` takes (its budget over tokens per step; a FLOPs budget
    through the FLOPs per token its eval points show). ValueError for a time budget, whose
    steps are known only once it ran."""
    budget = parse_budget(train.budget)
    per_step = train.batch_size * train.seq_len
    if budget.kind == "steps":
        return int(budget.amount)
    if budget.kind == "tokens":
        return int(budget.amount // per_step)
    if budget.kind == "flops":
        fpt = [e["flops"] / e["tokens"] for e in evals if e.get("flops") and e.get("tokens")]
        if not fpt:
            raise ValueError("a FLOPs budget needs eval points with flops and tokens")
        return int(budget.amount / fpt[0] // per_step)
    raise ValueError(f"a {budget.kind} budget has no step count before it runs")


def _areas(train: TrainConfig, total: int) -> tuple[np.ndarray, np.ndarray]:
    """S1 and S2 after each step 1..total of a run of `train` planned for `total` steps."""
    from scipy.signal import lfilter

    schedule = train.lr_schedule
    eta = np.array([schedule(k / total) for k in range(1, total + 1)]) / schedule.lr
    drop = np.maximum(np.concatenate([[0.0], eta[:-1] - eta[1:]]), 0.0)
    momentum = lfilter([1.0], [1.0, -MOMENTUM], drop)
    return np.cumsum(eta), np.cumsum(momentum)


_AREAS: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}


def _areas_at(run: Run, steps: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    sched = run.train.lr_schedule
    key = (sched, run.total)
    if key not in _AREAS:
        if len(_AREAS) > 256:
            _AREAS.clear()
        _AREAS[key] = _areas(run.train, run.total)
    s1, s2 = _AREAS[key]
    idx = (run.steps if steps is None else steps) - 1
    return s1[idx], s2[idx]


def _stack(runs: Sequence[Run]):
    """The runs' points as arrays: S1, S2, loss, size, and the index of each point's key."""
    keys = sorted({r.key for r in runs})
    col = {k: i for i, k in enumerate(keys)}
    parts = [
        (*_areas_at(r), r.losses, np.full(len(r.steps), r.size), np.full(len(r.steps), col[r.key]))
        for r in runs
    ]
    s1, s2, y, size, who = (np.concatenate(x) for x in zip(*parts))
    return keys, s1, s2, y, size, who.astype(int)


@dataclass(frozen=True)
class _Law:
    """A fitted law: the shared part and each key's amplitude."""

    alpha: float
    floor: float
    anneal: float
    slope: float
    amps: dict[str, float]
    sse: float

    def value(self, run: Run) -> float:
        """The loss at the end of `run` (its planned steps)."""
        s1, s2 = _areas_at(run, np.array([run.total]))
        floor = self.floor + (self.slope * run.size if self.slope else 0.0)
        return float(floor + self.amps[run.key] * s1[0] ** -self.alpha - self.anneal * s2[0])


def _fit(runs: Sequence[Run], shape: CurveShape | None = None) -> _Law:
    """Least squares of the law over `runs`: the best alpha on the grid (or the shape's), and
    given it, linearly, the shared (L0, C, k) (unless `shape` fixes them; k only when every run
    has a size) and one amplitude per key (eliminated in closed form: each key's amplitude is a
    projection on its own points)."""
    keys, s1, s2, y, size, who = _stack(runs)
    n = len(keys)
    sized = bool(np.all(np.isfinite(size)))
    if shape is not None and shape.size_slope and not sized:
        raise ValueError("the law's size term needs the model's parameter count")
    best = None
    for alpha in [shape.alpha] if shape else ALPHAS:
        x = s1 ** -float(alpha)
        xx = np.bincount(who, x * x, n)
        if shape:
            floor, anneal, slope = shape.floor, shape.anneal, shape.size_slope
        else:  # (L0, C, k) on what the amplitudes leave: each column minus its per-key fit on x
            cols = [np.ones_like(y), -s2] + ([size] if sized else [])
            Z = np.stack([*cols, y], axis=1)
            Z = (
                Z
                - x[:, None]
                * (np.stack([np.bincount(who, x * z, n) for z in Z.T], axis=1) / xx[:, None])[who]
            )
            coef, *_ = np.linalg.lstsq(Z[:, :-1], Z[:, -1], rcond=None)
            floor, anneal = float(coef[0]), float(coef[1])
            slope = float(coef[2]) if sized else 0.0
        rest = y - floor + anneal * s2 - (slope * size if slope else 0.0)
        amps = np.bincount(who, x * rest, n) / xx
        resid = rest - amps[who] * x
        sse = float(resid @ resid)
        if best is None or sse < best.sse:
            amp_of = {k: float(a) for k, a in zip(keys, amps)}
            best = _Law(float(alpha), float(floor), float(anneal), float(slope), amp_of, sse)
    assert best is not None
    return best


def fit_shape(runs: Sequence[Run], *, source: str = "") -> CurveShape:
    """The shape shared by `runs` (a study's trained and confirmation runs), with its errors
    measured out of sample: each run at a larger budget than its key's smallest is predicted
    from the others (across budgets), and each fully trained run's last eval point from its
    points up to each earlier one (within a run, by share seen). Errors fall back to the
    prior's where there is nothing to hold out."""
    runs = list(runs)
    if len(runs) > MAX_RUNS:
        rng = np.random.default_rng(0)
        runs = [runs[i] for i in sorted(rng.choice(len(runs), MAX_RUNS, replace=False))]
    if sum(len(r.steps) for r in runs) < len({r.key for r in runs}) + 3:
        raise ValueError("too few eval points to fit a shared curve shape")
    law = _fit(runs)
    fitted = CurveShape(
        law.floor,
        law.alpha,
        law.anneal,
        PRIOR.across_budgets,
        PRIOR.within_run,
        source,
        law.slope,
    )
    smallest: dict[str, int] = {}
    for r in runs:
        smallest[r.key] = min(smallest.get(r.key, r.total), r.total)
    across = []
    for i, r in enumerate(runs):
        if r.total > smallest[r.key]:
            others = _fit(runs[:i] + runs[i + 1 :])
            if r.key in others.amps:
                across.append(others.value(r) / r.losses[-1] - 1.0)
    within = []  # (share of the run seen, relative error of its predicted end)
    for r in runs:
        if r.steps[-1] == r.total:
            for i in range(1, len(r.steps)):
                head = replace(r, steps=r.steps[:i], losses=r.losses[:i])
                got = predict_final_run(head, fitted)
                within.append((r.steps[i - 1] / r.total, got / r.losses[-1] - 1.0))
    return replace(
        fitted,
        across_budgets=_rms(across) if across else PRIOR.across_budgets,
        within_run=_by_share(within) or PRIOR.within_run,
        source=source or f"fitted on {len(runs)} runs ({len(across)} at a larger budget)",
    )


def _rms(errors: Sequence[float]) -> float:
    return float(np.sqrt(np.mean(np.square(errors))))


def _by_share(errors: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """The within-run error table of (share seen, relative error) pairs: the RMS error per bin
    of `SHARE_BINS` that has `MIN_PER_BIN` of them, at their mean share; an error is never
    taken as smaller than the next larger share's (fewer points never predict better)."""
    rows = []
    for lo, hi in itertools.pairwise(SHARE_BINS):
        got = [(share, err) for share, err in errors if lo <= share < hi]
        if len(got) >= MIN_PER_BIN:
            shares, errs = zip(*got)
            rows.append((float(np.mean(shares)), _rms(errs)))
    table, larger = [], 0.0
    for share, err in reversed(rows):
        larger = max(larger, err)
        table.append((share, larger))
    return tuple(reversed(table))


def predict_final_run(run: Run, shape: CurveShape) -> float:
    """The loss at the end of `run` (its planned steps) from its points, given `shape`."""
    return _fit([run], shape).value(run)


def _prediction(run: Run, target: Run, shape: CurveShape, relative: float) -> Prediction:
    law = _fit([run], shape)
    value = law.value(target)
    if not math.isfinite(value):
        raise ValueError("the fitted curve has no finite value at the target")
    noise = math.sqrt(law.sse / max(1, len(run.steps) - 1))
    std = math.hypot(relative * value, noise)
    law_name = f"annealing law, alpha {shape.alpha:.2f}"
    if shape.size_slope:
        law_name += f", floor {shape.size_slope:+.3f} nats/token per e-fold of parameters"
    return Prediction(value, std, f"{law_name} ({shape.source})")


def predict_loss(
    curve: Mapping[str, Any],
    train: Mapping[str, Any] | TrainConfig,
    target_budget: str,
    *,
    shape: CurveShape | None = None,
    params: float | None = None,
) -> Prediction:
    """Validation loss of the same recipe trained on `target_budget` (e.g. "tokens:1.6M"; its
    schedule spans the whole target), from a trained trial's stored `curve`
    ({"evals": [...], "train": [...]}), the TrainConfig it trained with and its model's
    parameter count (ValueError without it where the shape has a size term)."""
    run = Run.of("trial", curve.get("evals") or [], train, params)
    target_cfg = replace(run.train, budget=target_budget)
    total = planned_steps(target_cfg, curve.get("evals") or [])
    if total < 1:
        raise ValueError(f"the target budget {target_budget} buys no optimizer step")
    target = replace(
        run, steps=np.array([total]), losses=np.array([np.nan]), total=total, train=target_cfg
    )
    shape = shape or PRIOR
    if total <= run.total:
        relative = shape.within(float(run.steps[-1]) / total)
    else:
        relative = shape.across_budgets
    return _prediction(run, target, shape, relative)


def predict_final(
    evals: Sequence[Mapping[str, Any]],
    train: Mapping[str, Any] | TrainConfig,
    *,
    shape: CurveShape | None = None,
    params: float | None = None,
) -> Prediction:
    """Validation loss this run will reach at the end of its own budget, from the eval points
    so far (dicts with `step` and `val_loss`, as the trainable reports them) and its model's
    parameter count. ValueError before an eval point past `MIN_FRACTION` of the run: the
    error of a prediction from that early was never measured."""
    run = Run.of("trial", evals, train, params)
    seen = float(run.steps[-1]) / run.total
    if seen < MIN_FRACTION:
        raise ValueError(
            f"only {seen:.0%} of the run seen: its end is predicted from {MIN_FRACTION:.0%} on"
        )
    target = replace(run, steps=np.array([run.total]), losses=np.array([np.nan]))
    shape = shape or PRIOR_WITHIN_RUN
    return _prediction(run, target, shape, shape.within(seen))
