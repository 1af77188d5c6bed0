"""Pricing a candidate before it trains: the cost-model numbers a trial stores, and its
constraint check. One function for the sweep's searcher, its feasibility check and the test
studies, so all three store and judge exactly the same numbers.

`assess` builds and prices one assignment for the sweep: any exception while resolving,
building or pricing a candidate (a derived value dividing by zero, a cost formula that cannot
handle it) makes that candidate invalid, with the exception as its reason; the sweep goes on.
`price_all` and `assess_all` do the same for many candidates at once (the `ehvi` sampler's pool,
the hypervolume's reference point): one cost table, each metric evaluated once over its rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from archsearch.arch import ArchConfig
from archsearch.metrics import METRICS, MetricSpec
from archsearch.space import SearchSpace, build
from archsearch.study import Status

__all__ = ["Assessed", "Priced", "assess", "assess_all", "price", "price_all"]

# device-dependent metrics every trial stores for every device, so analysis can redraw the front
# for any device profile without re-running the cost model
DEFAULT_LATENCIES = ("ttft_ms", "decode_ms", "e2e_ms")
# device-independent metrics every trial stores
ALWAYS = ("params", "non_embedding_params", "active_params")


@dataclass
class Priced:
    """A candidate's cost numbers and constraint violations (Optuna's convention: <= 0 is
    satisfied)."""

    arch: ArchConfig
    costs: dict[str, float]  # device-independent {label: value}
    device_costs: dict[str, dict[str, float]]  # {device: {label: value}}
    violations: dict[str, float]  # {constraint name: violation}
    reasons: list[str]  # one text per broken constraint

    @property
    def feasible(self) -> bool:
        return not self.reasons

    def value(self, spec: MetricSpec, device: str) -> float | None:
        """A priced metric's value; an unset device is the run's `device`."""
        spec = spec.on_device(device, only_unset=True)
        if spec.label in self.costs:
            return self.costs[spec.label]
        return self.device_costs.get(dict(spec.args).get("device"), {}).get(spec.label)

    def attrs(self) -> dict[str, Any]:
        """The trial attributes that describe the candidate (see `archsearch.study.schema`)."""
        arch = self.arch
        return {
            "summary": arch.summary(),
            "family": arch.family,
            "arch_hash": arch.arch_hash,
            "attention_share": arch.attention_share,
            "params": self.costs["params"],
            "active_params": self.costs["active_params"],
            "arch": arch.to_dict(),
            "costs": self.costs,
            "device_costs": self.device_costs,
        }


def price(space: SearchSpace, devices: list[str], device: str, arch: ArchConfig) -> Priced:
    """The space's cost metrics (device-dependent ones on every device profile in `devices`,
    the run's `device` and any device the space names), the default latencies on each of them,
    and the constraints judged on the run's `device` (or the device a constraint names)."""
    return price_all(space, devices, device, [arch])[0]


