"""Pricing a candidate before it trains: the cost-model numbers a trial stores, and its
constraint check. One function for the sweep's searcher, its feasibility check and the test
studies, so all three store and judge exactly the same numbers.

`assess` builds and prices one assignment for the sweep: any exception while resolving,
building or pricing a candidate (a derived value dividing by zero, a cost formula that cannot
handle it) makes that candidate invalid, with the exception as its reason; the sweep goes on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from archsearch.arch import ArchConfig
from archsearch.metrics import METRICS, MetricSpec
from archsearch.space import SearchSpace, build
from archsearch.study import Status

__all__ = ["Assessed", "Priced", "assess", "price"]

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
    from archsearch.cost.evaluate import columns
    from archsearch.latency import metric_value, spec_errors
    from archsearch.latency.prune import margin_errors

    specs = [o.spec for o in space.objectives] + [c.spec for c in space.constraints]
    named = {dict(s.args)["device"] for s in specs if dict(s.args).get("device")}
    devices = sorted({*devices, *named, device})
    costs: dict[str, float] = {}
    device_costs: dict[str, dict[str, float]] = {d: {} for d in devices}
    for spec in specs:
        if spec.phase != "cost":
            continue
        if "device" in dict(spec.args):
            for dev in devices:
                s = spec.on_device(dev)
                device_costs[dev][s.label] = metric_value(arch, s)
        else:
            costs[spec.label] = metric_value(arch, spec)
    for metric in ALWAYS:
        costs.setdefault(metric, metric_value(arch, MetricSpec(metric)))
    for dev in devices:
        for metric in DEFAULT_LATENCIES:
            s = MetricSpec(metric, tuple(METRICS[metric].args.items())).on_device(dev)
            device_costs[dev].setdefault(s.label, metric_value(arch, s))
    priced = Priced(arch, costs, device_costs, {}, [])
    for c in space.constraints:
        value = priced.value(c.spec, device)
        spec = c.spec.on_device(device, only_unset=True)
        errors = spec_errors(columns(arch), spec) if c.margin == "error" else None
        margin = margin_errors(c, spec, errors, 1)
        priced.violations[c.name] = c.violation(value, float(margin[0]))
        if priced.violations[c.name] > 0:
            priced.reasons.append(f"{c.describe()} but is {value:.4g}")
    return priced


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
    try:
        cand = build(space, assignment() if callable(assignment) else assignment)
    except Exception as err:  # any failure of one candidate is that candidate's
        return Assessed(None, Status.INVALID, raised("building the candidate", err), ("error",))
    if not cand.ok:
        return Assessed(None, Status.INVALID, f"{cand.reason}: {cand.message}", (cand.reason,))
    try:
        priced = price(space, devices, device, cand.arch)
    except Exception as err:
        return Assessed(None, Status.INVALID, raised("pricing the candidate", err), ("error",))
    if not priced.feasible:
        broken = tuple(n for n, v in priced.violations.items() if v > 0)
        return Assessed(priced, Status.INFEASIBLE, "; ".join(priced.reasons), broken)
    return Assessed(priced)
