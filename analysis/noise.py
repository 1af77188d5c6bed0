"""Seed noise: how far a training objective moves when the same architecture is trained again
with another seed, pooled over a study, and the dominance test that allows for it.

- **Seeds of a trained trial**: the trial itself (the study's `train.seed`) and every replicate
  (`Status.REPLICATE`, attribute `replicate_of` = its number, its objective values in
  `replicate_values`). Per training objective: n, mean and sample standard deviation.
- **The study's seed noise**, per training objective: the pooled standard deviation over every
  replicated architecture i (n_i seeds, sample std s_i),
  sigma^2 = sum_i (n_i - 1) s_i^2 / sum_i (n_i - 1), with dof = sum_i (n_i - 1) degrees of
  freedom. Seed noise is taken to be the same for every architecture of a study: three seeds
  give one architecture's std with 2 degrees of freedom, too few to tell it from another's,
  while the pooled figure has those of all replicated architectures together. A point's
  standard error is sigma / sqrt(n) (n = its seeds, 1 when it was not replicated).
- **Noise-aware dominance** (`compare`): A dominates B when A is at least as good on every
  axis by its mean value (cost axes are exact) and strictly better on one, and on every
  training axis where A's mean is better the difference exceeds
  t_{0.95, dof} * sigma * sqrt(1/n_A + 1/n_B): a one-sided two-sample Student t test with
  pooled variance at the 5% level. When A dominates B by means but not significantly, the
  two are tied: B stays on the noise-aware front, marked "tied with #A". A study without
  replicates (dof = 0) has plain dominance, and says "seed noise not measured (replicates=0)".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from archsearch.analysis.front import Axis, non_dominated, value_of
from archsearch.metrics import METRICS, parse_label
from archsearch.study import Status, TrialRecord

__all__ = [
    "ALPHA",
    "NOT_MEASURED",
    "Outcome",
    "Pooled",
    "SeedNoise",
    "compare",
    "is_training",
    "noise_aware_front",
    "pooled_std",
    "replicate_value",
    "seed_noise",
    "t_quantile",
]

ALPHA = 0.05  # one-sided level of the dominance test
NOT_MEASURED = "seed noise not measured (replicates=0)"


class Outcome(str, Enum):
    """How a point A stands to a point B under noise-aware dominance."""

    DOMINATES = "dominates"  # better by means, significantly on every noisy axis it is better
    TIED = "tied"  # better by means, but within the seed noise on a noisy axis
    NEITHER = "neither"  # not better by means


def is_training(label: str) -> bool:
    """Whether an axis is a training objective (its value comes from a trained model, so it
    varies with the seed); unknown labels count as training ones, as in `default_axes`."""
    name = parse_label(label)[0]
    return name not in METRICS or METRICS[name].phase == "train"


def t_quantile(dof: int) -> float:
    """t_{1 - ALPHA, dof}, the one-sided Student t quantile (nan without degrees of freedom)."""
    if dof <= 0:
        return float("nan")
    from scipy.stats import t

    return float(t.ppf(1.0 - ALPHA, dof))


@dataclass(frozen=True)
class Pooled:
    """A study's seed noise on one training objective."""

    std: float  # pooled seed standard deviation, in the objective's unit (nan: not measured)
    dof: int  # degrees of freedom: sum of (seeds - 1) over the replicated architectures
    architectures: int  # replicated architectures (two seeds or more) it pools
    t: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "t", t_quantile(self.dof))

    @property
    def measured(self) -> bool:
        return self.dof > 0 and math.isfinite(self.std)

    def threshold(self, n_a: Any, n_b: Any) -> Any:
        """The least difference of means of A (n_a seeds) and B (n_b seeds) the one-sided
        test at ALPHA calls significant: t * sigma * sqrt(1/n_a + 1/n_b)."""
        return self.t * self.std * np.sqrt(1.0 / np.asarray(n_a) + 1.0 / np.asarray(n_b))


