"""Pareto-aware early stopping (`early_stopping=pareto`).

ASHA and the median rule stop a trial for its first training objective alone, so a model whose
loss trails but whose latency would put it on the front is stopped with the rest. This rule
stops a trial only when even its optimistic outcome could not reach the front:

- its cost objectives (latency, memory, ...) are known before it trains: the launched
  candidate's priced costs (with `latency.mode=measured` a measured latency is not known yet,
  so that axis gives no bound);
- its final validation loss is predicted from its eval points so far and its parameter count
  by `archsearch.trainers.extrapolate.predict_final` (value +- std, nats/token; the std is the
  error measured at the share of the run seen, larger at its first eval point than at its
  third); the optimistic loss is value - `MARGIN_SIGMAS` std (`val_ppl` = exp of it; a
  maximised objective is mirrored: value + margin). A training objective the prediction does
  not cover (a probe accuracy, a loss at another budget) is left unbounded: the trial could be
  best there, so it is never stopped on that objective's account;
- the trial is stopped when that optimistic vector is Pareto-dominated (at least as good on
  every objective, strictly better on one) by a fully trained feasible trial of the study, any
  driver's. When there is no prediction (no eval point past 20% of the run yet, a non-finite
  fit: ValueError) the trial goes on.

Before the study has a front to compare with, a second test compares like with like, after
multi-objective successive halving ([MO-ASHA]): at each eval point (a rung) the trial's loss
and its cost objectives are compared with those of every other trial that reached the same
fraction of the same budget; the trial is stopped when one of them is no worse on every cost
objective and lower in loss by more than `RUNG_MARGIN` (relative): twice the standard deviation
of the difference of two single-seed losses on `search_small`'s ground truth
(`benchmarks/bench_loss_axis.py`), wider than the gap by which a true-front member trails a
no-slower architecture there at any rung. It applies
only where every training objective is a measured `val_loss` / `val_ppl` (a probe accuracy or
a loss predicted at another budget could rank otherwise).

The stopped trial is recorded STOPPED_EARLY with a reason naming the prediction (or the rung
comparison) and the trial that dominates it (`SweepState.stop_reasons`, read by the recorder).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from archsearch.metrics import MetricSpec
from archsearch.sweep.state import Launched, SweepState

__all__ = [
    "MARGIN_SIGMAS",
    "RUNG_MARGIN",
    "Dominator",
    "ParetoRule",
    "create_scheduler",
    "dominator",
    "non_dominated",
    "optimistic_vector",
    "stop_reason",
]

# the optimistic loss: prediction - 2 std (about 98% one-sided, if normal; on the search_small
# ground truth 1 of 40 runs' ends lies below it from their 25% point, none from 50% or 75%)
MARGIN_SIGMAS = 2.0
# same-rung comparison: a loss lower by more than 4% dominates: twice the standard deviation of
# the difference of two single-seed losses on search_small at 160K tokens (pooled seed std
# 0.034 nats/token at a loss of ~2.3: 2 x sqrt(2) x 1.5% ~= 4%, benchmarks/bench_loss_axis.py)
RUNG_MARGIN = 0.04
EVAL_KEYS = ("step", "tokens", "fraction", "flops", "val_loss", "train_loss")


@dataclass(frozen=True)
class Dominator:
    """A trained trial whose objective values dominate a running trial's optimistic vector."""

    number: int
    values: tuple[float, ...]


def dominates(a: Sequence[float], b: Sequence[float], directions: Sequence[str]) -> bool:
    """Whether `a` Pareto-dominates `b`: at least as good on every objective, better on one."""
    signs = [1.0 if d == "minimize" else -1.0 for d in directions]
    at_least = all(s * x <= s * y for s, x, y in zip(signs, a, b, strict=True))
    return at_least and any(s * x < s * y for s, x, y in zip(signs, a, b, strict=True))


def non_dominated(trials: Sequence[Dominator], directions: Sequence[str]) -> list[Dominator]:
    """The trials no other of `trials` dominates (whatever dominates a vector, a member of
    this set does too, so it stands for all of them)."""
    return [
        t
        for t in trials
        if not any(dominates(o.values, t.values, directions) for o in trials if o is not t)
    ]


def dominator(
    vector: Sequence[float], directions: Sequence[str], trained: Sequence[Dominator]
) -> Dominator | None:
    """The first of `trained` that dominates `vector` (the lowest-numbered), or None."""
    for t in sorted(trained, key=lambda t: t.number):
        if dominates(t.values, vector, directions):
            return t
    return None


