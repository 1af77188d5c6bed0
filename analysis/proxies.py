"""Cheap signals checked against the sandbox loss: for each training
objective of a study, Spearman's rho and Kendall's tau-b (`scipy.stats`) between the trained
trials' sandbox values of it and each cheap signal the study stores, so a user learns which
signal would have ranked the candidates as well for less.

The signals, where the study has them:
- `params`, `non_embedding_params`: every trial's stored costs;
- `train_flops_per_token`: the stored cost when the space names it, else the trainer's FLOPs
  per token (`budget.flops_per_token`);
- `probe_acc[TASK]`: the accuracy on each probe task the trials ran;
- the validation loss early in training: at the last evaluation point at or before
  `EARLY_FRACTION` (25%) of the budget (`curve["evals"]`; the default `eval_at` has one at 25%).
  The last such point, not the first, is what a quarter of the budget would have told.

Over the trained trials (one per architecture), with each one's own stored value (its sandbox
seed, not a mean over replicates): the ranking a sweep acted on. A correlation needs three trials
with both values and neither constant (else it is not a number, shown '-').
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from archsearch.analysis.front import value_of
from archsearch.analysis.noise import is_training
from archsearch.metrics import MetricSpec
from archsearch.study import StudyData, TrialRecord

__all__ = ["EARLY_FRACTION", "Correlation", "Proxies", "cheap_signals", "early_loss", "proxies"]

EARLY_FRACTION = 0.25
EARLY_SIGNAL = f"val_loss at <={EARLY_FRACTION:.0%} of the budget"


@dataclass(frozen=True)
class Correlation:
    """The rank agreement of one cheap signal with one training objective."""

    objective: str
    signal: str
    n: int  # trials with both values
    spearman: float  # rho; nan when n < 3 or either side is constant
    kendall: float  # tau-b; nan likewise


@dataclass
class Proxies:
    """Every (objective, signal) correlation of a study, best |tau| first per objective."""

    rows: list[Correlation]
    trials: int  # trained trials considered
    early_fractions: list[float]  # the budget fractions of the early losses used

    def best(self, objective: str) -> Correlation | None:
        """The signal that ranks the trials most like `objective` (largest |tau|)."""
        found = [c for c in self.rows if c.objective == objective and math.isfinite(c.kendall)]
        return found[0] if found else None

    def lines(self) -> list[str]:
        """The findings in words, one line per objective."""
        if not self.rows:
            return ["the study has no training objective and cheap signal to compare"]
        out = []
        for objective in dict.fromkeys(c.objective for c in self.rows):
            best = self.best(objective)
            if best is None:
                out.append(f"{objective}: no cheap signal has enough trials to rank")
            else:
                out.append(
                    f"{objective}: the cheap signal ranking the {self.trials} trained trials "
                    f"most alike is {best.signal} (Kendall tau {best.kendall:+.2f}, Spearman "
                    f"{best.spearman:+.2f}, n {best.n})"
                )
        if self.early_fractions:
            at = sorted(set(self.early_fractions))
            span = f"{at[0]:.0%}" if len(at) == 1 else f"{at[0]:.0%}-{at[-1]:.0%}"
            out.append(f"the early validation loss was read at {span} of the budget")
        return out

    def summary(self) -> dict[str, Any]:
        """As plain data (the report's JSON)."""
        return {
            "trials": self.trials,
            "method": "Spearman rho and Kendall tau-b (scipy.stats) over the trained trials",
            "early_fraction_max": EARLY_FRACTION,
            "correlations": [
                {
                    "objective": c.objective,
                    "signal": c.signal,
                    "n": c.n,
                    "spearman": _or_none(c.spearman),
                    "kendall": _or_none(c.kendall),
                }
                for c in self.rows
            ],
        }


def _or_none(v: float) -> float | None:
    return v if math.isfinite(v) else None


def early_loss(curve: Any) -> tuple[float, float] | None:
    """(fraction, validation loss) of the last evaluation point at or before EARLY_FRACTION of
    the budget in a stored `curve` attribute; None when there is none."""
    evals = curve.get("evals") if isinstance(curve, dict) else None
    best = None
    for e in evals or []:
        f, loss = e.get("fraction"), e.get("val_loss")
        if f is None or loss is None or not math.isfinite(loss) or f > EARLY_FRACTION + 1e-9:
            continue
        if best is None or f >= best[0]:
            best = (float(f), float(loss))
    return best


def cheap_signals(r: TrialRecord) -> dict[str, float]:
    """A trained trial's stored cheap signals (without the early loss, which needs its curve)."""
    costs = r.attrs.get("costs") or {}
    out: dict[str, float] = {}
    for name in ("params", "non_embedding_params"):
        if costs.get(name) is not None:
            out[name] = float(costs[name])
    flops = next((v for k, v in costs.items() if k.split("[")[0] == "train_flops_per_token"), None)
    if flops is None:
        flops = (r.attrs.get("budget") or {}).get("flops_per_token")
    if flops is not None:
        out["train_flops_per_token"] = float(flops)
    for task, probe in sorted((r.attrs.get("probes") or {}).items()):
        if isinstance(probe, dict) and probe.get("acc") is not None:
            out[MetricSpec("probe_acc", (("task", task),)).label] = float(probe["acc"])
    return out


def proxies(data: StudyData, trained: list[TrialRecord]) -> Proxies:
    """The correlations of every training objective of `data` with every cheap signal, over
    `trained` (fully trained feasible trials)."""
    from scipy.stats import kendalltau, spearmanr

    signals = [cheap_signals(r) for r in trained]
    curves = data.curves([r.number for r in trained]) if trained else {}
    fractions = []
    for r, s in zip(trained, signals):
        early = early_loss(curves.get(r.number))
        if early is not None:
            s[EARLY_SIGNAL] = early[1]
            fractions.append(early[0])
    names = list(dict.fromkeys(k for s in signals for k in s))
    rows = []
    for objective in [o for o in data.objectives if is_training(o)]:
        y_all = [value_of(r, objective, data.objectives) for r in trained]
        found = []
        for name in names:
            if name == objective:
                continue
            pairs = [
                (s[name], y)
                for s, y in zip(signals, y_all)
                if name in s and y is not None and math.isfinite(s[name]) and math.isfinite(y)
            ]
            x, y = [a for a, _ in pairs], [b for _, b in pairs]
            rho = tau = float("nan")
            if len(pairs) >= 3 and len(set(x)) > 1 and len(set(y)) > 1:
                rho = float(spearmanr(x, y).statistic)
                tau = float(kendalltau(x, y).statistic)
            found.append(Correlation(objective, name, len(pairs), rho, tau))
        found.sort(key=lambda c: -abs(c.kendall) if math.isfinite(c.kendall) else math.inf)
        rows += found
    return Proxies(rows, len(trained), fractions)