def pooled_std(groups: Iterable[Sequence[float]]) -> Pooled:
    """The pooled sample standard deviation of groups of seed values (one group per
    architecture; non-finite values left out; groups of one value carry no information)."""
    ss, dof, archs = 0.0, 0, 0
    for group in groups:
        x = np.asarray([v for v in group if v is not None and math.isfinite(v)], dtype=float)
        if len(x) < 2:
            continue
        ss += float(((x - x.mean()) ** 2).sum())  # (n_i - 1) s_i^2
        dof += len(x) - 1
        archs += 1
    return Pooled(math.sqrt(ss / dof) if dof else float("nan"), dof, archs)


def replicate_value(rep: TrialRecord, label: str, objectives: list[str]) -> float | None:
    """A replicate's value of a training axis: its stored objective values
    (`replicate_values`) for an objective of the study, else its stored training results."""
    stored = rep.attrs.get("replicate_values")
    if label in objectives and isinstance(stored, list) and len(stored) == len(objectives):
        v = stored[objectives.index(label)]
        return float(v) if v is not None else None
    return value_of(rep, label, objectives)


@dataclass
class SeedNoise:
    """The seeds of each trained trial on each training axis, and the study's pooled noise."""

    labels: list[str]  # the training axes covered
    counts: np.ndarray  # [trials, labels]: seeds with a finite value (1: not replicated)
    means: np.ndarray  # [trials, labels]: mean over those seeds
    pooled: dict[str, Pooled]  # per label
    replicates: int  # replicate trials of these trials that were read

    @property
    def measured(self) -> bool:
        """Whether any training axis has a measured seed noise (replicates with dof > 0)."""
        return any(p.measured for p in self.pooled.values())

    def noisy(self, label: str) -> Pooled | None:
        """The measured noise of an axis (None: an exact axis, or not measured)."""
        p = self.pooled.get(label)
        return p if p is not None and p.measured else None

    def seeds(self, label: str) -> np.ndarray | None:
        """Seeds per trial on a noisy axis (None for any other)."""
        if self.noisy(label) is None:
            return None
        return self.counts[:, self.labels.index(label)]

    def std_error(self, label: str) -> np.ndarray | None:
        """Per trial the standard error of its mean on a noisy axis, sigma / sqrt(n)."""
        p, n = self.noisy(label), self.seeds(label)
        return None if p is None or n is None else p.std / np.sqrt(n)

    def replicated_architectures(self) -> int:
        """Trained architectures with at least two seeds on some training axis."""
        return int((self.counts > 1).any(axis=1).sum()) if self.counts.size else 0

    def describe(self) -> str:
        """One line: the pooled seed std per training axis and its dof, or that it was not
        measured."""
        if not self.measured and self.replicates:
            return (
                f"{self.replicates} replicate trials, but no seed noise on these axes (cost axes "
                "are exact; a training axis needs two seeds of one architecture)"
            )
        if not self.measured:
            return NOT_MEASURED
        parts = [
            f"{label}: sigma {p.std:.3g} ({p.dof} dof, {p.architectures} architectures)"
            for label, p in self.pooled.items()
            if p.measured
        ]
        return (
            f"pooled seed std {'; '.join(parts)}; {self.replicates} replicate trials of "
            f"{self.replicated_architectures()} architectures; dominance by a one-sided "
            f"pooled t test at {ALPHA:.0%}"
        )

    def summary(self) -> dict[str, Any]:
        """As plain data (front.json)."""
        return {
            "measured": self.measured,
            "replicates": self.replicates,
            "replicated_architectures": self.replicated_architectures(),
            "test": f"one-sided two-sample Student t, pooled variance, alpha={ALPHA}",
            "pooled": {
                label: {
                    "std": p.std if p.measured else None,
                    "dof": p.dof,
                    "architectures": p.architectures,
                    "t": p.t if p.measured else None,
                }
                for label, p in self.pooled.items()
            },
            "note": self.describe(),
        }


