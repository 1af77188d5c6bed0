"""The validation loss at a confirmed budget, learned across a study's architectures.

The learning-curve law (`archsearch.trainers.extrapolate`) predicts a larger budget's loss from
one trial's sandbox curve, with a shape the study shares. On `search_small` it misses the 10x
loss of the architectures not confirmed by 6.2% (MAPE; 4.7% leave-one-out over all 40), and
the misses follow the families: Mamba2 learns fast in the sandbox and gains less afterwards
(-7% on average), 4-layer attention the reverse (+5..+8%). Four eval points of a 78-step run
cannot show this; the study's confirmations (`archsearch confirm`) do. So, once a study holds
confirmations at a budget, the law's prediction is corrected by what they measured:

    ln L_confirmed = ln L_law + w . standardise(x) + b + e,   e ~ N(0, s^2)

with x = (ln L_law, ln parameters, ln training FLOPs per token, the share of the layers of each
sequence mixer: attention by kind, linear mixers by family, MCSD), fitted by scikit-learn's
`BayesianRidge` (one precision for w, one for e, both maximising the evidence): with few
confirmations w shrinks to 0 and the prediction is the law's, shifted by the confirmations'
mean log ratio. Why these features: size and compute per token are what scaling laws read
([Chinchilla]), the mixer is what the residuals above follow, and ln L_law carries the sandbox
curve (regressing on the features alone, without it, was worse). How close the corrected loss
comes to the loss trained at ten times the budget: `benchmarks/bench_loss_axis.py` (the
documentation's benchmarks page).

The 1-sigma error is the model's predictive one (BayesianRidge's, noise included), scaled up by
the RMS of the examples' own leave-one-out z-scores where that exceeds 1: the spread of what
the confirmations missed when each was held out. A candidate with a mixer no confirmation
showed is not predicted (`UnseenMixer`): the correction of its family was never measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from archsearch.arch import ArchConfig
from archsearch.trainers.extrapolate import Prediction

__all__ = [
    "MIN_EXAMPLES",
    "Example",
    "Traits",
    "Transfer",
    "UnseenMixer",
    "fit_transfer",
    "mixer_shares",
]

MIN_EXAMPLES = 4  # confirmations a transfer is fitted from


class UnseenMixer(ValueError):
    """The candidate has a sequence mixer no confirmation showed."""


@dataclass(frozen=True)
class Traits:
    """What the transfer reads of an architecture."""

    params: float
    flops_per_token: float  # training FLOPs per token
    mixers: tuple[tuple[str, float], ...]  # (mixer, share of the layers), by name

    @classmethod
    def of(cls, arch: ArchConfig | Mapping[str, Any], params: Any, flops_per_token: Any) -> Traits:
        """The traits of a stored or built architecture. ValueError for a count that is not a
        positive finite number (a stored study may hold anything)."""
        cfg = arch if isinstance(arch, ArchConfig) else ArchConfig.from_dict(dict(arch))
        return cls(
            _positive(params, "parameters"),
            _positive(flops_per_token, "FLOPs per token"),
            tuple(sorted(mixer_shares(cfg).items())),
        )

    def row(self, mixers: Sequence[str]) -> list[float]:
        """The features but ln L_law: ln parameters, ln FLOPs per token, each of `mixers`'
        share of the layers."""
        shares = dict(self.mixers)
        return [math.log(self.params), math.log(self.flops_per_token)] + [
            shares.get(m, 0.0) for m in mixers
        ]


def mixer_shares(arch: ArchConfig) -> dict[str, float]:
    """The share of the layers of each sequence mixer, named twice: by its class (`attention`,
    `linear`, `mcsd`) and by its kind (`attention/gqa`, `linear/mamba2`, ...), so that a kind
    no confirmation showed still gets its class's correction."""
    r = arch.resolved()
    kinds = {
        "N": "attention/" + (r.attention.kind if r.attention is not None else "mha"),
        "L": "linear/" + (r.linear.family if r.linear is not None else "gla"),
        "M": "mcsd",
    }
    pattern = r.pattern
    out: dict[str, float] = {}
    for letter in pattern:
        for name in {kinds[letter], kinds[letter].split("/")[0]}:
            out[name] = out.get(name, 0.0) + 1.0 / len(pattern)
    return out


def _positive(x: Any, what: str) -> float:
    ok = isinstance(x, (int, float)) and not isinstance(x, bool)
    if not (ok and math.isfinite(x) and x > 0):
        raise ValueError(f"{what} must be a positive number, got {x!r}")
    return float(x)


@dataclass(frozen=True)
class Example:
    """A confirmed architecture: its traits, the law's prediction of its loss at the
    confirmation's budget and the loss the confirmation measured (nats/token)."""

    traits: Traits
    law: float
    confirmed: float


@dataclass(frozen=True)
class Transfer:
    """A fitted correction of the law at one budget."""

    mixers: tuple[str, ...]  # the mixers the examples showed
    examples: int
    model: Any  # the fitted scikit-learn pipeline
    error_scale: float  # the predictive std's factor (>= 1)

    def predict(self, traits: Traits, law: float) -> Prediction:
        """The loss of an architecture of `traits` whose law predicts `law` nats/token.
        `UnseenMixer` when it has a mixer the examples did not show."""
        classes = {m for m, share in traits.mixers if share > 0 and "/" not in m}
        unseen = sorted(classes - set(self.mixers))
        if unseen:
            raise UnseenMixer(f"no confirmation has a {', '.join(unseen)} mixer")
        x = np.array([[math.log(law), *traits.row(self.mixers)]])
        mean, spread = self.model.predict(x, return_std=True)
        value = law * math.exp(float(mean[0]))
        std = value * float(spread[0]) * self.error_scale
        return Prediction(value, std, f"the law corrected by {self.examples} confirmations")


def _fit(x: np.ndarray, y: np.ndarray):
    from sklearn.linear_model import BayesianRidge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), BayesianRidge()).fit(x, y)


def fit_transfer(examples: Sequence[Example]) -> Transfer:
    """The correction learned from `examples` (ValueError with fewer than `MIN_EXAMPLES`)."""
    if len(examples) < MIN_EXAMPLES:
        raise ValueError(
            f"{len(examples)} confirmed architectures: the transfer needs {MIN_EXAMPLES}"
        )
    mixers = tuple(sorted({m for e in examples for m, share in e.traits.mixers if share > 0}))
    x = np.array([[math.log(e.law), *e.traits.row(mixers)] for e in examples])
    y = np.log([e.confirmed / e.law for e in examples])
    z = []
    for i in range(len(examples)):
        keep = np.arange(len(examples)) != i
        mean, std = _fit(x[keep], y[keep]).predict(x[i : i + 1], return_std=True)
        z.append((y[i] - mean[0]) / std[0])
    scale = max(1.0, float(np.sqrt(np.mean(np.square(z)))))
    return Transfer(mixers, len(examples), _fit(x, y), scale)