def price_all(
    space: SearchSpace, devices: list[str], device: str, archs: list[ArchConfig]
) -> list[Priced]:
    """`price` of each of `archs`, every metric evaluated once over their one cost table (the
    formulas are vectorised over rows, so a pool of hundreds costs about what one does); the
    same numbers as pricing them one by one. Raises if pricing any of them does."""
    from archsearch.cost.evaluate import columns
    from archsearch.cost.ops import Columns
    from archsearch.latency import metric_values, spec_errors
    from archsearch.latency.prune import margin_errors

    if not archs:
        return []
    table = columns(archs[0]) if len(archs) == 1 else Columns.from_archs(archs)
    specs = [o.spec for o in space.objectives] + [c.spec for c in space.constraints]
    named = {dict(s.args)["device"] for s in specs if dict(s.args).get("device")}
    devices = sorted({*devices, *named, device})
    costs: dict[str, np.ndarray] = {}
    device_costs: dict[str, dict[str, np.ndarray]] = {d: {} for d in devices}
    for spec in specs:
        if spec.phase != "cost":
            continue
        if "device" in dict(spec.args):
            for dev in devices:
                s = spec.on_device(dev)
                device_costs[dev][s.label] = metric_values(table, s)
        else:
            costs[spec.label] = metric_values(table, spec)
    for metric in ALWAYS:
        if metric not in costs:
            costs[metric] = metric_values(table, MetricSpec(metric))
    for dev in devices:
        for metric in DEFAULT_LATENCIES:
            s = MetricSpec(metric, tuple(METRICS[metric].args.items())).on_device(dev)
            if s.label not in device_costs[dev]:
                device_costs[dev][s.label] = metric_values(table, s)
    margins = {}
    for c in space.constraints:
        spec = c.spec.on_device(device, only_unset=True)
        errors = spec_errors(table, spec) if c.margin == "error" else None
        margins[c.name] = margin_errors(c, spec, errors, len(archs))
    out = []
    for i, arch in enumerate(archs):
        row_costs = {label: float(v[i]) for label, v in costs.items()}
        row_device = {
            d: {label: float(v[i]) for label, v in m.items()} for d, m in device_costs.items()
        }
        priced = Priced(arch, row_costs, row_device, {}, [])
        for c in space.constraints:
            value = priced.value(c.spec, device)
            priced.violations[c.name] = c.violation(value, float(margins[c.name][i]))
            if priced.violations[c.name] > 0:
                priced.reasons.append(f"{c.describe()} but is {value:.4g}")
        out.append(priced)
    return out


@dataclass
class Assessed:
    """One assignment built and priced: trainable when `status` is None; otherwise INVALID (it
    cannot be built, resolved or priced) or INFEASIBLE (it breaks a constraint), with `reason`
    (for the study) and `kinds` (short names, for counting: reasons or constraint names)."""

    priced: Priced | None
    status: Status | None = None
    reason: str = ""
    kinds: tuple[str, ...] = ()


def raised(stage: str, err: BaseException) -> str:
    """One line saying which exception a stage raised."""
    first = (str(err).strip().splitlines() or [""])[0]
    return f"{stage} raised {type(err).__name__}: {first}"[:300]


def assess(space: SearchSpace, devices: list[str], device: str, assignment) -> Assessed:
    """Build `assignment` (a dict, or a callable returning one: Optuna's suggestions) and price
    it; never raises for a candidate-specific failure."""
    built = _build(space, assignment)
    return built if isinstance(built, Assessed) else _priced_alone(space, devices, device, built)


def assess_all(space: SearchSpace, devices: list[str], device: str, assignments) -> list[Assessed]:
    """`assess` of each assignment, those that build priced together (`price_all`); where
    pricing them together raises, each is priced alone, so a failure stays its candidate's."""
    out = [_build(space, a) for a in assignments]
    archs = [b for b in out if isinstance(b, ArchConfig)]
    try:
        priced = iter(price_all(space, devices, device, archs))
    except Exception:
        return [
            b if isinstance(b, Assessed) else _priced_alone(space, devices, device, b) for b in out
        ]
    return [b if isinstance(b, Assessed) else _judged(next(priced)) for b in out]


def _build(space: SearchSpace, assignment) -> ArchConfig | Assessed:
    """The candidate's architecture, or why it is invalid."""
    try:
        cand = build(space, assignment() if callable(assignment) else assignment)
    except Exception as err:  # any failure of one candidate is that candidate's
        return Assessed(None, Status.INVALID, raised("building the candidate", err), ("error",))
    if not cand.ok:
        return Assessed(None, Status.INVALID, f"{cand.reason}: {cand.message}", (cand.reason,))
    return cand.arch


def _priced_alone(
    space: SearchSpace, devices: list[str], device: str, arch: ArchConfig
) -> Assessed:
    """A built candidate priced and judged; a failure to price makes it invalid."""
    try:
        priced = price(space, devices, device, arch)
    except Exception as err:
        return Assessed(None, Status.INVALID, raised("pricing the candidate", err), ("error",))
    return _judged(priced)


def _judged(priced: Priced) -> Assessed:
    if not priced.feasible:
        broken = tuple(n for n, v in priced.violations.items() if v > 0)
        return Assessed(priced, Status.INFEASIBLE, "; ".join(priced.reasons), broken)
    return Assessed(priced)
