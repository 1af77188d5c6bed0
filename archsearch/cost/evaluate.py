"""Cost metrics by name: the evaluator of every cost metric of `archsearch.metrics.METRICS`.

`@evaluator("cache_bytes")` registers, beside its formula, the function that computes a metric
for every row of a `Columns` table; its parameters after the table are the metric's arguments,
by name and in order. `metric_values` dispatches a `MetricSpec` through the registry
(tests/test_cost_metrics.py checks that it covers exactly the cost metrics once
`archsearch.latency` has registered the latency metrics).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import lru_cache

import numpy as np

from archsearch.arch import ArchConfig
from archsearch.cost.ops import Columns
from archsearch.metrics import METRICS, MetricSpec

Evaluator = Callable[..., np.ndarray]
EVALUATORS: dict[str, Evaluator] = {}


def evaluator(metric: str) -> Callable[[Evaluator], Evaluator]:
    """Register the decorated function `f(c: Columns, **args)` as the evaluator of `metric`
    (a cost metric whose arguments are the function's parameters after the table)."""

    def register(fn: Evaluator) -> Evaluator:
        mdef = METRICS.get(metric)
        if mdef is None or mdef.phase != "cost":
            raise ValueError(f"{metric!r} is not a cost metric of archsearch.metrics.METRICS")
        params = list(inspect.signature(fn).parameters)[1:]
        if params != list(mdef.args):
            raise ValueError(
                f"evaluator of {metric!r} takes {params}, the metric {list(mdef.args)}"
            )
        if metric in EVALUATORS:
            raise ValueError(f"{metric!r} has two evaluators")
        EVALUATORS[metric] = fn
        return fn

    return register


@lru_cache(maxsize=4096)
def columns(arch: ArchConfig) -> Columns:
    """The one-row cost table of an architecture (cached: ArchConfig is immutable)."""
    return Columns.from_archs([arch])


def metric_values(c: Columns, spec: MetricSpec) -> np.ndarray:
    """A cost metric of the space language for every row of a table (rows are evaluated in
    groups that use the same modules)."""
    fn = EVALUATORS.get(spec.metric)
    if fn is None:
        latency = "; the latency metrics are archsearch.latency's: price through it"
        raise ValueError(f"{spec.metric} has no evaluator here{latency}")
    args = dict(spec.args)
    if "device" in args and args["device"] is None:
        raise ValueError(f"{spec.label}: no device given")
    groups = c.groups()
    if len(groups) == 1:
        return fn(c, **args)
    out = np.empty(c.n)
    for idx, sub in groups:
        out[idx] = fn(sub, **args)
    return out


def metric_value(arch: ArchConfig, spec: MetricSpec) -> float:
    """A cost metric of one architecture."""
    return float(metric_values(columns(arch), spec)[0])


def train_flops_per_token(arch: ArchConfig, seq_len: int) -> float:
    """The `train_flops_per_token` metric of one architecture at context `seq_len`: the unit
    of FLOPs-matched budgets."""
    return metric_value(arch, MetricSpec("train_flops_per_token", (("context", seq_len),)))