def optimistic_vector(
    specs: Sequence[MetricSpec],
    directions: Sequence[str],
    loss: float,
    std: float,
    costs: Mapping[str, float | None],
    margin: float = MARGIN_SIGMAS,
) -> list[float]:
    """The best outcome a running trial can plausibly reach, one value per objective: a
    predicted validation loss `loss` +- `std` (nats/token) moved `margin` std towards better,
    and its known `costs` by label (None or absent: unknown, no bound)."""
    out = []
    for spec, direction in zip(specs, directions, strict=True):
        best = -math.inf if direction == "minimize" else math.inf
        toward = -1.0 if direction == "minimize" else 1.0
        optimistic_loss = loss + toward * margin * std
        if spec.phase != "train":
            value = costs.get(spec.label)
            out.append(best if value is None else float(value))
        elif spec.metric == "val_loss" and spec.predicted_at is None:
            out.append(optimistic_loss)
        elif spec.metric == "val_ppl" and spec.predicted_at is None:
            out.append(math.exp(optimistic_loss))
        else:
            out.append(best)
    return out


def _shown(label: str, value: float) -> str:
    from archsearch.units import human

    spec = MetricSpec.parse(label)
    unit = spec.definition.unit
    if unit == "nats":
        return f"{label} {value:.3g} nats/token"
    if unit in ("ms", "bytes"):
        return f"{label} {human(value, 'B' if unit == 'bytes' else unit)}"
    if unit == "flops":
        return f"{label} {human(value, 'FLOP')}"
    return f"{label} {value:.4g}"


def stop_reason(
    fraction: float,
    loss: float,
    std: float,
    labels: Sequence[str],
    by: Dominator,
) -> str:
    """The stored reason of a trial this rule stopped."""
    values = ", ".join(_shown(label, v) for label, v in zip(labels, by.values, strict=True))
    return (
        f"stopped by Pareto-aware early stopping at {fraction:.0%} of the budget: predicted "
        f"val_loss {loss:.3g} +- {std:.2g} nats/token, dominated by trial {by.number} ({values})"
    )


