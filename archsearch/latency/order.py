"""Which of two architectures is faster, and how sure: the pairwise confidence of a profile.

A latency's +- (`devices.latency_error`) bounds one prediction; two neighbours on a front, each
with +-44%, overlap, and the front reads as unordered. Yet a profile's errors are largely
shared between architectures predicted under the same conditions (the same device, precision
and runtime): a profile that is 30% slow on one model tends to be 30% slow on the next. What
matters for "is A faster than B" is the difference of the two errors, and the held-out data of
the profile measures it.

A check's `held_out` errors e (pred / measured - 1) come in groups of shared conditions. For two
architectures whose predicted times have the ratio r = pred_A / pred_B < 1, the measured ratio
is r (1 + e_B) / (1 + e_A): the order is right unless log(1 + e_B) - log(1 + e_A) >= |log r|.
Transplanting every held-out pair of one group onto (A, B), in either orientation, a pair with
|log(1 + e_i) - log(1 + e_j)| < |log r| keeps the order in both and any other pair in one of
the two: the share of pairs that order A and B right is

    P(right | r) = (#{d < |log r|} + 0.5 #{d >= |log r|} + 1) / (pairs + 2),

d the absolute differences of log errors over the held-out pairs within groups, with Laplace's
+1 / +2, so a profile with 20 held-out pairs never claims certainty. At r = 1 it is 0.5 (a coin
toss); it reaches its ceiling once |log r| exceeds every held-out difference. The held-out
models are what the profile was checked on (published LLMs for a published fit, the
calibration's held-out models for a measured one): applying their differences to other
architectures assumes the errors of those are alike, as the +- itself does.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from archsearch.cost.devices import ERROR_QUANTITIES, DeviceProfile
from archsearch.errors import UserError
from archsearch.latency.profile import load_device
from archsearch.metrics import MetricSpec

__all__ = ["Ordering", "log_differences", "ordering", "spec_ordering"]


def log_differences(held_out: dict[str, tuple[float, ...]]) -> np.ndarray:
    """|log(1 + e_i) - log(1 + e_j)| over the pairs i < j of each group, all groups together."""
    out = []
    for errors in held_out.values():
        logs = np.log1p(np.asarray(errors, dtype=float))
        out += [abs(a - b) for a, b in itertools.combinations(logs, 2)]
    return np.asarray(out, dtype=float)


@dataclass(frozen=True)
class Ordering:
    """How often a profile orders two predictions of one latency metric right, as a function
    of their predicted ratio (`confidence`), from its held-out pairs."""

    differences: tuple[np.ndarray, ...]  # per quantity of the metric (e2e: TTFT and decode)
    method: str  # the checks the pairs came from

    @property
    def pairs(self) -> int:
        """Held-out pairs behind the figure (the fewest of the metric's quantities)."""
        return min(len(d) for d in self.differences)

    def confidence(self, ratio):
        """P(the order of the predictions is the order of the measured times) for predicted
        ratios `ratio` (either way round: 0.8 and 1.25 are the same pair); e2e takes the
        smaller of its parts'."""
        x = np.abs(np.log(np.asarray(ratio, dtype=float)))
        out = None
        for d in self.differences:
            below = (d[None, :] < x.reshape(-1, 1)).sum(axis=1)
            p = (below + 0.5 * (len(d) - below) + 1.0) / (len(d) + 2.0)
            out = p if out is None else np.minimum(out, p)
        return out.reshape(x.shape) if x.shape else float(out[0])


def ordering(device: DeviceProfile, metric: str, precision: str) -> Ordering | None:
    """The pairwise ordering of a latency metric predicted at `precision` on `device`; None
    where a check of its quantities is missing at that precision or stores no held-out errors
    (a profile written before they were kept) or fewer than one pair."""
    quantities = ERROR_QUANTITIES.get(metric)
    if quantities is None:
        raise ValueError(f"{metric!r} is not a latency metric")
    diffs, methods = [], []
    for q in quantities:
        check = device.check(q, precision)
        if check is None or not check.held_out:
            return None
        d = log_differences(check.held_out)
        if not len(d):
            return None
        diffs.append(d)
        methods.append(f"{q}: {check.method}")
    return Ordering(tuple(diffs), "; ".join(methods))


def spec_ordering(spec: MetricSpec) -> Ordering | None:
    """`ordering` of a latency metric with its device named (None for other metrics, a device
    left to the run, or a profile that does not load)."""
    args = dict(spec.args)
    if spec.metric not in ERROR_QUANTITIES or args.get("device") is None:
        return None
    try:
        return ordering(load_device(args["device"]), spec.metric, args["precision"])
    except UserError:
        return None
