"""The cost model: exact counts (params, FLOPs/MACs, cache bytes, working sets) of architectures,
known before training, vectorised over tables of candidates, and the roofline latency of the
published-fit device profiles. The learned predictor of a calibrated profile, its calibration and
the latency metrics by name are `archsearch.latency`'s, the layer above.

    from archsearch.cost import metric_value
    metric_value(arch, MetricSpec.parse("cache_bytes[context=2048]"))

Modules, bottom up:
- `ops`: the candidate table (`Columns`), a `Phase` of a forward, one operation (`Op`);
- `attention`, `linear`, `mcsd`, `ffn`: each family's ops, parameters and decode state, beside
  its siblings (checked against torch's FLOP counter and the real modules);
- `counts`: the whole model's ops, parameters and state;
- `evaluate`: the registry of cost-metric evaluators (`@evaluator`, filled beside each formula)
  and `metric_values`, which dispatches through it;
- `devices`: a device profile's figures as data (peaks, efficiencies, provenance, validation and
  the error a latency carries); `model`: model-level sums, working sets and the roofline;
- `fit`: a published-fit profile's efficiencies fitted to published throughputs.
"""

from __future__ import annotations

from archsearch.cost import model
from archsearch.cost.counts import params, state_elements
from archsearch.cost.devices import DeviceProfile
from archsearch.cost.evaluate import (
    EVALUATORS,
    columns,
    evaluator,
    metric_value,
    metric_values,
    train_flops_per_token,
)
from archsearch.cost.ops import Columns, Op, Phase

__all__ = [
    "EVALUATORS",
    "Columns",
    "DeviceProfile",
    "Op",
    "Phase",
    "columns",
    "evaluator",
    "metric_value",
    "metric_values",
    "model",
    "params",
    "state_elements",
    "train_flops_per_token",
]
