"""The cost model: exact counts (params, FLOPs/MACs, cache bytes) and predicted edge latency.

    from archsearch.cost import metric_value, train_flops_per_token
    metric_value(arch, MetricSpec("decode_ms", (("device", "rpi5"), ("context", 2048),
                                                ("precision", "q4"))))

`counts` holds the per-module formulas (checked against torch's FLOP counter and the real
modules), `model` the model-level sums and the roofline latency model, `devices` the device
profiles, `table` the vectorised evaluation of whole candidate tables and the pruning.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from archsearch.arch import ArchConfig
from archsearch.cost import model
from archsearch.cost.counts import Columns, Phase, params, state_elements
from archsearch.cost.devices import DeviceProfile, load_device
from archsearch.space.metrics import MetricSpec

__all__ = [
    "Columns",
    "DeviceProfile",
    "Phase",
    "columns",
    "load_device",
    "metric_value",
    "metric_values",
    "params",
    "state_elements",
    "train_flops_per_token",
]


@lru_cache(maxsize=4096)
def columns(arch: ArchConfig) -> Columns:
    """The one-row cost table of an architecture (cached: ArchConfig is immutable)."""
    return Columns.from_archs([arch])


def metric_values(c: Columns, spec: MetricSpec) -> np.ndarray:
    """A cost metric of the space language for every row of a table (rows are evaluated in
    groups that use the same modules)."""
    groups = c.groups()
    if len(groups) == 1:
        return _metric_values(c, spec)
    out = np.empty(c.n)
    for idx, sub in groups:
        out[idx] = _metric_values(sub, spec)
    return out


def _metric_values(c: Columns, spec: MetricSpec) -> np.ndarray:
    a = dict(spec.args)
    m = spec.metric
    if m in ("params", "non_embedding_params", "active_params"):
        return params(c)[m]
    if m == "cache_bytes":
        return model.cache_bytes(c, a["context"], a["bits"], a["batch"])
    if m == "weight_bytes":
        return model.weight_bytes(c, a["precision"])
    if m == "memory_bytes":
        return model.memory_bytes(c, a["context"], a["precision"], a["batch"])
    if m == "prefill_flops":
        return model.flops(c, Phase("forward", T=a["tokens"], B=a["batch"], causal="half"))
    if m == "train_flops_per_token":
        return model.train_flops_per_token(c, a["context"])
    if m in ("ttft_ms", "decode_ms", "e2e_ms"):
        if a["device"] is None:
            raise ValueError(f"{spec.label}: no device given")
        dev = load_device(a["device"])
        prec = a["precision"]
        if m == "ttft_ms":
            return 1e3 * model.ttft_s(c, dev, a["prompt"], prec)
        if m == "decode_ms":
            return 1e3 * model.decode_s(c, dev, a["context"], prec)
        return 1e3 * model.e2e_s(c, dev, a["prompt"], a["generate"], prec)
    raise ValueError(f"{m} is not a cost metric")


def metric_value(arch: ArchConfig, spec: MetricSpec) -> float:
    return float(metric_values(columns(arch), spec)[0])


def train_flops_per_token(arch: ArchConfig, seq_len: int) -> float:
    """Forward + backward FLOPs per training token at context `seq_len` (causal attention
    counted over visible pairs, LM head included): the unit of FLOPs-matched budgets."""
    return float(model.train_flops_per_token(columns(arch), seq_len)[0])
