"""The latency metrics by name: `ttft_ms`, `decode_ms` and `e2e_ms` of a named device, registered
in the cost model's registry of evaluators (`archsearch.cost.evaluate`), and the error each
carries (`spec_errors`: per candidate, `spec_error`: the profile's one figure).
"""

from __future__ import annotations

import numpy as np

from archsearch.cost.devices import ERROR_QUANTITIES, latency_error
from archsearch.cost.evaluate import evaluator
from archsearch.cost.ops import Columns
from archsearch.errors import UserError
from archsearch.latency.predict import decode_s, e2e_s, latency_errors, ttft_s
from archsearch.latency.profile import load_device
from archsearch.metrics import MetricSpec

__all__ = ["spec_error", "spec_errors"]


@evaluator("ttft_ms")
def ttft_ms(c: Columns, device: str, prompt: int, precision: str) -> np.ndarray:
    return 1e3 * ttft_s(c, load_device(device), prompt, precision)


@evaluator("decode_ms")
def decode_ms(c: Columns, device: str, context: int, precision: str) -> np.ndarray:
    return 1e3 * decode_s(c, load_device(device), context, precision)


@evaluator("e2e_ms")
def e2e_ms(c: Columns, device: str, prompt: int, generate: int, precision: str) -> np.ndarray:
    return 1e3 * e2e_s(c, load_device(device), prompt, generate, precision)


def spec_errors(c: Columns, spec: MetricSpec) -> np.ndarray | None:
    """`predict.latency_errors` of a latency metric with its device named (None for other
    metrics, a device left to the run, or a profile that states no error)."""
    args = dict(spec.args)
    if spec.metric not in ERROR_QUANTITIES or args.get("device") is None:
        return None
    settings = {k: args.get(k, 0) for k in ("prompt", "context", "generate")}
    device = load_device(args["device"])
    return latency_errors(c, device, spec.metric, args["precision"], **settings)


def spec_error(spec: MetricSpec) -> float | None:
    """The profile's one error figure of a latency metric with its device named (None for
    other metrics, a device left to the run, or a profile that does not load)."""
    args = dict(spec.args)
    if spec.metric not in ERROR_QUANTITIES or args.get("device") is None:
        return None
    try:
        return latency_error(load_device(args["device"]), spec.metric, args["precision"])
    except UserError:
        return None