class ParetoRule:
    """The rule's bookkeeping and decision, apart from Ray (see the module docstring): the eval
    points of each running trial, and the study's front, re-read when it may have changed."""

    def __init__(self, state: SweepState, margin: float = MARGIN_SIGMAS):
        self.state = state
        self.margin = margin
        self.evals: dict[str, list[dict[str, float]]] = {}
        # fraction -> (trial number, loss there, cost objective values) of every trial that
        # reached that eval point
        self.rungs: dict[float, list[tuple[int, float, tuple[float | None, ...]]]] = {}
        self._front: list[Dominator] = []
        self._front_at = -1  # state.trained when the front was last read

    def front(self) -> list[Dominator]:
        """The non-dominated fully trained feasible trials of the study, re-read only when the
        count of trained trials changed (this driver's recorder or a sync with the others)."""
        if self._front_at != self.state.trained:
            self._front_at = self.state.trained
            directions = [o.direction for o in self.state.space.objectives]
            trained = [
                Dominator(r.number, tuple(r.values))
                for r in self.state.writer.records()
                if r.fully_trained and r.values and len(r.values) == len(directions)
            ]
            self._front = non_dominated(trained, directions)
        return self._front

    def observe(self, tune_id: str, result: Mapping[str, Any]) -> bool:
        """Keep an intermediate result's eval point; True when the trial should stop (its
        reason is then in `state.stop_reasons`)."""
        if result.get("final"):
            return False
        point = {k: float(result[k]) for k in EVAL_KEYS if isinstance(result.get(k), (int, float))}
        if math.isfinite(point.get("val_loss", math.nan)) and "step" in point:
            self.evals.setdefault(tune_id, []).append(point)
        launched = self.state.by_tune_id.get(tune_id)
        points = self.evals.get(tune_id, [])
        if launched is None or not points:
            return False
        reason = self.judge(launched, points, float(result.get("fraction", 0.0)))
        if reason is None:
            return False
        self.state.stop_reasons[tune_id] = reason
        return True

    def judge(self, launched: Launched, points: list[dict[str, float]], fraction: float):
        """The stop reason for a trial at its eval points so far, or None to let it go on."""
        from archsearch.trainers.extrapolate import predict_final

        loss = points[-1].get("val_loss", math.nan)
        if launched is not None and math.isfinite(loss):
            reason = self.judge_rung(launched, loss, fraction)
            if reason is not None:
                return reason
        try:
            params = launched.costs.get("params") if launched is not None else None
            prediction = predict_final(points, self.state.train, params=params)
        except ValueError:  # cannot be fitted yet: never stop on a failed fit
            return None
        if not (math.isfinite(prediction.value) and math.isfinite(prediction.std)):
            return None
        specs = self.state.objective_specs
        directions = [o.direction for o in self.state.space.objectives]
        costs = {s.label: _cost(launched, s) for s in specs if s.phase != "train"}
        vector = optimistic_vector(
            specs, directions, prediction.value, prediction.std, costs, self.margin
        )
        by = dominator(vector, directions, self.front())
        if by is None:
            return None
        labels = [s.label for s in specs]
        return stop_reason(fraction, prediction.value, prediction.std, labels, by)

    def judge_rung(self, launched: Launched, loss: float, fraction: float) -> str | None:
        """The same-rung test (module docstring): record this trial's loss at `fraction`, and
        the reason to stop it when an earlier arrival at the same fraction dominates it."""
        specs = self.state.objective_specs
        directions = [o.direction for o in self.state.space.objectives]
        train = [(s, d) for s, d in zip(specs, directions) if s.phase == "train"]
        if not train or any(
            s.metric not in ("val_loss", "val_ppl") or s.predicted_at or d != "minimize"
            for s, d in train
        ):
            return None
        costs = tuple(_cost(launched, s) for s in specs if s.phase != "train")
        cost_dirs = [d for s, d in zip(specs, directions) if s.phase != "train"]
        here = self.rungs.setdefault(round(fraction, 6), [])
        number = launched.optuna_trial.number
        reason = None
        for other, other_loss, other_costs in here:
            if other == number or other_loss >= loss * (1.0 - RUNG_MARGIN):
                continue
            if all(
                a is not None and b is not None and (a <= b if d == "minimize" else a >= b)
                for a, b, d in zip(other_costs, costs, cost_dirs)
            ):
                reason = (
                    f"stopped by Pareto-aware early stopping at {fraction:.0%} of the budget: "
                    f"val_loss {loss:.3g} nats/token there, more than {RUNG_MARGIN:.0%} above "
                    f"trial {other}'s at the same point ({other_loss:.3g}), whose cost "
                    "objectives are no worse"
                )
                break
        here.append((number, loss, costs))
        return reason

    def forget(self, tune_id: str) -> None:
        self.evals.pop(tune_id, None)


def _cost(launched: Launched, spec: MetricSpec) -> float | None:
    """A cost objective's value as the recorder will store it (None: measured later)."""
    if launched.measure_ref is not None and spec.definition.unit == "ms":
        return None  # latency.mode=measured: timed on the real model, not known yet
    value = launched.costs.get(spec.label)
    if value is None:
        from archsearch.latency import metric_value

        value = metric_value(launched.arch, spec)
    return value


def create_scheduler(state: SweepState, metric: str, mode: str, margin: float = MARGIN_SIGMAS):
    """The Ray Tune scheduler (a `FIFOScheduler`) applying `ParetoRule`; `metric` is the result
    key Tune checks every result for. Ray is imported here only, after the sweep contained it."""
    from ray.tune.schedulers import FIFOScheduler, TrialScheduler

    class ParetoStopping(FIFOScheduler):
        def __init__(self):
            super().__init__()
            self._metric = metric
            self.mode = mode
            self.rule = ParetoRule(state, margin)

        def on_trial_result(self, tune_controller, trial, result: dict) -> str:
            stop = self.rule.observe(trial.trial_id, result)
            return TrialScheduler.STOP if stop else TrialScheduler.CONTINUE

        def on_trial_complete(self, tune_controller, trial, result) -> None:
            self.rule.forget(trial.trial_id)

        def on_trial_error(self, tune_controller, trial) -> None:
            self.rule.forget(trial.trial_id)

        def on_trial_remove(self, tune_controller, trial) -> None:
            self.rule.forget(trial.trial_id)

        def debug_string(self) -> str:
            return "Pareto-aware early stopping (archsearch)."

    return ParetoStopping()
