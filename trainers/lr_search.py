"""Fair trials: each candidate trains at the peak learning rate it trains best at.

A ranking of architectures trained at one learning rate partly ranks how well each suits that
rate; [MAD] therefore trains every architecture over a small grid of rates and keeps the best.
With `lr_search: halving` a trial does the same within a share of its own budget, by successive
halving [SH] over `lr_grid`: every rate trains a short run, the better half trains again for
twice as long, and so on until one rate is left, at which the trial then trains on its whole
budget.

Each short run is a whole run of its own: the trial's schedule over the run's own budget (so the
rates are compared after their schedules have annealed, not mid-way where a higher rate always
looks worse), the trial's seed (the same initialisation and data order: the rates are compared
paired) and the trial's validation windows. A rate whose run diverges (a non-finite loss) loses.

Compute: with k rates and R = ceil(log2 k) rounds, round i trains ceil(k / 2^i) rates for
b * 2^i steps each; b is the largest whole number of steps for which the rounds together spend
at most `lr_search_share` of the trial's training budget (in steps, or seconds for a time
budget). The search's tokens, FLOPs and wall time are kept with the trial (`RateSearch`), so its
cost is counted, and a trial killed after its search resumes at the chosen rate without
searching again.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "RateSearch",
    "SearchPlan",
    "SearchRun",
    "at_trained_rate",
    "plan_search",
    "run_search",
    "trained_rate",
]

# a short run below this many optimizer steps says little about a rate; the plan still runs it
# (the trial's budget decides), and the search records that it was short
MIN_STEPS = 20


@dataclass(frozen=True)
class SearchPlan:
    """How long each round's runs train: `amounts[i]` steps (or seconds, `kind="time"`)."""

    grid: tuple[float, ...]
    kind: str  # steps | time
    amounts: tuple[float, ...]

    def survivors(self, round_: int) -> int:
        """How many rates train in round `round_`."""
        return math.ceil(len(self.grid) / 2**round_)

    @property
    def total(self) -> float:
        """Steps (or seconds) the whole search trains."""
        return sum(self.survivors(i) * a for i, a in enumerate(self.amounts))

    def budget(self, round_: int) -> str:
        """The budget of one run of round `round_`, in the sandbox's budget syntax."""
        amount = self.amounts[round_]
        return f"time:{amount:.6g}s" if self.kind == "time" else f"steps:{int(amount)}"


def plan_search(grid: tuple[float, ...], budget: float, share: float, kind: str) -> SearchPlan:
    """Successive halving over `grid` within `share` of a trial's `budget` (steps, or seconds
    for `kind="time"`); see the module docstring. At least one step per run."""
    rounds = max(1, math.ceil(math.log2(len(grid)))) if len(grid) > 1 else 0
    weight = sum(math.ceil(len(grid) / 2**i) * 2**i for i in range(rounds))
    if rounds == 0:
        return SearchPlan(tuple(grid), kind, ())
    base = share * budget / weight
    if kind != "time":
        base = max(1, math.floor(base))
    return SearchPlan(tuple(grid), kind, tuple(base * 2**i for i in range(rounds)))


@dataclass
class SearchRun:
    """One short run of the search: its rate, round, budget and validation score (nats per
    token; `inf` when it failed, with the reason)."""

    lr: float
    round: int
    budget: str
    score: float
    tokens: int = 0
    flops: float = 0.0
    wall_s: float = 0.0
    reason: str = ""


@dataclass
class RateSearch:
    """What a trial's rate search did and chose (stored with the trial as `lr_search`)."""

    method: str
    grid: list[float]
    share: float
    chosen: float | None
    runs: list[SearchRun] = field(default_factory=list)
    short: bool = False  # a run trained fewer than MIN_STEPS steps

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.runs)

    @property
    def flops(self) -> float:
        return sum(r.flops for r in self.runs)

    @property
    def wall_s(self) -> float:
        return sum(r.wall_s for r in self.runs)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(tokens=self.tokens, flops=self.flops, wall_s=self.wall_s)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RateSearch:
        runs = [SearchRun(**r) for r in data.get("runs", [])]
        keep = {k: data[k] for k in ("method", "grid", "share", "chosen", "short") if k in data}
        return cls(**keep, runs=runs)


Train = Callable[[float, str, int], SearchRun]


def run_search(plan: SearchPlan, train: Train, *, share: float) -> RateSearch:
    """Successive halving over `plan.grid` (planned for `share` of a trial's budget):
    `train(lr, budget, round)` trains one short run and returns it scored. Ties go to the
    lower rate; `chosen` is None when every run failed."""
    short = plan.kind == "steps" and bool(plan.amounts) and plan.amounts[0] < MIN_STEPS
    search = RateSearch("halving", list(plan.grid), share, chosen=None, short=short)
    alive = sorted(plan.grid)
    if len(alive) == 1:
        search.chosen = alive[0]
        return search
    for round_ in range(len(plan.amounts)):
        runs = [train(lr, plan.budget(round_), round_) for lr in alive]
        search.runs.extend(runs)
        ranked = sorted(runs, key=lambda r: (not math.isfinite(r.score), r.score, r.lr))
        alive = [r.lr for r in ranked[: plan.survivors(round_ + 1)] if math.isfinite(r.score)]
        if not alive:
            return search
    search.chosen = alive[0]
    return search


def trained_rate(search: dict[str, Any] | None) -> float | None:
    """The rate a stored trial's search chose (None for a trial trained at a fixed rate)."""
    if not isinstance(search, dict):
        return None
    chosen = search.get("chosen")
    return float(chosen) if isinstance(chosen, (int, float)) and chosen > 0 else None


def at_trained_rate(train: dict[str, Any], search: dict[str, Any] | None) -> dict[str, Any]:
    """Training settings that train again as a searched trial trained: at the rate its search
    chose, without searching (replicates, confirmations, an exported recipe). Settings of a
    trial trained at a fixed rate come back unchanged."""
    rate = trained_rate(search)
    if rate is None:
        return dict(train)
    return {**train, "lr": rate, "lr_search": "off"}