def seed_noise(
    trained: list[TrialRecord],
    values: np.ndarray,
    axes: list[Axis],
    records: list[TrialRecord],
    objectives: list[str],
) -> SeedNoise:
    """The seeds of each of `trained` (its own values: `values` [len(trained), len(axes)]) on
    each training axis, gathered from the replicates among `records`, and the pooled noise per
    axis. Only the replicated trials are visited (a study without replicates costs one pass
    over the statuses)."""
    cols = [k for k, a in enumerate(axes) if is_training(a.label)]
    labels = [axes[k].label for k in cols]
    reps: dict[int, list[TrialRecord]] = {}
    for r in records:
        if r.status == Status.REPLICATE:
            link = r.attrs.get("replicate_of")
            if link is not None:
                reps.setdefault(int(link), []).append(r)
    counts = np.ones((len(trained), len(labels)), dtype=int)
    means = np.array(values, dtype=float)[:, cols].reshape(len(trained), len(labels))
    groups: dict[str, list[list[float]]] = {label: [] for label in labels}
    read = 0
    for i, r in enumerate(trained):
        mine = reps.get(r.number)
        if not mine:
            continue
        read += len(mine)
        for j, label in enumerate(labels):
            seeds = [means[i, j], *(replicate_value(x, label, objectives) for x in mine)]
            finite = [float(v) for v in seeds if v is not None and math.isfinite(v)]
            counts[i, j] = max(1, len(finite))
            means[i, j] = float(np.mean(finite)) if finite else float("nan")
            groups[label].append(finite)
    pooled = {label: pooled_std(groups[label]) for label in labels}
    return SeedNoise(labels, counts, means, pooled, read)


def compare(
    a: Sequence[float],
    b: Sequence[float],
    n_a: Sequence[int],
    n_b: Sequence[int],
    axes: list[Axis],
    noise: Sequence[Pooled | None],
) -> Outcome:
    """Noise-aware dominance of point A (means `a`, seeds `n_a` per axis) over point B; `noise`
    per axis: its measured `Pooled` seed noise, or None for an exact axis (see the module
    docstring)."""
    signs = np.array([ax.sign for ax in axes])
    sa, sb = np.asarray(a, dtype=float) * signs, np.asarray(b, dtype=float) * signs
    if not (np.all(sa <= sb) and np.any(sa < sb)):
        return Outcome.NEITHER
    for k, pooled in enumerate(noise):
        better = pooled is not None and sa[k] < sb[k]
        if better and not sb[k] - sa[k] > pooled.threshold(n_a[k], n_b[k]):
            return Outcome.TIED
    return Outcome.DOMINATES


def noise_aware_front(
    values: np.ndarray, axes: list[Axis], noise: SeedNoise
) -> tuple[np.ndarray, dict[int, list[int]]]:
    """(mask of the points no other point dominates significantly, {row: the rows that
    dominate it by means but within the noise}) over `values` [n, len(axes)] (means; the rows
    of `noise`). Without measured noise on any axis: the plain front and no ties. Each point
    dominated by means is checked against every point (O(n^2) then; the plain front stays
    O(n log n))."""
    plain = non_dominated(values, axes)
    noisy = [noise.noisy(a.label) for a in axes]
    if not any(noisy):
        return plain, {}
    signed = np.asarray(values, dtype=float) * np.array([a.sign for a in axes])
    finite = np.flatnonzero(np.isfinite(signed).all(axis=1))
    s = signed[finite]
    seeds = [noise.seeds(a.label) for a in axes]
    mask, ties = plain.copy(), {}
    for b in finite[~plain[finite]]:
        by_means = np.all(s <= signed[b], axis=1) & np.any(s < signed[b], axis=1)
        significant = by_means.copy()
        for k, pooled in enumerate(noisy):
            if pooled is None:
                continue
            n = seeds[k]
            better = s[:, k] < signed[b, k]
            margin = signed[b, k] - s[:, k]
            significant &= ~better | (margin > pooled.threshold(n[finite], n[b]))
        if not significant.any():
            mask[b] = True
            ties[int(b)] = finite[by_means].tolist()
    return mask, ties
